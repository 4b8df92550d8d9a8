"""Converting TIFF stacks, ``.npy`` files and zarr arrays to OME-Zarr images, out of core."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import dask.array as da
import numpy as np
import zarr

from linumpy import phases
from linumpy._numpy_or_cupy import gpu_module
from linumpy.io import Axis, OmeZarrWriter, open_volume
from linumpy.io.blocks import aligned_chunks, grow_block, storage_unit
from linumpy.io.dask_write import (
    align_blocks,
    committed,
    empty_meta,
    shard_budget,
    space_axes,
    store_dask,
    write_pyramid,
)
from linumpy.io.formats import NgffVersion, writable_format
from linumpy.io.layout import ShardsArg
from linumpy.io.omezarr import read_coordinates
from linumpy.io.rechunk import copy_labels
from linumpy.io.sources import TIFF_SUFFIXES, SourceImage, open_image, open_tiff
from linumpy.mosaic.attrs import copy_omero
from linumpy.parallel import Cluster

__all__: list[str] = []

logger = logging.getLogger(__name__)


def _read_file_block(
    path: str, series: int, order: tuple[int, ...], block_info: dict[Any, Any] | None = None
) -> np.ndarray:
    """One block of a TIFF series or ``.npy`` file, opened by path in the task (so that tasks
    pickle small and each reads only its region), in NGFF axis order."""
    if Path(path).suffix.lower() in TIFF_SUFFIXES:
        source = open_tiff(path, series)
    else:
        source = np.load(path, mmap_mode="r")
    region: list[Any] = [0] * source.ndim  # axes of length 1 that the image drops
    for axis, (start, stop) in zip(order, block_info[None]["array-location"]):
        region[axis] = slice(start, stop)
    kept = sorted(order)
    return np.array(np.transpose(source[tuple(region)], [kept.index(a) for a in order]))


def _lazy_source(
    source: str | os.PathLike[str],
    image: SourceImage,
    series: int,
    block: tuple[int, ...],
    gpu: bool,
):
    """The input as a dask array of ``block``-shaped blocks (numpy, or cupy with ``gpu``)."""
    is_file = Path(source).suffix.lower() in (*TIFF_SUFFIXES, ".npy")
    if not is_file:
        return open_volume(source, chunks=block, gpu=gpu)
    whole = tuple(slice(0, n) for n in image.shape)
    lazy = da.map_blocks(
        _read_file_block,
        os.path.abspath(source),  # a dask worker's working directory is its own
        series,
        image.order,
        chunks=aligned_chunks(whole, block),
        dtype=image.dtype,
        meta=empty_meta(image.dtype, len(image.shape), False),
    )
    if gpu:
        lazy = lazy.map_blocks(
            gpu_module(gpu).asarray, meta=empty_meta(image.dtype, len(image.shape), True)
        )
    return lazy


def _translation(
    source: str | os.PathLike[str], image: SourceImage, sizes: Sequence[float]
) -> tuple[float, ...] | None:
    """An OME-Zarr input's position, in voxels of the input, at the voxel size written."""
    if image.voxel_size_from != "the OME-Zarr input" or image.voxel_size is None:
        return None
    coordinates = read_coordinates(source)
    if coordinates.translation is None:
        return None
    return tuple(
        t / s * size
        for t, s, size in zip(coordinates.translation, coordinates.scale, sizes, strict=True)
    )


def _voxel_size(
    image: SourceImage, given: Sequence[float] | None
) -> tuple[tuple[float, ...], tuple[Axis, ...], str | None]:
    """The voxel size, axes and where the sizes come from: ``given`` (one per axis, or one per
    space axis in micrometers) over the file's own."""
    axes, sizes = image.axes, image.voxel_size or (1.0,) * len(image.axes)
    if given is None:
        return tuple(sizes), axes, image.voxel_size_from
    given = tuple(float(v) for v in given)
    space = [i for i, a in enumerate(axes) if a.type == "space"]
    if len(given) == len(space) < len(axes):
        sizes = list(sizes)
        for i, value in zip(space, given):
            sizes[i] = value
    elif len(given) == len(axes):
        sizes = list(given)
    else:
        names = "".join(a.name for a in axes)
        space_names = "".join(axes[i].name for i in space)
        also = (
            f" or {len(space)} for the space axes {space_names}" if len(space) < len(axes) else ""
        )
        raise ValueError(
            f"voxel_size {given}: {len(axes)} values needed, one per axis of {names}{also}"
        )
    axes = tuple(a._replace(unit="micrometer") if a.type == "space" else a for a in axes)
    return tuple(sizes), axes, "given"


class Converted(NamedTuple):
    """What :func:`convert_to_omezarr` wrote: the axes, voxel size and where the sizes came from.

    Parameters
    ----------
    axes
        The image's NGFF axes (names, types, units).
    voxel_size
        One size per axis.
    voxel_size_from
        ``"given"`` (the ``voxel_size`` argument), the metadata they come from (``"ImageJ
        metadata"``, ``"OME-XML metadata"``, ``"the OME-Zarr input"``), or None (1 per axis).

    Examples
    --------
    >>> from linumpy.io.metadata import make_axes
    >>> from linumpy.mosaic import Converted
    >>> Converted(make_axes(2, "yx"), (1.0, 1.0), None).describe()
    'axes yx, voxel size y 1 micrometer, x 1 micrometer (none known: 1 per axis)'
    >>> Converted(make_axes(3, "cyx"), (1, 2, 2), "ImageJ metadata").describe()
    'axes cyx, voxel size y 2 micrometer, x 2 micrometer (from ImageJ metadata)'
    """

    axes: tuple[Axis, ...]
    voxel_size: tuple[float, ...]
    voxel_size_from: str | None

    def describe(self, given: str = "the voxel_size argument") -> str:
        """One line: the axes, the voxel size with units, and where the sizes came from
        (``given`` names the sizes passed explicitly)."""
        sizes = ", ".join(
            f"{a.name} {v:g}" + (f" {a.unit}" if a.unit else "")
            for a, v in zip(self.axes, self.voxel_size)
            if a.type != "channel"
        )
        origin = given if self.voxel_size_from == "given" else self.voxel_size_from
        origin = "none known: 1 per axis" if origin is None else f"from {origin}"
        return f"axes {''.join(a.name for a in self.axes)}, voxel size {sizes} ({origin})"


@phases.recorded("metadata")
def convert_to_omezarr(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    voxel_size: Sequence[float] | None = None,
    series: int | None = None,
    chunks: Sequence[int] | None = None,
    shards: ShardsArg = "auto",
    n_levels: int = 1,
    zstd_level: int | None = None,
    ngff_version: NgffVersion = "0.5",
    gpu: bool = False,
    overwrite: bool = False,
    progress: bool = False,
    cluster: Cluster | None = None,
) -> Converted:
    """Convert a TIFF, ``.npy`` file or zarr array to a zstd OME-Zarr image, out of core.

    The axes and voxel size are the input's own (a TIFF's axes, channels and RGB samples, its
    ImageJ or OME-XML voxel sizes and units); an OME-Zarr input's translation, channel metadata
    (``omero``) and labels are kept. The data goes through in blocks of whole output shards, one
    dask task each; each pyramid level is then computed from the level above (space axes only).

    Parameters
    ----------
    source
        A TIFF, ``.npy`` file, zarr array or OME-Zarr image.
    target
        The OME-Zarr image to create.
    voxel_size
        Voxel size per axis, or per space axis (micrometers), over the input's own; 1 where
        neither gives one.
    series
        The TIFF series to convert (0 by default).
    chunks, shards, n_levels, zstd_level, ngff_version
        As for :class:`linumpy.io.OmeZarrWriter` (in NGFF axis order): by default chunks of
        about 1 MiB in shards of whole planes (smaller under a memory limit).
    gpu
        Encode on the GPU (nvCOMP; NGFF 0.5 only).
    overwrite
        Replace an existing ``target``.
    progress
        Show progress bars over the tasks.
    cluster
        Where the tasks run and how much memory each may use
        (:func:`linumpy.parallel.dask_cluster`); local threads by default.

    Returns
    -------
    Converted
        The axes and voxel size written, and where the sizes came from.

    Raises
    ------
    LinumpyError
        For an input that cannot be read, axes without an OME-Zarr equivalent or data that are
        not numbers (:class:`SeriesError` for a missing TIFF series).

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import read_omezarr
    >>> from linumpy.mosaic import convert_to_omezarr
    >>> folder = tempfile.mkdtemp()
    >>> np.save(folder + "/volume.npy", np.arange(4 * 6 * 8, dtype=np.uint16).reshape(4, 6, 8))
    >>> done = convert_to_omezarr(
    ...     folder + "/volume.npy", folder + "/volume.ome.zarr", voxel_size=(5.0, 2.5, 2.5)
    ... )
    >>> done.describe()
    'axes zyx, voxel size z 5 micrometer, y 2.5 micrometer, x 2.5 micrometer (from the \
voxel_size argument)'
    >>> array, voxel_size = read_omezarr(folder + "/volume.ome.zarr")
    >>> array.shape, str(array.dtype), voxel_size, int(array[3, 5, 7])
    ((4, 6, 8), 'uint16', (5.0, 2.5, 2.5), 191)
    """
    image = open_image(source, series=series)
    shape, dtype = image.shape, image.dtype
    if gpu and not writable_format(ngff_version).gpu_encoding:
        logger.warning(
            "GPU encoding writes zarr v3 only: encoding NGFF %s on the CPU", ngff_version
        )
        gpu = False
    sizes, axes, origin = _voxel_size(image, voxel_size)
    translation = _translation(source, image, sizes)
    cluster = cluster or Cluster()
    per_element = 3 * dtype.itemsize  # the block, its copy in zarr, the encoded chunks
    writer = OmeZarrWriter(
        target,
        shape,
        dtype,
        voxel_size=sizes,
        axes=axes,
        chunks=chunks,
        shards=shards,
        shard_bytes=shard_budget(cluster, per_byte=10 if n_levels > 1 else 3),  # write_pyramid
        n_levels=n_levels,
        zstd_level=zstd_level,
        overwrite=overwrite,
        ngff_version=ngff_version,
        translation=translation,
    )
    unit = storage_unit(writer.array)
    if isinstance(image.data, zarr.Array):
        stored = storage_unit(image.data)
        unit = tuple(math.lcm(u, stored[i]) for u, i in zip(unit, image.order))
    unit = tuple(min(u, n) for u, n in zip(unit, shape))
    budget = cluster.task_bytes(
        math.prod(unit) * per_element,
        "the conversion",
        total=math.prod(shape) * per_element,
        gpu=gpu,
    )
    block = grow_block(unit, shape, per_element, budget)
    lazy = _lazy_source(source, image, series or 0, block, gpu)
    with committed(writer):
        store_dask(
            align_blocks(lazy, unit),
            writer.array,
            cluster=cluster,
            progress=progress,
            desc="convert",
        )
        write_pyramid(
            writer.arrays, axes=space_axes(writer), gpu=gpu, cluster=cluster, progress=progress
        )
        if image.voxel_size_from == "the OME-Zarr input":
            channel = [n for a, n in zip(writer.axes, shape) if a.type == "channel"]
            copy_omero(source, writer.path, channel[0] if channel else None)
            labels = copy_labels(
                source,
                writer.path,
                ngff_version=ngff_version,
                cluster=cluster,
                gpu=gpu,
                n_levels=n_levels,
            )
            if labels:
                logger.info("%s: labels %s copied", target, ", ".join(labels))
    return Converted(writer.axes, writer.voxel_size, origin)
