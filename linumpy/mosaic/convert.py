"""Converting TIFF stacks, ``.npy`` files and zarr arrays to OME-Zarr images, out of core."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import zarr

from linumpy._xp import gpu_module
from linumpy.errors import LinumpyError
from linumpy.io import OmeZarrWriter, open_array, open_volume, read_omezarr
from linumpy.io.dask_write import (
    align_blocks,
    committed,
    empty_meta,
    space_axes,
    store_dask,
    write_pyramid,
)
from linumpy.io.lazy import aligned_chunks, grow_block, storage_unit
from linumpy.io.omezarr import NgffVersion
from linumpy.parallel import Cluster

__all__ = ["convert_to_omezarr", "open_source"]

logger = logging.getLogger(__name__)


TIFF_SUFFIXES = (".tif", ".tiff")


def _open_tiff(path: str | os.PathLike[str]) -> zarr.Array:
    import tifffile

    return zarr.open(tifffile.imread(path, aszarr=True), mode="r")


def _read_file_block(path: str, block_info: dict[Any, Any] | None = None) -> np.ndarray:
    """One block of a TIFF stack or ``.npy`` file, opened by path in the task (so that tasks
    pickle small and each reads only its region)."""
    region = tuple(slice(a, b) for a, b in block_info[None]["array-location"])
    if Path(path).suffix.lower() in TIFF_SUFFIXES:
        return np.asarray(_open_tiff(path)[region])
    return np.array(np.load(path, mmap_mode="r")[region])


def _lazy_source(source: str | os.PathLike[str], data: Any, block: tuple[int, ...], gpu: bool):
    """The input as a dask array of ``block``-shaped blocks (numpy, or cupy with ``gpu``)."""
    is_file = Path(source).suffix.lower() in (*TIFF_SUFFIXES, ".npy")
    if not is_file:
        return open_volume(source, chunks=block, gpu=gpu)
    whole = tuple(slice(0, n) for n in data.shape)
    lazy = da.map_blocks(
        _read_file_block,
        os.fspath(source),
        chunks=aligned_chunks(whole, block),
        dtype=data.dtype,
        meta=empty_meta(data.dtype, data.ndim, False),
    )
    if gpu:
        lazy = lazy.map_blocks(
            gpu_module(gpu).asarray, meta=empty_meta(data.dtype, data.ndim, True)
        )
    return lazy


def open_source(path: str | os.PathLike[str]) -> tuple[Any, tuple[float, ...] | None]:
    """Open an image to convert: a TIFF stack, a ``.npy`` file, an OME-Zarr image or a zarr array.

    Nothing is read but metadata: a TIFF stack opens as a zarr view of its pages (tifffile's
    ``aszarr``), a ``.npy`` file as a memory map.

    Returns
    -------
    array
        Array-like (numpy memory map or lazy zarr array).
    voxel_size
        The OME-Zarr image's voxel size, else None.

    Raises
    ------
    LinumpyError
        When the file cannot be read as any of these (the message names it).

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import save_omezarr
    >>> from linumpy.mosaic.convert import open_source
    >>> folder = tempfile.mkdtemp()
    >>> volume = np.zeros((4, 6, 8), np.uint8)
    >>> np.save(folder + "/volume.npy", volume)
    >>> array, voxel_size = open_source(folder + "/volume.npy")
    >>> array.shape, voxel_size
    ((4, 6, 8), None)
    >>> save_omezarr(volume, folder + "/volume.ome.zarr", voxel_size=(5, 2, 2))
    >>> array, voxel_size = open_source(folder + "/volume.ome.zarr")
    >>> array.shape, voxel_size
    ((4, 6, 8), (5.0, 2.0, 2.0))
    """
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            return np.load(path, mmap_mode="r"), None
        if suffix in TIFF_SUFFIXES:
            return _open_tiff(path), None
    except (OSError, ValueError) as exc:
        raise LinumpyError(f"{path}: cannot read it as {suffix[1:]}: {exc}") from None
    node = open_array(path)  # raises LinumpyError for anything that is not zarr
    try:
        return read_omezarr(path)
    except LinumpyError:
        return node, None


def convert_to_omezarr(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    voxel_size: Sequence[float] | None = None,
    chunks: Sequence[int] | None = None,
    shards: Sequence[int] | None = None,
    n_levels: int = 1,
    level: int = 3,
    ngff_version: NgffVersion = "0.5",
    gpu: bool = False,
    overwrite: bool = False,
    progress: bool = False,
    cluster: Cluster | None = None,
) -> None:
    """Convert a TIFF stack, ``.npy`` file or zarr array to a zstd OME-Zarr image, out of core.

    The data goes through in blocks of whole output shards (or chunks), one dask task each
    (zarr inputs are read with :func:`linumpy.io.open_volume`, ``.npy`` files through a memory
    map, TIFF stacks through tifffile's zarr view of their pages); each pyramid level is then
    computed from the level above as stored, block by block. With ``gpu`` the blocks are
    encoded on the GPU (nvCOMP; NGFF 0.5 only).

    Parameters
    ----------
    source
        The input (see :func:`open_source`).
    target
        The OME-Zarr image to create.
    voxel_size
        Voxel size per axis; by default the source's (OME-Zarr) or 1.
    chunks, shards, n_levels, level, ngff_version
        As for :class:`linumpy.io.OmeZarrWriter`.
    gpu
        Encode on the GPU.
    overwrite
        Replace an existing ``target``.
    progress
        Show progress bars over the tasks.
    cluster
        Where the tasks run and how much memory each may use
        (:func:`linumpy.parallel.dask_cluster`); local threads by default.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import read_omezarr
    >>> from linumpy.mosaic.convert import convert_to_omezarr
    >>> folder = tempfile.mkdtemp()
    >>> np.save(folder + "/volume.npy", np.arange(4 * 6 * 8, dtype=np.uint16).reshape(4, 6, 8))
    >>> convert_to_omezarr(
    ...     folder + "/volume.npy", folder + "/volume.ome.zarr", voxel_size=(5.0, 2.5, 2.5)
    ... )
    >>> array, voxel_size = read_omezarr(folder + "/volume.ome.zarr")
    >>> array.shape, str(array.dtype), voxel_size, int(array[3, 5, 7])
    ((4, 6, 8), 'uint16', (5.0, 2.5, 2.5), 191)
    """
    data, stored_voxel_size = open_source(source)
    if not 2 <= data.ndim <= 5:
        raise LinumpyError(f"{source}: OME-Zarr images have 2 to 5 axes, not {data.ndim}")
    if gpu and ngff_version != "0.5":
        logger.warning(
            "GPU encoding writes zarr v3 only: encoding NGFF %s on the CPU", ngff_version
        )
        gpu = False
    voxel_size = voxel_size or stored_voxel_size or (1.0,) * data.ndim
    writer = OmeZarrWriter(
        target,
        data.shape,
        data.dtype,
        voxel_size=voxel_size,
        chunks=chunks,
        shards=shards,
        n_levels=n_levels,
        level=level,
        overwrite=overwrite,
        ngff_version=ngff_version,
    )
    cluster = cluster or Cluster()
    unit = storage_unit(writer.array)
    if isinstance(data, zarr.Array):
        unit = tuple(math.lcm(u, s) for u, s in zip(unit, storage_unit(data)))
    unit = tuple(min(u, n) for u, n in zip(unit, data.shape))
    per_element = 3 * data.dtype.itemsize  # the block, its copy in zarr, the encoded chunks
    budget = cluster.task_bytes(math.prod(unit) * per_element, "the conversion")
    block = grow_block(unit, data.shape, per_element, budget)
    lazy = _lazy_source(source, data, block, gpu)
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
