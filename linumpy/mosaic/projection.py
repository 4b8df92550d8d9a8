"""Projections of a 3D volume along z as lazy dask arrays of bounded blocks.

Each task sums a column of the volume (whole stored chunks wide) a slab at a time. When the
plane gives fewer blocks than the cluster runs tasks at once, the depth is split too and the
partial sums added, so that every worker gets tasks. No stored chunk is read by two tasks.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import dask.array as da
import numpy as np

from linumpy._numpy_or_cupy import gpu_module
from linumpy.errors import LinumpyError
from linumpy.io.array_ref import ArrayRef, array_ref
from linumpy.io.blocks import aligned_chunks, grow_block, host_decoded, storage_unit
from linumpy.io.dask_write import empty_meta
from linumpy.io.engine.memory import check_host_memory
from linumpy.parallel import Cluster
from linumpy.parallel.block_sizes import BLOCKS_PER_SLOT, GPU_READ_TASK_BYTES, TASK_SHARE

__all__: list[str] = []


def _whole(shape: Sequence[int]) -> tuple[slice, ...]:
    return tuple(slice(0, n) for n in shape)


def _slab_sum_dtype(dtype: np.dtype, step: int) -> np.dtype:
    """The dtype a slab of ``step`` planes is summed in: 32-bit integers for small integers whose
    sum cannot overflow them (exact, as float64 is, and faster: docs/writing.md, "Layout"),
    else float64."""
    if dtype.kind in "bu" and dtype.itemsize <= 2 and step * (2 ** (8 * dtype.itemsize)) <= 2**32:
        return np.dtype(np.uint32)
    if dtype.kind == "i" and dtype.itemsize <= 2 and step * (2 ** (8 * dtype.itemsize - 1)) < 2**31:
        return np.dtype(np.int32)
    return np.dtype(np.float64)


def read_threads(blocks: int, threads: int) -> int:
    """Threads each task's reads may use: the ``io_threads`` setting shared by the tasks that
    run at once (``threads``, or fewer when the job has fewer ``blocks``), so that they do not
    oversubscribe the cores."""
    from linumpy import settings

    return max(1, settings.get().io_threads // max(1, min(blocks, threads)))


def leading_axes(shape: Sequence[int]) -> int | None:
    """How many axes of length 1 come before a volume's ``(Z, Y, X)`` (2 for ``(1, 1, Z, Y,
    X)``); None when ``shape`` is no such volume."""
    if len(shape) < 3 or len(shape) > 5 or any(n != 1 for n in shape[:-3]):
        return None
    return len(shape) - 3


def _column_sum(
    source: ArrayRef,
    gpu: bool,
    step: int,
    z0: int,
    z1: int,
    rows: slice,
    cols: slice,
    io_threads: Any,
    lead: int = 0,
) -> Any:
    """The float64 sum over planes ``z0:z1`` of a column, read ``step`` planes at a time, past
    ``lead`` leading axes of length 1."""
    xp = gpu_module(gpu)
    total = xp.zeros((rows.stop - rows.start, cols.stop - cols.start), dtype=xp.float64)
    overrides = None if io_threads is None else {"io_threads": io_threads}
    for start in range(z0, z1, step):
        region = (*(slice(0, 1),) * lead, slice(start, min(start + step, z1)), rows, cols)
        slab = source.read(region, gpu=gpu, settings=overrides)
        slab = slab.reshape(slab.shape[lead:])
        # integer sums below 2**53 are exact in float64: the result is the same either way
        total += slab.sum(axis=0, dtype=_slab_sum_dtype(slab.dtype, step))
    return total


def _project_column(
    source: ArrayRef,
    gpu: bool,
    step: int,
    depth: int,
    io_threads: int | None = None,
    block_info: dict[Any, Any] | None = None,
    lead: int = 0,
) -> Any:
    (y0, y1), (x0, x1) = block_info[None]["array-location"]
    rows, cols = slice(y0, y1), slice(x0, x1)
    total = _column_sum(source, gpu, step, 0, depth, rows, cols, io_threads, lead)
    return (total / depth).astype(gpu_module(gpu).float32)


def _partial_column(
    source: ArrayRef,
    gpu: bool,
    step: int,
    edges: tuple[int, ...],
    io_threads: int | None = None,
    block_info: dict[Any, Any] | None = None,
    lead: int = 0,
) -> Any:
    (g, _), (y0, y1), (x0, x1) = block_info[None]["array-location"]
    z0, z1 = edges[g], edges[g + 1]
    rows, cols = slice(y0, y1), slice(x0, x1)
    return _column_sum(source, gpu, step, z0, z1, rows, cols, io_threads, lead)[None]


def _mean(total: Any, depth: int) -> Any:
    return (total / depth).astype(np.float32)


def depth_groups(depth: int, unit: int, plane_blocks: int, slots: int) -> tuple[int, ...]:
    """Edges of the depth ranges a projection's columns are split into: whole ``unit`` planes
    each, enough of them that the ``plane_blocks`` columns make ``BLOCKS_PER_SLOT`` tasks for
    each of the cluster's ``slots`` (one range when the plane's blocks alone do)."""
    units = -(-depth // unit)
    wanted = -(-slots * BLOCKS_PER_SLOT // max(1, plane_blocks))
    groups = max(1, min(units, wanted))
    if groups == 1:
        return (0, depth)
    edges = [min(depth, round(i * units / groups) * unit) for i in range(groups + 1)]
    return tuple(sorted(set(edges)))


def projection_lazy(
    path: str | os.PathLike[str],
    *,
    gpu: bool = False,
    align: Sequence[int] | None = None,
    cluster: Cluster | None = None,
) -> da.Array:
    """Mean of a 3D volume (or a ``(1, 1, Z, Y, X)`` image's) along z as a lazy float32 dask
    array of ``(Y, X)`` blocks.

    Each block's task reads its column a shard (under a memory limit a chunk) deep at a time
    and adds the slabs' sums in z order. Blocks are whole chunks in y and x, multiples of
    ``align`` (the output's shards), and on the CPU whole shards where a task holds one; each
    task's reads use its share of the ``io_threads`` setting. On a distributed cluster with too
    few columns, each column is also split in depth (:func:`depth_groups`) and the float64
    partial sums added before the mean.
    """
    source = array_ref(path)  # opened once: the tasks read it, opening nothing
    array = source.array
    lead = leading_axes(array.shape)
    if lead is None:
        raise LinumpyError(
            f"{path}: an average intensity projection needs a 3D volume, not "
            f"{array.ndim}D {array.shape}"
        )
    if np.dtype(array.dtype).kind == "c":  # its real part would be projected, with a warning
        raise LinumpyError(
            f"{path}: complex data ({array.dtype}); project its magnitude: write np.abs of it "
            "as an image first"
        )
    # The projection itself is held in memory (float32): refuse absurd metadata before the graph
    # of its blocks, which would take longer than the computation, is built.
    check_host_memory(
        math.prod(array.shape[-2:]) * 4, str(path), f"a projection of shape {array.shape[-2:]}"
    )
    # the volume's own axes: a (1, 1, Z, Y, X) image is projected as its (Z, Y, X)
    shape, stored, chunked = array.shape[lead:], storage_unit(array)[lead:], array.chunks[lead:]
    step = min(stored[0], shape[0])
    itemsize = np.dtype(array.dtype).itemsize
    plane = shape[1:]
    chunks = tuple(min(int(c), n) for c, n in zip(chunked[1:], plane))

    def aligned(unit: tuple[int, ...]) -> tuple[int, ...]:
        if align is None:
            return unit
        return tuple(min(math.lcm(u, a), n) for u, a, n in zip(unit, align, plane))

    def cost(block: tuple[int, ...]) -> int:
        return math.prod(block) * (step * itemsize + 3 * 8 + 2 * 4)

    # The GPU's blocks are whole inner chunks (a shard's columns go to several tasks, each
    # reading its own chunks); the CPU's whole shards, so that one task reads a shard's index
    # and decodes its chunks, and the job's tasks are few enough to share the cores.
    units = [aligned(chunks), chunks]
    if not gpu:
        units.insert(0, aligned(tuple(min(int(u), n) for u, n in zip(stored[1:], plane))))
    cluster = cluster or Cluster()
    unit = units[0]
    if cluster.memory_limit is not None:
        step = min(int(chunked[0]), shape[0])  # smaller reads, each chunk still read once
        room = int(cluster.memory_limit * TASK_SHARE) // cluster.max_threads
        # a shard, or ``align``, too large for the limit: smaller blocks, joined before the write
        unit = next((u for u in units if cost(u) <= room), chunks)
    # GPU reads that decode on the host decode a chunk per thread: the CPU's many small tasks
    gpu_tasks = gpu and not host_decoded(array)
    total = cost(plane)
    budget = cluster.task_bytes(
        cost(unit), "the projection", total=total, gpu=gpu_tasks, gpu_task_bytes=GPU_READ_TASK_BYTES
    )
    block = grow_block(unit, plane, 0, budget, cost=cost)
    blocks = aligned_chunks(_whole(plane), block)
    wanted = cluster.slots * BLOCKS_PER_SLOT
    if cluster.client is not None and math.prod(len(b) for b in blocks) < wanted:
        # too few columns for the workers: columns of whole chunks, about ``wanted`` of them
        # (blocks are joined to the output's shards before the write)
        block = grow_block(
            chunks, plane, 0, max(cost(chunks), min(budget, total // wanted)), cost=cost
        )
        blocks = aligned_chunks(_whole(plane), block)
    io_threads = None
    if not gpu and cluster.client is None:
        io_threads = read_threads(math.prod(len(b) for b in blocks), cluster.threads)
    depth = shape[0]
    edges = (0, depth)
    if cluster.client is not None:  # local threads share each task's reads instead
        # ranges of whole shards (a shard's index read once per column), else of whole chunks
        columns = math.prod(len(b) for b in blocks)
        for unit in (stored[0], int(chunked[0])):
            edges = depth_groups(depth, unit, columns, cluster.slots)
            if len(edges) - 1 >= cluster.slots:
                break
    if len(edges) == 2:
        return da.map_blocks(
            _project_column,
            source,
            gpu,
            step,
            depth,
            io_threads,
            chunks=blocks,
            dtype=np.float32,
            meta=empty_meta(np.float32, 2, gpu),
            lead=lead,
        )
    partial = da.map_blocks(
        _partial_column,
        source,
        gpu,
        step,
        edges,
        io_threads,
        chunks=((1,) * (len(edges) - 1), *blocks),
        dtype=np.float64,
        meta=empty_meta(np.float64, 3, gpu),
        lead=lead,
    )
    total = partial.sum(axis=0, dtype=np.float64)
    return total.map_blocks(_mean, depth, dtype=np.float32, meta=empty_meta(np.float32, 2, gpu))
