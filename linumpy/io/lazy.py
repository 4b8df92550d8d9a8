"""`open_volume`: a zarr volume as a lazy dask array whose blocks are read by :func:`read_volume`.

Blocks are whole multiples of the stored chunks (of the shards, for sharded arrays) and line up
with them, so no stored chunk is read by two tasks; the graph has one task per block.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from linumpy.errors import LinumpyError
from linumpy.parallel import DEFAULT_GPU_TASK_BYTES, DEFAULT_TASK_BYTES

if TYPE_CHECKING:
    import dask.array as da
    import xarray as xr

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "DEFAULT_GPU_BLOCK_BYTES",
    "grow_block",
    "open_volume",
    "round_block",
    "storage_unit",
]

#: Default size of one block of :func:`open_volume`.
DEFAULT_BLOCK_BYTES = DEFAULT_TASK_BYTES
#: Default block size of ``open_volume(gpu=True)``: each GPU read pays a fixed start (first
#: group read, last nvCOMP call's latency), which smaller blocks pay over and over
#: (docs/gpu_guide.md, "Measurements behind the GPU defaults": GPU block size).
DEFAULT_GPU_BLOCK_BYTES = DEFAULT_GPU_TASK_BYTES


def storage_unit(array: zarr.Array) -> tuple[int, ...]:
    """The smallest region one task can read or write alone: the shard shape, else the chunks.

    Examples
    --------
    >>> import zarr
    >>> from linumpy.io.lazy import storage_unit
    >>> storage_unit(zarr.create_array({}, shape=(64, 64), chunks=(8, 8), dtype="uint8"))
    (8, 8)
    >>> storage_unit(
    ...     zarr.create_array({}, shape=(64, 64), chunks=(8, 8), shards=(32, 16), dtype="uint8")
    ... )
    (32, 16)
    """
    return tuple(int(n) for n in (array.shards or array.chunks))


def round_block(
    block: Sequence[int | None], unit: Sequence[int], shape: Sequence[int]
) -> tuple[int, ...]:
    """``block`` rounded up to whole ``unit`` multiples, at most the whole array.

    ``None`` or ``-1`` on an axis takes it whole.

    Raises
    ------
    LinumpyError
        For a block with the wrong number of axes or an entry that is not a positive integer.

    Examples
    --------
    >>> from linumpy.io.lazy import round_block
    >>> round_block((100, -1, 1), unit=(64, 64, 64), shape=(1000, 300, 300))
    (128, 300, 64)
    >>> round_block((0, 5), unit=(8, 8), shape=(16, 16))
    Traceback (most recent call last):
        ...
    linumpy.errors.LinumpyError: chunks must hold 2 positive integers (-1: whole axis), got (0, 5)
    """
    values = tuple(block)
    ok = len(values) == len(shape) and all(
        v is None or (isinstance(v, int | np.integer) and (v > 0 or v == -1)) for v in values
    )
    if not ok:
        raise LinumpyError(
            f"chunks must hold {len(shape)} positive integers (-1: whole axis), got {values}"
        )
    rounded = []
    for v, u, n in zip(values, unit, shape):
        whole = max(n, 1)
        rounded.append(whole if v in (None, -1) else min(math.ceil(int(v) / u) * u, whole))
    return tuple(rounded)


def grow_block(
    unit: Sequence[int],
    shape: Sequence[int],
    itemsize: int,
    target_bytes: int,
    axes: Sequence[int] | None = None,
    cost: Callable[[tuple[int, ...]], int] | None = None,
) -> tuple[int, ...]:
    """The largest block of whole ``unit`` multiples within ``target_bytes`` (one unit at least).

    Axes grow by doubling, the one whose block is shortest first (ties: the last axis), so
    blocks stay close to cubes; ``axes`` restricts which axes grow. A block costs ``itemsize``
    bytes per element, or what ``cost(block_shape)`` says.

    Examples
    --------
    >>> from linumpy.io.lazy import grow_block
    >>> grow_block((64, 64, 64), (1024, 1024, 1024), 2, 32 * 2**20)
    (256, 256, 256)
    >>> grow_block((64, 64, 64), (1024, 1024, 1024), 2, 32 * 2**20, axes=(1, 2))
    (64, 512, 512)
    """
    counts = [1] * len(unit)
    full = [max(1, math.ceil(n / u)) for n, u in zip(shape, unit)]
    growable = set(range(len(unit)) if axes is None else axes)

    def block(c: list[int]) -> tuple[int, ...]:
        return tuple(min(k * u, max(n, 1)) for k, u, n in zip(c, unit, shape))

    def nbytes(c: list[int]) -> int:
        return cost(block(c)) if cost is not None else math.prod(block(c)) * itemsize

    while True:
        candidates = [a for a in growable if counts[a] < full[a]]
        if not candidates:
            break
        axis = min(candidates, key=lambda a: (min(counts[a] * unit[a], shape[a]), -a))
        trial = counts.copy()
        trial[axis] = min(counts[axis] * 2, full[axis])
        if nbytes(trial) > target_bytes:
            growable.discard(axis)
            continue
        counts = trial
    return block(counts)


def aligned_chunks(region: Sequence[slice], block: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """dask chunks of ``region`` cut at the multiples of ``block`` (in array coordinates).

    Examples
    --------
    >>> from linumpy.io.lazy import aligned_chunks
    >>> aligned_chunks((slice(5, 40), slice(0, 16)), (16, 16))
    ((11, 16, 8), (16,))
    """
    chunks = []
    for sel, b in zip(region, block):
        edges = [sel.start, *range((sel.start // b + 1) * b, sel.stop, b), sel.stop]
        chunks.append(tuple(e1 - e0 for e0, e1 in zip(edges, edges[1:])) or (0,))
    return tuple(chunks)


def _read_block(
    path: Any,
    level: int,
    gpu: bool,
    origin: tuple[int, ...],
    settings: Any,
    block_info: dict[Any, Any] | None = None,
) -> Any:
    from linumpy.io import read_volume

    location = block_info[None]["array-location"]
    region = tuple(slice(o + a, o + b) for o, (a, b) in zip(origin, location))
    return read_volume(path, level=level, gpu=gpu, region=region, settings=settings)


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
    import dask.array as da
    from dask.base import tokenize

    from linumpy.io import open_array
    from linumpy.io.stores import describe, parse_source

    if xarray:
        from linumpy.io.labelled import open_dataarray

        return open_dataarray(
            path,
            level=level,
            gpu=gpu,
            region=region,
            chunks=chunks,
            settings=settings,
            storage_options=storage_options,
        )
    array = open_array(path, level, storage_options=storage_options)
    source = f"{describe(path)} (level {level})"
    dtype = np.dtype(array.dtype)
    if dtype.kind not in "biufc":
        raise LinumpyError(f"{source}: dtype {dtype} is not supported; open numeric arrays")
    bounds = _bounds(region, array.shape, source)
    shape = tuple(s.stop - s.start for s in bounds)
    unit = storage_unit(array)
    if chunks is None or isinstance(chunks, str):
        default = DEFAULT_GPU_BLOCK_BYTES if gpu else DEFAULT_BLOCK_BYTES
        target = default if chunks is None else _size(chunks)
        block = grow_block(unit, array.shape, dtype.itemsize, target)
    else:
        requested = (chunks,) * array.ndim if isinstance(chunks, int) else tuple(chunks)
        block = round_block(requested, unit, array.shape)
    if gpu:
        try:
            import cupy
        except ImportError as exc:
            from linumpy.errors import GPUUnavailableError

            raise GPUUnavailableError(f"open_volume(gpu=True) needs cupy: {exc}") from None
        meta = cupy.empty((0,) * array.ndim, dtype=dtype)
    else:
        meta = np.empty((0,) * array.ndim, dtype=dtype)
    origin = tuple(s.start for s in bounds)
    parsed = parse_source(path, storage_options)
    if parsed.local is not None:  # blocks open the path: they see the files as they are then
        blocks_read, key = os.fspath(parsed.local), os.path.abspath(parsed.local)
    else:  # blocks read the array opened here: its metadata are fetched once
        blocks_read, key, level = array, str(array.store_path), 0
    name = "open-volume-" + tokenize(key, level, gpu, origin, shape, block, dtype.str, settings)
    return da.map_blocks(
        _read_block,
        blocks_read,
        level,
        gpu,
        origin,
        settings,
        name=name,
        chunks=aligned_chunks(bounds, block),
        dtype=dtype,
        meta=meta,
    )


def _bounds(
    region: slice | Sequence[slice] | None, shape: Sequence[int], source: str
) -> tuple[slice, ...]:
    """One slice per axis with explicit bounds inside ``shape`` (negative bounds count from
    the end, missing trailing axes are whole)."""
    given = () if region is None else (region,) if isinstance(region, slice) else tuple(region)
    if len(given) > len(shape) or not all(isinstance(s, slice) for s in given):
        raise LinumpyError(f"{source}: region {given} is not up to {len(shape)} slices")
    bounds = []
    for sel, n in zip(given + (slice(None),) * (len(shape) - len(given)), shape):
        start, stop, step = sel.indices(n)
        outside = any(v is not None and not -n <= v <= n for v in (sel.start, sel.stop))
        if step != 1 or outside or stop < start:
            raise LinumpyError(f"{source}: region {given} is not inside the array's shape {shape}")
        bounds.append(slice(start, stop))
    return tuple(bounds)


def _size(value: str) -> int:
    from linumpy.parallel import parse_size

    return parse_size(value)
