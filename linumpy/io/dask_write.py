"""Writing dask arrays into zarr arrays in parallel, each task a region of whole shards (no two
tasks touch one stored object), and building pyramids out of core from the stored levels.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np
import zarr
from zarr.storage import LocalStore

from linumpy import phases, settings
from linumpy._numpy_or_cupy import array_module, gpu_module
from linumpy.errors import LinumpyError
from linumpy.io.array_ref import ArrayRef, array_ref
from linumpy.io.block_write import store_block
from linumpy.io.blocks import aligned_chunks, grow_block, storage_unit
from linumpy.io.downsample import downsample_mean
from linumpy.io.layout import SHARD_BYTES
from linumpy.parallel import Cluster
from linumpy.parallel.block_sizes import TASK_SHARE

if TYPE_CHECKING:
    from linumpy.io.writer import OmeZarrWriter

__all__: list[str] = []


def array_path(target: zarr.Array | str | os.PathLike[str]) -> str:
    """The directory of a zarr array on the local file system, as an absolute path."""
    # absolute: the tasks writing it may run in dask workers with working directories of their own
    if not isinstance(target, zarr.Array):
        return os.path.abspath(os.fspath(target))
    if not isinstance(target.store, LocalStore):
        raise LinumpyError(f"writing dask arrays needs a zarr array on disk, not in {target.store}")
    return os.path.abspath(Path(target.store.root) / target.path)


def align_blocks(data: da.Array, unit: Sequence[int]) -> da.Array:
    """``data`` rechunked, if needed, so that every block boundary is a multiple of ``unit``."""
    if all(
        all(edge % u == 0 for edge in np.cumsum(chunks)[:-1])
        for chunks, u in zip(data.chunks, unit)
    ):
        return data
    block = tuple(max(1, round(max(chunks) / u)) * u for chunks, u in zip(data.chunks, unit))
    # dask imports distributed (slow) to look for a client unless told the method; without
    # distributed loaded there is none, and dask would choose "tasks" itself
    return data.rechunk(block, method=None if "distributed" in sys.modules else "tasks")


def block_write_threads(n_blocks: int) -> int:
    """Encoding threads for each host block of a write of ``n_blocks`` blocks: the CPUs shared by
    the blocks that run at once, so that a write of few large blocks still uses every CPU."""
    cpus = settings.get().io_threads
    return max(1, cpus // max(1, min(n_blocks, cpus)))


def task_target(target: zarr.Array | str | os.PathLike[str]) -> zarr.Array:
    """A zarr array on disk opened once for the tasks that write it (pickled to a cluster's
    workers with its parsed metadata); its absolute path names the same files on every worker."""
    return zarr.open_array(store=LocalStore(array_path(target)), mode="r+")  # a path, not a URL


def _write_block(
    block: Any, target: zarr.Array, threads: int = 1, block_info: dict[Any, Any] | None = None
) -> np.ndarray:
    region = tuple(slice(a, b) for a, b in block_info[0]["array-location"])
    # numpy blocks: the blocks running at once share the CPUs (block_write_threads); cupy
    # blocks: the GPU encodes, threads write the files.
    on_host = array_module(block) is np
    store_block(target, region, block, settings={"io_threads": threads} if on_host else None)
    return np.full((1,) * block.ndim, block.nbytes, dtype=np.int64)


def store_graph(data: da.Array, target: zarr.Array | str | os.PathLike[str]) -> da.Array:
    """A lazy write of ``data`` into the zarr array ``target``, aligned to its shards first."""
    path = array_path(target)
    array = task_target(path)
    if tuple(array.shape) != tuple(data.shape):
        raise LinumpyError(f"{path}: shape {array.shape}, the data to write {data.shape}")
    data = align_blocks(data, storage_unit(array))
    return data.map_blocks(
        _write_block,
        array,
        block_write_threads(data.npartitions),
        chunks=tuple((1,) * len(c) for c in data.chunks),
        dtype=np.int64,
        meta=np.empty((0,) * data.ndim, dtype=np.int64),
    )


@phases.recorded("level 0", unless_within=("pyramid",))
def store_dask(
    data: da.Array,
    target: zarr.Array | str | os.PathLike[str],
    *,
    cluster: Cluster | None = None,
    progress: bool = False,
    desc: str = "write",
) -> int:
    """Write a dask array (numpy or cupy blocks) into a zarr array, shard-aligned, in parallel."""
    cluster = cluster or Cluster()
    # one output per block, summed here: a distributed progress bar then counts the blocks
    written = cluster.compute(store_graph(data, target), desc=desc, progress=progress)
    return int(written.sum())


#: Working set of the averaging temporaries of one pyramid task: the source block is read whole
#: (each stored chunk once) and averaged a slab of planes at a time, so a task holds the source
#: block, its output and one slab's temporaries, not the whole block's. On the device the task
#: averages slabs of this size; on the host :func:`~linumpy.io.downsample.downsample_mean` takes
#: smaller slabs of its own, so the cost counted here is an upper bound there.
PYRAMID_SLAB_BYTES = 32 * 2**20


def _slab_planes(block: Sequence[int], full: int) -> int:
    """Output planes averaged at once in a block: :data:`PYRAMID_SLAB_BYTES` of temporaries."""
    return max(1, PYRAMID_SLAB_BYTES // max(1, math.prod(block[1:]) * full))


def _downsample_block(
    source: ArrayRef,
    factors: tuple[int, ...],
    gpu: bool,
    full: int,
    block_info: dict[Any, Any] | None = None,
) -> Any:
    info = block_info[None]
    location = info["array-location"]
    region = tuple(
        slice(a * f, min(b * f, n)) for (a, b), f, n in zip(location, factors, source.shape)
    )
    axes = [i for i, f in enumerate(factors) if f == 2]
    data = source.read(region, gpu=gpu)
    shape = tuple(info["chunk-shape"])
    step = _slab_planes(shape, full)
    if not gpu or step >= shape[0]:  # on the host, downsample_mean averages in slabs itself
        return downsample_mean(data, axes)
    # slabs start at even source planes: the pairs, and the odd last plane, are the whole
    # block's, so the result is the same bit for bit
    out = gpu_module(gpu).empty(shape, dtype=data.dtype)
    f0 = factors[0]
    for z0 in range(0, shape[0], step):
        z1 = min(z0 + step, shape[0])
        out[z0:z1] = downsample_mean(data[z0 * f0 : z1 * f0], axes)
    return out


def _downsample_cost(dtype: np.dtype, factors: Sequence[int]) -> int:
    """Bytes of working set per output element: the source block, the halved temporaries in
    the dtype the sums are taken in, and the output with its encoded copy."""
    source = math.prod(factors)
    if dtype.kind in "fc":
        work, copy = dtype.itemsize, 0
    elif dtype.itemsize <= 4:
        work, copy = (4 if dtype.itemsize <= 2 else 8), 0
    else:
        work, copy = 8, source * 8
    return source * dtype.itemsize + copy + source * work + 2 * dtype.itemsize


@phases.recorded("pyramid")
def write_pyramid(
    arrays: Sequence[zarr.Array],
    *,
    axes: Sequence[int] | None = None,
    gpu: bool = False,
    cluster: Cluster | None = None,
    progress: bool = False,
) -> None:
    """Fill pyramid levels 1 and up, each the 2x mean of the level above as stored (along the
    ``axes`` longer than 1), block by block: memory holds a few blocks whatever the image's size."""
    cluster = cluster or Cluster()
    for index, (source, target) in enumerate(zip(arrays, arrays[1:]), start=1):
        factors = tuple(
            2 if n > 1 and (axes is None or i in axes) else 1 for i, n in enumerate(source.shape)
        )
        dtype = np.dtype(target.dtype)
        unit = storage_unit(target)
        full = _downsample_cost(dtype, factors)
        # the source block, the output and its encoded copy, and one slab's temporaries
        held = (math.prod(factors) + 2) * dtype.itemsize

        def cost(block: tuple[int, ...], full: int = full, held: int = held) -> int:
            planes = _slab_planes(block, full)
            if planes >= block[0]:  # averaged whole
                return math.prod(block) * full
            return math.prod(block) * held + planes * math.prod(block[1:]) * full

        budget = cluster.task_bytes(
            cost(unit), f"pyramid level {index}", total=cost(tuple(target.shape)), gpu=gpu
        )
        block = grow_block(unit, target.shape, 0, budget, cost=cost)
        whole = tuple(slice(0, n) for n in target.shape)
        level = da.map_blocks(
            _downsample_block,
            array_ref(array_path(source)),  # opened once: the tasks read it, opening nothing
            factors,
            gpu,
            full,
            chunks=aligned_chunks(whole, block),
            dtype=dtype,
            meta=empty_meta(dtype, target.ndim, gpu),
        )
        store_dask(level, target, cluster=cluster, progress=progress, desc=f"level {index}")


@contextmanager
def committed(writer: OmeZarrWriter) -> Iterator[OmeZarrWriter]:
    """Commit an :class:`~linumpy.io.OmeZarrWriter` whose every level the ``with`` block writes
    (a replacement moves into place); on an exception, abort it (the old image stays)."""
    try:
        yield writer
    except BaseException:
        writer.abort()
        raise
    writer.commit()


def space_axes(writer: OmeZarrWriter) -> list[int]:
    """The axes of a writer's image that its pyramid shrinks: the space axes."""
    return [i for i, axis in enumerate(writer.axes) if axis.type == "space"]


def empty_meta(dtype: np.typing.DTypeLike, ndim: int, gpu: bool) -> Any:
    """An empty numpy (or, with ``gpu``, cupy) array: the ``meta`` of a dask array's blocks."""
    return gpu_module(gpu).empty((0,) * ndim, dtype=dtype)


def shard_budget(cluster: Cluster, per_byte: float = 1.0) -> int:
    """The largest shard (bytes) a job's tasks can write: :data:`linumpy.io.layout.SHARD_BYTES`,
    or less under a memory limit, where a task holding one shard uses ``per_byte`` times its
    bytes and each thread gets its share of ``TASK_SHARE`` of the limit."""
    if cluster.memory_limit is None:
        return SHARD_BYTES
    usable = int(cluster.memory_limit * TASK_SHARE) // cluster.max_threads
    return max(1, min(SHARD_BYTES, int(usable / per_byte)))
