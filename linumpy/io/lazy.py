"""`open_volume`: a zarr volume as a lazy dask array (:mod:`linumpy.io.dask_read`) or
``xarray.DataArray`` (:mod:`linumpy.io.labelled`) whose blocks are read by :func:`read_volume`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from linumpy.io.dask_read import dask_volume
from linumpy.io.labelled import open_dataarray

if TYPE_CHECKING:
    import dask.array as da
    import xarray as xr

__all__ = ["open_volume"]


def open_volume(
    path: Any,
    *,
    level: int = 0,
    gpu: bool = False,
    region: slice | Sequence[slice] | None = None,
    chunks: Sequence[int | None] | int | str | None = None,
    settings: Any = None,
    storage_options: dict[str, Any] | None = None,
    xarray: bool = False,
) -> da.Array | xr.DataArray:
    """Open a zarr volume as a lazy dask array; each block is read by :func:`read_volume`.

    Opening reads metadata only. Blocks are whole multiples of the stored chunk shape (of the
    shard shape for sharded arrays) cut at the chunk grid, so no stored chunk is read twice, and
    the graph has one task per block.

    Parameters
    ----------
    path
        An OME-Zarr image (NGFF 0.4 or 0.5) or a plain zarr array (v2 or v3): a local path, a
        URL (``file://``, ``http(s)://``, ``s3://``, ``gs://``), a ``zarr.Array``, a
        ``zarr.Group`` or a zarr store (see :func:`~linumpy.io.read_volume`).
    level
        The multiscale level (0 is full resolution).
    gpu
        Read blocks into cupy arrays on the GPU (the dask array's ``meta`` is a cupy array).
    region
        A tuple of slices (step 1): the part of the array to open; the whole array by default.
    chunks
        Block shape, rounded up to whole stored chunks (or shards); ``-1`` takes an axis whole.
        An int applies to every axis. A size (``"256MiB"``) sets the block size in bytes;
        by default blocks hold about 128 MiB (1 GiB with ``gpu``).
    settings
        Passed to :func:`read_volume` for every block.
    storage_options
        Options of a remote store (see :func:`~linumpy.io.read_volume`).
    xarray
        Return an ``xarray.DataArray`` around the dask array (see :func:`open_dataarray`).

    Returns
    -------
    dask.array.Array or xarray.DataArray
        Equal to ``zarr.open_array(...)[region]`` once computed.

    Raises
    ------
    LinumpyError
        For a missing path, a level out of range, a region out of bounds or a nonsensical
        ``chunks``.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import open_volume, save_omezarr
    >>> path = tempfile.mkdtemp() + "/volume.ome.zarr"
    >>> volume = np.arange(32 * 32 * 32, dtype=np.uint16).reshape(32, 32, 32)
    >>> save_omezarr(volume, path, voxel_size=(1, 1, 1), chunks=(8, 8, 8), shards=None)
    >>> lazy = open_volume(path, chunks=(10, 16, -1))  # rounded up to whole 8^3 chunks
    >>> lazy.chunksize, lazy.npartitions
    ((16, 16, 32), 4)
    >>> bool((lazy.sum(axis=0).compute() == volume.sum(axis=0)).all())
    True
    >>> open_volume(path, region=(slice(4, 20),), chunks=8).chunks[0]  # cut at the chunk grid
    (4, 8, 4)
    """
    opened = open_dataarray if xarray else dask_volume
    return opened(
        path,
        level=level,
        gpu=gpu,
        region=region,
        chunks=chunks,
        settings=settings,
        storage_options=storage_options,
    )
