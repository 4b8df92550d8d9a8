"""The levels of a pyramid written from the same blocks as level 0, while they are in memory:
the task that writes a level-0 block returns its 2x mean, which the next level's task writes,
and so on, so no level is read back; levels the blocks cannot reach are built from storage
(:func:`linumpy.io.dask_write.write_pyramid`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dask.array as da
import numpy as np
import zarr

from linumpy.io.blocks import storage_unit
from linumpy.io.dask_write import (
    _write_block,
    align_blocks,
    block_write_threads,
    empty_meta,
    store_dask,
    task_target,
)
from linumpy.io.downsample import downsample_mean
from linumpy.parallel import Cluster

__all__ = ["store_levels"]


def _halved_chunks(
    chunks: tuple[tuple[int, ...], ...], factors: Sequence[int]
) -> tuple[tuple[int, ...], ...] | None:
    """Each block's extent once halved along the axes of factor 2, or None when a block other
    than the last has an odd extent there (its mean would pair elements across blocks)."""
    halved = []
    for sizes, factor in zip(chunks, factors):
        if factor == 1:
            halved.append(sizes)
            continue
        if any(size % 2 for size in sizes[:-1]):
            return None
        halved.append(tuple(-(-size // 2) for size in sizes))
    return tuple(halved)


def _write_and_halve(
    block: Any,
    target: zarr.Array,
    axes: tuple[int, ...],
    threads: int,
    block_info: dict[Any, Any] | None = None,
) -> Any:
    _write_block(block, target, threads, block_info=block_info)
    return downsample_mean(block, axes)


def store_levels(
    data: da.Array,
    arrays: Sequence[zarr.Array],
    *,
    axes: Sequence[int] | None = None,
    gpu: bool = False,
    cluster: Cluster | None = None,
    progress: bool = False,
    desc: str = "write",
) -> list[zarr.Array]:
    """Write ``data`` into ``arrays[0]`` and, from the same blocks, its 2x means into the next
    levels while the cluster has no per-task memory limit (halving needs half a block more) and the
    blocks above have even extents; return the levels left to build from the last one written."""
    cluster = cluster or Cluster()
    current, written = data, 0
    while written + 1 < len(arrays) and cluster.memory_limit is None:
        target, below = arrays[written], arrays[written + 1]
        aligned = align_blocks(current, storage_unit(target))
        factors = tuple(
            2 if n > 1 and (axes is None or i in axes) else 1 for i, n in enumerate(target.shape)
        )
        halved = _halved_chunks(aligned.chunks, factors)
        expected = tuple(-(-n // f) for n, f in zip(target.shape, factors))
        if (
            halved is None
            or tuple(below.shape) != expected
            or np.dtype(below.dtype) != np.dtype(target.dtype)
        ):
            break
        current = aligned.map_blocks(
            _write_and_halve,
            task_target(target),
            tuple(i for i, f in enumerate(factors) if f == 2),
            block_write_threads(aligned.npartitions),
            chunks=halved,
            dtype=target.dtype,
            meta=empty_meta(target.dtype, target.ndim, gpu),
        )
        written += 1
    store_dask(current, arrays[written], cluster=cluster, progress=progress, desc=desc)
    return list(arrays[written:])
