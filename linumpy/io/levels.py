"""Level 0 and level 1 of a pyramid written from the same blocks, while they are in memory.

A pyramid built after level 0 reads level 0 back from storage. When a job computes level 0
block by block (the stitch, for example), each block can be halved before it is dropped: the
task that writes a level-0 block returns its 2x mean, and those small blocks are written into
level 1. Level 0 is then read by no one, and on the GPU the blocks never leave the device for
it; the levels after 1, an eighth of the data and less, are built from level 1 as before
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
    array_path,
    block_write_threads,
    empty_meta,
    store_dask,
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
    path: str,
    axes: tuple[int, ...],
    threads: int,
    block_info: dict[Any, Any] | None = None,
) -> Any:
    _write_block(block, path, threads, block_info=block_info)
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
    """Write ``data`` into ``arrays[0]`` and, from the same blocks, its 2x mean into
    ``arrays[1]`` when the blocks allow it; return the levels still to fill from the last one
    written (for :func:`~linumpy.io.dask_write.write_pyramid`).

    Level 1 is written from the blocks when there is a level 1, the cluster has no per-task
    memory limit (halving a block needs half a block more) and every block but the last has
    an even extent along the axes that shrink (blocks start on the level's shards, so this
    holds for linumpy's layouts). Otherwise only level 0 is written.

    Parameters
    ----------
    data
        Level 0, a dask array of numpy or cupy blocks.
    arrays
        The pyramid's levels, full resolution first (e.g. ``OmeZarrWriter(...).arrays``).
    axes
        The axes that shrink (an image's space axes); all by default.
    gpu
        The blocks are cupy arrays (halved on their device).
    cluster, progress, desc
        As for :func:`~linumpy.io.dask_write.store_dask`.

    Returns
    -------
    list of zarr.Array
        ``arrays[1:]`` when level 1 was written, else ``arrays``: the pyramid still to build
        from its first level.

    Examples
    --------
    >>> import dask.array as da, numpy as np, tempfile
    >>> from linumpy.io import OmeZarrWriter, downsample_mean
    >>> from linumpy.io.dask_write import write_pyramid
    >>> writer = OmeZarrWriter(tempfile.mkdtemp() + "/i.ome.zarr", (8, 32, 32), np.float32,
    ...                        voxel_size=(1, 1, 1), chunks=(4, 8, 8), n_levels=3)
    >>> volume = np.random.default_rng(0).random((8, 32, 32), dtype=np.float32)
    >>> rest = store_levels(da.from_array(volume, chunks=(4, 16, 16)), writer.arrays)
    >>> len(rest)  # level 1 came from the blocks: levels 1 and 2 remain, 2 to build
    2
    >>> write_pyramid(rest)
    >>> bool(np.allclose(writer.arrays[2][...], downsample_mean(downsample_mean(volume))))
    True
    """
    cluster = cluster or Cluster()
    target = arrays[0]
    aligned = align_blocks(data, storage_unit(target))
    factors = tuple(
        2 if n > 1 and (axes is None or i in axes) else 1 for i, n in enumerate(target.shape)
    )
    halved = _halved_chunks(aligned.chunks, factors) if len(arrays) > 1 else None
    expected = tuple(-(-n // f) for n, f in zip(target.shape, factors))
    if (
        halved is None
        or cluster.memory_limit is not None
        or tuple(arrays[1].shape) != expected
        or np.dtype(arrays[1].dtype) != np.dtype(target.dtype)
    ):
        store_dask(data, target, cluster=cluster, progress=progress, desc=desc)
        return list(arrays)
    shrink = tuple(i for i, f in enumerate(factors) if f == 2)
    level1 = aligned.map_blocks(
        _write_and_halve,
        array_path(target),
        shrink,
        block_write_threads(aligned.npartitions),
        chunks=halved,
        dtype=target.dtype,
        meta=empty_meta(target.dtype, target.ndim, gpu),
    )
    store_dask(level1, arrays[1], cluster=cluster, progress=progress, desc=desc)
    return list(arrays[1:])
