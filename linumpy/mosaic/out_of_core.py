"""Stitching as a lazy dask array of bounded blocks, each a task that reads the tiles it needs
from the grid opened once on the client (:class:`~linumpy.io.array_ref.ArrayRef`); the result
equals the in-memory stitch bit for bit."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import dask.array as da
import numpy as np
from numpy.typing import DTypeLike

from linumpy._numpy_or_cupy import gpu_module
from linumpy.io.array_ref import ArrayRef, array_ref
from linumpy.io.blocks import aligned_chunks, grow_block
from linumpy.io.dask_write import empty_meta
from linumpy.io.engine.memory import available_memory
from linumpy.mosaic.stitch import (
    Blending,
    parse_blending,
    stitch_dtype,
    stitch_region,
    tiles_in_region,
)
from linumpy.mosaic.transform import TileTransform
from linumpy.parallel import Cluster
from linumpy.parallel.block_sizes import TASK_SHARE

__all__: list[str] = []


def _whole(shape: Sequence[int]) -> tuple[slice, ...]:
    return tuple(slice(0, n) for n in shape)


def _stitch_cost(
    transform: TileTransform, out_shape: Sequence[int], itemsize: int
) -> Callable[[tuple[int, ...]], int]:
    """Working set of the costliest block of a shape: its tiles, the float32 output with its
    weights and encoded copy, and one weighted tile."""
    th, tw = transform.tile_shape
    height, width = out_shape[-2:]
    positions = transform.pixel_positions().reshape(-1, 2)
    grid_cols = transform.grid_shape[1]

    def cost(block: tuple[int, ...]) -> int:
        depth = block[0] if len(block) == 3 else 1
        h, w = block[-2:]
        widest = 0
        for y0 in range(0, height, h):
            rows_hit = (positions[:, 0] < y0 + h) & (positions[:, 0] + th > y0)
            for x0 in range(0, width, w):
                hit = rows_hit & (positions[:, 1] < x0 + w) & (positions[:, 1] + tw > x0)
                if hit.any():
                    rows, cols = np.divmod(np.nonzero(hit)[0], grid_cols)
                    box = (rows.max() - rows.min() + 1) * (cols.max() - cols.min() + 1)
                    widest = max(widest, int(box))
        tiles = depth * widest * th * tw * itemsize
        return tiles + 2 * depth * h * w * 4 + depth * th * tw * 4 + h * w * 4

    return cost


#: Without a memory limit, a stitching block may grow to this working set (if the host's
#: available memory holds one per thread) so that the tiles' stored chunks are decoded about
#: once, not once per small block that touches them.
REUSE_TASK_BYTES = 2 * 2**30


def _reuse_unit(
    unit: tuple[int, ...],
    out_shape: Sequence[int],
    source_chunks: Sequence[int],
    reach: int | None,
) -> tuple[int, ...]:
    """``unit`` grown to whole source chunks in depth and to ``reach`` source chunks (tiles) in y
    and x (None: whole planes), so that a block decodes each chunk it touches about once."""
    grown = list(unit)
    if len(unit) == 3:
        grown[0] = min(math.lcm(unit[0], source_chunks[0]), out_shape[0])
    for axis in (-2, -1):
        extent = out_shape[axis] if reach is None else reach * source_chunks[axis]
        grown[axis] = min(math.ceil(extent / unit[axis]) * unit[axis], out_shape[axis])
    return tuple(grown)


def plan_stitch_block(
    source_shape: Sequence[int],
    itemsize: int,
    transform: TileTransform,
    out_unit: Sequence[int],
    cluster: Cluster,
    source_chunks: Sequence[int] | None = None,
    gpu: bool = False,
    source_shards: Sequence[int] | None = None,
) -> tuple[int, ...]:
    """Block shape for stitching: whole output shards (or chunks), whole planes when they fit
    the cluster's per-task memory, then as many planes as fit, in enough blocks to keep every
    worker busy (:meth:`linumpy.parallel.Cluster.task_bytes`).

    With ``source_chunks`` (and ``source_shards``: a tile each), a block starts at whole source
    chunks in depth and whole planes, else two (else one) tiles in y and x, when that fits the
    memory limit (without one: :data:`REUSE_TASK_BYTES`, within the host's available memory):
    small blocks over large tiles would decode each chunk many times (docs/architecture.md,
    "Measurements behind the defaults").
    """
    out_shape = (*source_shape[:-2], *transform.output_shape())
    cost = _stitch_cost(transform, out_shape, itemsize)
    unit = tuple(min(u, n) for u, n in zip(out_unit, out_shape))
    minimum = cost(unit)
    allowed = cluster.task_bytes(minimum, "stitching", gpu=gpu)
    if source_chunks is not None:
        # Weighed against what memory allows, before the split for parallelism: decoding each
        # chunk once pays more than more, smaller blocks.
        room = allowed
        if cluster.memory_limit is None:  # within what this host has free, shared by the threads
            free = int(available_memory() * TASK_SHARE) // cluster.threads
            room = max(allowed, min(REUSE_TASK_BYTES, free))
        reused = tuple(source_chunks)
        if source_shards is not None:  # a tile per shard: read whole tiles, chunks once in depth
            reused = (*reused[:-2], *tuple(source_shards)[-2:])
        for reach in (None, 2, 1):
            reuse = _reuse_unit(unit, out_shape, reused, reach)
            planes = tuple(reuse[-2:]) == tuple(out_shape[-2:])
            slabs = -(-out_shape[0] // reuse[0]) if len(out_shape) == 3 else 1
            if planes and not gpu and slabs < cluster.threads:
                # fewer slabs of whole planes than threads: their reads, stitching and writes
                # would not overlap, which costs more than decoding some chunks twice
                continue
            if cost(reuse) <= room:
                unit, minimum = reuse, cost(reuse)
                break
    budget = cluster.split_bytes(allowed, minimum, cost(out_shape), gpu=gpu)
    ndim = len(out_shape)
    block = grow_block(unit, out_shape, 0, budget, axes=(ndim - 2, ndim - 1), cost=cost)
    if ndim == 3:
        block = grow_block(block, out_shape, 0, budget, axes=(0,), cost=cost)
    return block


def _stitch_block(
    source: ArrayRef,
    transform: TileTransform,
    blending: Blending,
    gpu: bool,
    threads: int,
    dtype: DTypeLike = np.float32,
    block_info: dict[Any, Any] | None = None,
) -> Any:
    info = block_info[None]
    (y0, y1), (x0, x1) = info["array-location"][-2:]
    hit = tiles_in_region(transform, (y0, x0), (y1 - y0, x1 - x0))
    if hit is None:
        return gpu_module(gpu).zeros(info["chunk-shape"], dtype=dtype)
    rows, cols = hit
    th, tw = transform.tile_shape
    region = tuple(slice(a, b) for a, b in info["array-location"][:-2]) + (
        slice(rows.start * th, rows.stop * th),
        slice(cols.start * tw, cols.stop * tw),
    )
    tiles = source.read(region, gpu=gpu)  # a worker's first read checks it sees the client's grid
    return stitch_region(
        tiles,
        transform,
        blending,
        origin=(y0, x0),
        shape=(y1 - y0, x1 - x0),
        grid_origin=(rows.start, cols.start),
        dtype=dtype,
        threads=1 if gpu else threads,
    )


def stitch_lazy(
    source: str | os.PathLike[str] | ArrayRef,
    transform: TileTransform,
    blending: Blending = "linear",
    *,
    block: Sequence[int],
    gpu: bool = False,
    threads: int = 1,
    dtype: DTypeLike | None = None,
) -> da.Array:
    """The stitched image of a mosaic grid (a path, or its level opened already) as a lazy dask
    array of ``block``-shaped blocks, in the tiles' dtype by default; each block is stitched in
    ``threads`` bands of rows on the CPU (blocks of whole planes are few)."""
    blending = parse_blending(blending)
    name = source.source if isinstance(source, ArrayRef) else source
    grid = array_ref(source)  # opened once; its tasks read it, opening nothing
    shape = grid.shape
    dtype = stitch_dtype(grid.dtype, dtype)
    transform.check_mosaic_shape(shape, f"{name}: mosaic grid")
    out_shape = (*shape[:-2], *transform.output_shape())
    return da.map_blocks(
        _stitch_block,
        grid,
        transform,
        blending,
        gpu,
        threads,
        dtype,
        chunks=aligned_chunks(_whole(out_shape), block),
        dtype=dtype,
        meta=empty_meta(dtype, len(out_shape), gpu),
    )


def stitch_threads(out_shape: Sequence[int], block: Sequence[int], cluster: Cluster) -> int:
    """Threads to stitch each block with: the cluster's threads shared by the blocks that run at
    once, so that a job of fewer blocks than threads still uses them all."""
    blocks = math.prod(-(-int(n) // int(b)) for n, b in zip(out_shape, block))
    return max(1, -(-cluster.threads // max(1, min(blocks, cluster.slots))))
