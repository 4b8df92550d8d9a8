"""Blocks of dask graphs that line up with the stored chunks (or shards) of a zarr array, so
that no stored chunk is read, or written, by two tasks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import zarr

from linumpy.errors import LinumpyError
from linumpy.parallel.block_sizes import DEFAULT_GPU_TASK_BYTES, DEFAULT_TASK_BYTES

__all__: list[str] = []

#: Default size of one block of :func:`open_volume`.
DEFAULT_BLOCK_BYTES = DEFAULT_TASK_BYTES
#: Default block size of ``open_volume(gpu=True)``: each GPU read pays a fixed start (first
#: group read, last nvCOMP call's latency), which smaller blocks pay over and over
#: (docs/gpu_guide.md, "Measurements behind the GPU defaults": GPU block size).
DEFAULT_GPU_BLOCK_BYTES = DEFAULT_GPU_TASK_BYTES


def storage_unit(array: zarr.Array) -> tuple[int, ...]:
    """The smallest region one task can read or write alone: the shard shape, else the chunks."""
    return tuple(int(n) for n in (array.shards or array.chunks))


def host_decoded(array: zarr.Array) -> bool:
    """Whether a GPU read of ``array`` decodes its chunks on the host (chunks above
    :data:`~linumpy.io.engine.plan.GPU_CHUNK_BYTES`): a GPU job over it needs the CPU's tasks."""
    from linumpy.io.engine.plan import GPU_CHUNK_BYTES

    chunk_nbytes = math.prod(int(c) for c in array.chunks) * np.dtype(array.dtype).itemsize
    return chunk_nbytes > GPU_CHUNK_BYTES


def round_block(
    block: Sequence[int | None], unit: Sequence[int], shape: Sequence[int]
) -> tuple[int, ...]:
    """``block`` rounded up to whole ``unit`` multiples, at most the whole array (``None`` or ``-1``
    on an axis takes it whole)."""
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
    """The largest block of whole ``unit`` multiples within ``target_bytes`` (one unit at least),
    grown by doubling the shortest axis first (of ``axes``), so blocks stay close to cubes; a block
    costs ``itemsize`` bytes per element, or ``cost(block_shape)``."""
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
    """dask chunks of ``region`` cut at the multiples of ``block`` (in array coordinates)."""
    chunks = []
    for sel, b in zip(region, block):
        edges = [sel.start, *range((sel.start // b + 1) * b, sel.stop, b), sel.stop]
        chunks.append(tuple(e1 - e0 for e0, e1 in zip(edges, edges[1:])) or (0,))
    return tuple(chunks)


def region_bounds(
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
