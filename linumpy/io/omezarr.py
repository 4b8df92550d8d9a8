"""OME-Zarr images: NGFF 0.5 (zarr v3) and 0.4 (zarr v2) multiscales, zstd-compressed.

The metadata written here follows the OME-NGFF specification (``axes`` with units,
``coordinateTransformations`` scales per level); ``ome-zarr`` reads the result.
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import numcodecs
import numpy as np
import zarr
from zarr.storage import LocalStore

from linumpy._xp import array_module, to_numpy
from linumpy.errors import LinumpyError

__all__ = [
    "OmeZarrWriter",
    "downsample_mean",
    "multiscale_dataset_paths",
    "open_array",
    "read_omezarr",
    "save_omezarr",
]

NgffVersion = Literal["0.4", "0.5"]
_AXIS_NAMES = "tczyx"
_AXIS_TYPES = {"t": "time", "c": "channel"}


def parse_ngff_version(value: str) -> NgffVersion:
    """Return ``value`` if it is a supported OME-NGFF version, else raise ValueError."""
    if value not in ("0.4", "0.5"):
        raise ValueError(f"ngff_version must be '0.4' or '0.5', got {value!r}")
    return value  # type: ignore[return-value]


def parse_voxel_size(value: Sequence[float], ndim: int) -> tuple[float, ...]:
    """Return the voxel size as floats, one positive value per axis, else raise ValueError."""
    sizes = tuple(float(v) for v in value)
    if len(sizes) != ndim or not all(math.isfinite(v) and v > 0 for v in sizes):
        raise ValueError(f"voxel_size must hold {ndim} positive numbers, got {tuple(value)}")
    return sizes


def _parse_block(
    value: Sequence[int] | None, shape: tuple[int, ...], name: str
) -> tuple[int, ...] | None:
    if value is None:
        return None
    block = tuple(int(v) for v in value)
    if len(block) != len(shape) or min(block) < 1:
        raise ValueError(f"{name} must hold {len(shape)} positive integers, got {tuple(value)}")
    return block


def _axes(ndim: int, unit: str) -> list[dict[str, str]]:
    if not 2 <= ndim <= 5:
        raise ValueError(f"OME-Zarr images have 2 to 5 dimensions, got {ndim}")
    axes = []
    for name in _AXIS_NAMES[-ndim:]:
        kind = _AXIS_TYPES.get(name, "space")
        axes.append({"name": name, "type": kind, **({"unit": unit} if kind == "space" else {})})
    return axes


def _level_shapes(shape: tuple[int, ...], n_levels: int) -> list[tuple[int, ...]]:
    shapes = [shape]
    for _ in range(n_levels - 1):
        shapes.append(tuple(-(-s // 2) for s in shapes[-1]))
    return shapes


def _level_factor(shape: tuple[int, ...], level: int) -> tuple[int, ...]:
    """Downsampling factor of each axis at ``level`` (axes of size 1 stop shrinking)."""
    factors = []
    for size in shape:
        factor = 1
        for _ in range(level):
            if size > 1:
                size = -(-size // 2)
                factor *= 2
        factors.append(factor)
    return tuple(factors)


def _open_node(path: str | os.PathLike[str]) -> zarr.Array | zarr.Group:
    path = Path(path)
    if not path.exists():
        raise LinumpyError(f"{path}: no such file or directory")
    try:
        return zarr.open(store=LocalStore(path, read_only=True), mode="r")
    except (FileNotFoundError, zarr.errors.NodeNotFoundError, ValueError) as exc:
        raise LinumpyError(f"{path}: not a zarr array or OME-Zarr image ({exc})") from None


def open_array(path: str | os.PathLike[str], level: int = 0) -> zarr.Array:
    """Open an OME-Zarr image's multiscale level, or a plain zarr array, read-only.

    Parameters
    ----------
    path
        An OME-Zarr image (NGFF 0.4 or 0.5) or a zarr array (v2 or v3) on the local file system.
    level
        The multiscale level (0 is full resolution); a plain array has level 0 only.

    Returns
    -------
    zarr.Array
        The array, opened read-only: reading never writes anything.

    Raises
    ------
    LinumpyError
        When the path does not exist, is not zarr, or has no such level.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> path = tempfile.mkdtemp() + "/volume.ome.zarr"
    >>> save_omezarr(np.ones((8, 8, 8), np.uint8), path, voxel_size=(1, 1, 1), n_levels=2)
    >>> array = open_array(path, level=1)
    >>> array.shape, array.read_only
    ((4, 4, 4), True)
    """
    node = _open_node(path)
    if isinstance(node, zarr.Array):
        if level != 0:
            raise LinumpyError(f"{path}: a plain zarr array has only level 0, not level {level}")
        return node
    return _level_array(node, path, level)


def _level_array(node: zarr.Group, path: str | os.PathLike[str], level: int) -> zarr.Array:
    paths = multiscale_dataset_paths(node, path)
    if not 0 <= level < len(paths):
        raise LinumpyError(
            f"{path}: level {level} out of range; the image has levels 0 to {len(paths) - 1}"
        )
    array = node.get(paths[level])
    if not isinstance(array, zarr.Array):
        raise LinumpyError(f"{path}: level {level} ({paths[level]!r}) is not a zarr array")
    return array


def multiscale_dataset_paths(group: zarr.Group, path: str | os.PathLike[str]) -> list[str]:
    """The dataset paths of an OME-Zarr image's first multiscale, level 0 first.

    Raises
    ------
    LinumpyError
        When the group carries no OME-NGFF multiscales metadata.

    Examples
    --------
    >>> import numpy as np, tempfile, zarr
    >>> path = tempfile.mkdtemp() + "/volume.ome.zarr"
    >>> save_omezarr(np.ones((8, 8, 8), np.uint8), path, voxel_size=(1, 1, 1), n_levels=3)
    >>> multiscale_dataset_paths(zarr.open_group(path, mode="r"), path)
    ['0', '1', '2']
    """
    multiscale = _multiscale(group, path)
    return [dataset["path"] for dataset in multiscale["datasets"]]


def _multiscale(group: zarr.Group, path: str | os.PathLike[str]) -> dict[str, Any]:
    attrs = group.attrs.asdict()
    multiscales = attrs.get("ome", attrs).get("multiscales")
    if not multiscales or not multiscales[0].get("datasets"):
        raise LinumpyError(f"{path}: a zarr group without OME-NGFF multiscales metadata")
    return multiscales[0]


def _scale(transforms: Sequence[dict[str, Any]]) -> list[float] | None:
    for transform in transforms:
        if transform.get("type") == "scale":
            return [float(v) for v in transform["scale"]]
    return None


def read_omezarr(
    path: str | os.PathLike[str], level: int = 0
) -> tuple[zarr.Array, tuple[float, ...]]:
    """Open one level of an OME-Zarr image (NGFF 0.4 or 0.5) lazily, read-only.

    Parameters
    ----------
    path
        The image's top-level group.
    level
        The multiscale level (0 is full resolution).

    Returns
    -------
    array : zarr.Array
        The level's array; nothing is read until it is sliced.
    voxel_size : tuple of float
        The level's scale along each axis, in the axes' units.

    Raises
    ------
    LinumpyError
        When the path is missing, is not an OME-Zarr image, or has no such level.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> path = tempfile.mkdtemp() + "/image.ome.zarr"
    >>> save_omezarr(np.ones((4, 8, 8), np.uint16), path, voxel_size=(10.0, 2.5, 2.5))
    >>> array, voxel_size = read_omezarr(path)
    >>> array.shape, voxel_size
    ((4, 8, 8), (10.0, 2.5, 2.5))
    """
    group = _open_node(path)
    if isinstance(group, zarr.Array):
        raise LinumpyError(f"{path}: a plain zarr array, not an OME-Zarr image")
    array = _level_array(group, path, level)
    multiscale = _multiscale(group, path)
    scale = _scale(multiscale["datasets"][level].get("coordinateTransformations", []))
    if scale is None:
        raise LinumpyError(f"{path}: level {level} has no scale transformation")
    global_scale = _scale(multiscale.get("coordinateTransformations", [])) or [1.0] * len(scale)
    return array, tuple(s * g for s, g in zip(scale, global_scale, strict=True))


def downsample_mean(array: Any) -> Any:
    """Halve every axis longer than 1 by averaging pairs, as OME-Zarr pyramid levels are built.

    An odd last element is paired with itself. Floats are averaged in their own precision;
    integers in float64, then rounded (half to even) and clipped to their dtype.

    Examples
    --------
    >>> import numpy as np
    >>> downsample_mean(np.array([[1, 2, 3], [5, 6, 7]], dtype=np.uint8))
    array([[4, 5]], dtype=uint8)
    >>> downsample_mean(np.array([1.0, 2.0, 4.0, 8.0]))
    array([1.5, 6. ])
    """
    xp = array_module(array)
    dtype = array.dtype
    work = array if dtype.kind in "fc" else array.astype(xp.float64)
    half = work.dtype.type(0.5)
    for axis, size in enumerate(work.shape):
        if size < 2:
            continue
        if size % 2:
            last = [slice(None)] * work.ndim
            last[axis] = slice(size - 1, size)
            work = xp.concatenate([work, work[tuple(last)]], axis=axis)
        even = [slice(None)] * work.ndim
        odd = [slice(None)] * work.ndim
        even[axis] = slice(0, None, 2)
        odd[axis] = slice(1, None, 2)
        work = (work[tuple(even)] + work[tuple(odd)]) * half
    if dtype.kind in "fc":
        return work
    if dtype.kind == "b":
        return work >= 0.5
    info = np.iinfo(dtype)
    return xp.clip(xp.round(work), info.min, info.max).astype(dtype)


class OmeZarrWriter:
    """Write an OME-Zarr image block by block, then build its pyramid.

    The image and every level's array are created up front (with the multiscales metadata);
    ``writer[region] = block`` writes full-resolution data; :meth:`finalize` computes levels
    1 to ``n_levels - 1`` by 2x mean downsampling. Writes whose regions align with the chunks
    (or with the shards, when sharded) are the fast ones: a partial chunk or shard is read back
    and rewritten.

    Parameters
    ----------
    path
        The image's top-level directory.
    shape, dtype
        Shape and dtype of the full-resolution data (2 to 5 axes, named from ``tczyx``'s tail).
    voxel_size
        Size of a voxel along each axis, in ``unit`` (1 for time and channel axes).
    chunks
        Chunk shape; 128 along each axis (clipped to the shape) by default.
    shards
        Shard shape (NGFF 0.5 only), a multiple of ``chunks``; None for no sharding.
    n_levels
        Number of pyramid levels, full resolution included.
    level
        zstd compression level.
    overwrite
        Replace an existing ``path``; without it an existing path is an error.
    ngff_version
        ``"0.5"`` (zarr v3) or ``"0.4"`` (zarr v2, for older tools).
    unit
        Unit of the spatial axes.
    fill_value
        Value of regions never written.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> path = tempfile.mkdtemp() + "/tiles.ome.zarr"
    >>> with OmeZarrWriter(path, (8, 16, 16), np.uint8, voxel_size=(1, 1, 1),
    ...                    chunks=(8, 8, 8), n_levels=2) as writer:
    ...     writer[:, :8, :8] = np.full((8, 8, 8), 3, np.uint8)
    >>> read_omezarr(path, level=1)[0].shape
    (4, 8, 8)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        shape: Sequence[int],
        dtype: np.typing.DTypeLike,
        *,
        voxel_size: Sequence[float],
        chunks: Sequence[int] | None = None,
        shards: Sequence[int] | None = None,
        n_levels: int = 1,
        level: int = 3,
        overwrite: bool = False,
        ngff_version: NgffVersion = "0.5",
        unit: str = "micrometer",
        fill_value: Any = 0,
    ) -> None:
        self.path = Path(path)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.ngff_version = parse_ngff_version(ngff_version)
        self.voxel_size = parse_voxel_size(voxel_size, len(self.shape))
        axes = _axes(len(self.shape), unit)
        chunks = _parse_block(chunks, self.shape, "chunks") or tuple(min(128, s) for s in shape)
        shards = _parse_block(shards, self.shape, "shards")
        if shards is not None:
            if ngff_version == "0.4":
                raise ValueError("shards need zarr v3: use ngff_version='0.5'")
            if any(s % c for s, c in zip(shards, chunks, strict=True)):
                raise ValueError(f"shards {shards} must be multiples of chunks {chunks}")
        if not isinstance(n_levels, int) or n_levels < 1:
            raise ValueError(f"n_levels must be a positive integer, got {n_levels!r}")
        if self.path.exists():
            if not overwrite:
                raise LinumpyError(f"{self.path} exists; pass overwrite=True to replace it")
            shutil.rmtree(self.path) if self.path.is_dir() else self.path.unlink()
        zarr_format = 3 if self.ngff_version == "0.5" else 2
        store = LocalStore(self.path)
        group = zarr.open_group(store=store, mode="w", zarr_format=zarr_format)
        self.arrays: list[zarr.Array] = []
        datasets = []
        for index, level_shape in enumerate(_level_shapes(self.shape, n_levels)):
            level_chunks = tuple(min(c, s) for c, s in zip(chunks, level_shape))
            level_shards = None
            if shards is not None:
                level_shards = tuple(
                    min(sh, -(-s // c) * c) for sh, s, c in zip(shards, level_shape, level_chunks)
                )
            compressor: Any = (
                zarr.codecs.ZstdCodec(level=level) if zarr_format == 3 else numcodecs.Zstd(level)
            )
            self.arrays.append(
                group.create_array(
                    str(index),
                    shape=level_shape,
                    dtype=self.dtype,
                    chunks=level_chunks,
                    shards=level_shards,
                    compressors=compressor,
                    fill_value=fill_value,
                    chunk_key_encoding={
                        "name": "default" if zarr_format == 3 else "v2",
                        "separator": "/",
                    },
                    **({"dimension_names": [a["name"] for a in axes]} if zarr_format == 3 else {}),
                )
            )
            factor = _level_factor(self.shape, index)
            scale = [v * f for v, f in zip(self.voxel_size, factor)]
            datasets.append(
                {
                    "path": str(index),
                    "coordinateTransformations": [{"type": "scale", "scale": scale}],
                }
            )
        multiscale = {"name": self.path.name, "axes": axes, "datasets": datasets}
        if zarr_format == 3:
            group.attrs["ome"] = {"version": "0.5", "multiscales": [multiscale]}
        else:
            group.attrs["multiscales"] = [{"version": "0.4", **multiscale}]
        self._finalized = False

    @property
    def array(self) -> zarr.Array:
        """The full-resolution array."""
        return self.arrays[0]

    def __setitem__(self, region: Any, block: Any) -> None:
        self.arrays[0][region] = to_numpy(block)

    def finalize(self) -> None:
        """Build pyramid levels 1 and up, each from the level above, with :func:`downsample_mean`.

        Levels are computed block by block (a target shard, or chunk, at a time) in a thread
        pool, so memory stays bounded by a few blocks whatever the image's size.
        """
        for source, target in zip(self.arrays, self.arrays[1:]):
            _downsample_level(source, target)
        self._finalized = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None and not self._finalized:
            self.finalize()


def _downsample_level(source: zarr.Array, target: zarr.Array) -> None:
    factors = [2 if size > 1 else 1 for size in source.shape]
    block = target.shards or target.chunks

    def build(origin: tuple[int, ...]) -> None:
        out = tuple(slice(o, min(o + b, n)) for o, b, n in zip(origin, block, target.shape))
        target[out] = downsample_mean(
            source[tuple(slice(s.start * f, s.stop * f) for s, f in zip(out, factors))]
        )

    starts = itertools.product(*(range(0, n, b) for n, b in zip(target.shape, block)))
    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
        for _ in pool.map(build, starts):
            pass


def save_omezarr(
    data: Any,
    path: str | os.PathLike[str],
    *,
    voxel_size: Sequence[float],
    chunks: Sequence[int] | None = None,
    shards: Sequence[int] | None = None,
    n_levels: int = 1,
    level: int = 3,
    overwrite: bool = False,
    ngff_version: NgffVersion = "0.5",
    unit: str = "micrometer",
) -> None:
    """Write an array as a zstd-compressed OME-Zarr multiscale image.

    Parameters
    ----------
    data
        A numpy, dask or cupy array with 2 to 5 axes (named from ``tczyx``'s tail).
    path
        The image's top-level directory.
    voxel_size
        Size of a voxel along each axis, in ``unit``.
    chunks, shards, n_levels, level, overwrite, ngff_version, unit
        As for :class:`OmeZarrWriter`.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> path = tempfile.mkdtemp() + "/volume.ome.zarr"
    >>> save_omezarr(np.zeros((64, 64, 64), np.uint16), path, voxel_size=(3.5, 1.5, 1.5),
    ...              chunks=(32, 32, 32), n_levels=3)
    >>> read_omezarr(path, level=2)[1]
    (14.0, 6.0, 6.0)
    """
    dask_array = sys.modules.get("dask.array")  # a dask array implies dask is imported
    is_dask = dask_array is not None and isinstance(data, dask_array.Array)
    if not is_dask:
        data = to_numpy(data)
    writer = OmeZarrWriter(
        path,
        data.shape,
        data.dtype,
        voxel_size=voxel_size,
        chunks=chunks,
        shards=shards,
        n_levels=n_levels,
        level=level,
        overwrite=overwrite,
        ngff_version=ngff_version,
        unit=unit,
    )
    if is_dask:
        target = writer.array
        dask_array.store(data.rechunk(target.shards or target.chunks), target, lock=False)
    else:
        writer[...] = data
    writer.finalize()
