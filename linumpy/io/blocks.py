"""Blocks of dask graphs that line up with the stored chunks (or shards) of a zarr array.

Readers (:func:`~linumpy.io.open_volume`) and writers (:mod:`linumpy.io.dask_write`) cut their
graphs with these, so that no stored chunk is read, or written, by two tasks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import zarr

from linumpy.errors import LinumpyError
from linumpy.parallel import DEFAULT_GPU_TASK_BYTES, DEFAULT_TASK_BYTES

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "DEFAULT_GPU_BLOCK_BYTES",
    "aligned_chunks",
    "grow_block",
    "host_decoded",
    "region_bounds",
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
    >>> from linumpy.io.blocks import storage_unit
    >>> storage_unit(zarr.create_array({}, shape=(64, 64), chunks=(8, 8), dtype="uint8"))
    (8, 8)
    >>> storage_unit(
    ...     zarr.create_array({}, shape=(64, 64), chunks=(8, 8), shards=(32, 16), dtype="uint8")
    ... )
    (32, 16)
    """
    return tuple(int(n) for n in (array.shards or array.chunks))


def host_decoded(array: zarr.Array) -> bool:
    """Whether a GPU read of ``array`` decodes its chunks with libzstd on the host: chunks above
    :data:`~linumpy.io.engine.plan.GPU_CHUNK_BYTES` (:mod:`linumpy.gpu.host_decode`). Such a read
    decodes one chunk per thread, so a GPU job over it needs the CPU's tasks, not a GPU job's few
    large ones.

    Examples
    --------
    >>> import zarr
    >>> host_decoded(zarr.create_array({}, shape=(64, 64), chunks=(32, 32), dtype="uint16"))
    False
    >>> host_decoded(zarr.create_array({}, shape=(4096, 4096), chunks=(4096, 4096), dtype="f4"))
    True
    """
    from linumpy.io.engine.plan import GPU_CHUNK_BYTES

    chunk_nbytes = math.prod(int(c) for c in array.chunks) * np.dtype(array.dtype).itemsize
    return chunk_nbytes > GPU_CHUNK_BYTES


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
    >>> from linumpy.io.blocks import round_block
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
    >>> from linumpy.io.blocks import grow_block
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
    >>> from linumpy.io.blocks import aligned_chunks
    >>> aligned_chunks((slice(5, 40), slice(0, 16)), (16, 16))
    ((11, 16, 8), (16,))
    """
    chunks = []
    for sel, b in zip(region, block):
        edges = [sel.start, *range((sel.start // b + 1) * b, sel.stop, b), sel.stop]
        chunks.append(tuple(e1 - e0 for e0, e1 in zip(edges, edges[1:])) or (0,))
    return tuple(chunks)


def region_bounds(
    region: slice | Sequence[slice] | None, shape: Sequence[int], source: str
) -> tuple[slice, ...]:
    """One slice per axis with explicit bounds inside ``shape`` (negative bounds count from
    the end, missing trailing axes are whole).

    Raises
    ------
    LinumpyError
        For a region that is not slices of step 1 inside ``shape``; the message starts with
        ``source``.

    Examples
    --------
    >>> from linumpy.io.blocks import region_bounds
    >>> region_bounds((slice(2, -1),), (10, 4), "a.zarr")
    (slice(2, 9, None), slice(0, 4, None))
    """
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
