"""The storage layout linumpy writes by default: small inner chunks grouped into shards.

nvCOMP decodes a zstd frame serially, so a GPU read is as fast as its chunks are small and many;
the CPU pays per chunk. The shards group the chunks into few files: one tile of a mosaic grid,
or slabs of whole planes. NGFF 0.4 has no shards: one file per chunk.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import numpy as np

from linumpy import settings
from linumpy.io.formats import NgffFormat, NgffVersion, format_of

__all__: list[str] = []

logger = logging.getLogger(__name__)

#: Inner chunks of a volume reach this many voxels in y and x before they grow in depth: planes
#: are what projections, stitching and viewers read.
PLANE_EDGE = 128
#: Largest shard :func:`slab_shards` makes by default. A shard is written whole by one task, so
#: its size bounds a writer's memory; whole planes of most volumes fit.
SHARD_BYTES = 128 * 2**20
#: Zarr v2 (NGFF 0.4) writes one file per chunk. Above this many chunk files in one array the
#: writers warn: every file costs tens of microseconds to create and delete on a local disk, and
#: network file systems and object stores pay milliseconds per file and limit their counts.
V2_WARN_FILES = 100_000

ShardsArg = Sequence[int] | Literal["auto"] | None


class Layout(NamedTuple):
    """A chunk shape and a shard shape (None: one file per chunk)."""

    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None


def _space(ndim: int, space: Sequence[int] | None) -> list[int]:
    """The space axes: ``space``, else the last three (two for 2-D)."""
    if space is None:
        return list(range(max(0, ndim - 3), ndim))
    return sorted(int(a) % ndim for a in space)


def _nearest_divisor(n: int, target: int) -> int:
    """The divisor of ``n`` nearest ``target`` by ratio (the smaller on a tie)."""
    divisors = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    divisors += [n // d for d in divisors]
    return min(divisors, key=lambda d: (abs(math.log(d / target)), d))


def inner_chunks(
    shape: Sequence[int],
    dtype: np.typing.DTypeLike,
    *,
    space: Sequence[int] | None = None,
    chunk_bytes: int | None = None,
    within: Sequence[int] | None = None,
) -> tuple[int, ...]:
    """The chunk shape of linumpy's default layout: about ``chunk_bytes`` per chunk, the space
    axes grown by doubling (y and x up to :data:`PLANE_EDGE`, then z, then y and x again), other
    axes 1; with ``within``, each axis is moved to the nearest divisor of that tile's."""
    shape = tuple(max(1, int(n)) for n in shape)
    itemsize = np.dtype(dtype).itemsize
    target = settings.get().chunk_bytes if chunk_bytes is None else int(chunk_bytes)
    limit = shape if within is None else tuple(min(int(w), n) for w, n in zip(within, shape))
    axes = _space(len(shape), space)
    chunk = [1] * len(shape)
    if not axes:
        return tuple(chunk)

    def grow(order: Sequence[int], cap: float) -> None:
        """Double the axes of ``order`` in turn, each up to ``cap`` and its limit."""
        active = [a for a in order if chunk[a] < min(cap, limit[a])]
        while active:
            for axis in list(active):
                new = min(chunk[axis] * 2, limit[axis])
                if new > cap or math.prod(chunk) // chunk[axis] * new * itemsize > target:
                    active.remove(axis)
                    continue
                chunk[axis] = new
                if new >= min(cap, limit[axis]):
                    active.remove(axis)

    plane, depth = axes[-2:][::-1], axes[:-2]  # x before y: rows stay long
    if depth:
        grow(plane, PLANE_EDGE)
        grow(depth[::-1], math.inf)
    grow(plane, math.inf)
    if within is not None:
        chunk = [_nearest_divisor(n, c) for n, c in zip(limit, chunk)]
    return tuple(chunk)


def _grow_whole(
    shards: list[int],
    axes: Sequence[int],
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    itemsize: int,
    shard_bytes: int,
) -> None:
    """Grow ``shards`` along ``axes`` in order, each to the whole axis when it fits, else to as
    many whole chunks as fit (in balanced shards), and then stop."""
    for axis in axes:
        count = -(-shape[axis] // chunks[axis])
        others = math.prod(shards) // shards[axis] * itemsize
        fit = max(1, min(count, shard_bytes // max(1, others * chunks[axis])))
        per_shard = -(-count // -(-count // fit))  # the same number of chunks in every shard
        shards[axis] = chunks[axis] * per_shard
        if per_shard < count:
            return


def slab_shards(
    shape: Sequence[int],
    chunks: Sequence[int],
    dtype: np.typing.DTypeLike,
    *,
    space: Sequence[int] | None = None,
    shard_bytes: int = SHARD_BYTES,
) -> tuple[int, ...] | None:
    """Shards of whole x rows, then whole planes, then as many planes as fit ``shard_bytes``, in
    whole chunks; None when a shard would hold one chunk."""
    shape = tuple(max(1, int(n)) for n in shape)
    chunks = tuple(min(int(c), n) for c, n in zip(chunks, shape))
    shards = list(chunks)
    axes = _space(len(shape), space)[::-1]
    _grow_whole(shards, axes, shape, chunks, np.dtype(dtype).itemsize, shard_bytes)
    return None if tuple(shards) == chunks else tuple(shards)


def tile_shards(
    shape: Sequence[int],
    chunks: Sequence[int],
    dtype: np.typing.DTypeLike,
    tile: Sequence[int],
    *,
    space: Sequence[int] | None = None,
    shard_bytes: int = SHARD_BYTES,
) -> tuple[int, ...] | None:
    """Shards of one tile ``(h, w)`` of a mosaic grid in y and x, and as much of its depth as
    fits ``shard_bytes``; None when a shard would hold one chunk."""
    shape = tuple(max(1, int(n)) for n in shape)
    chunks = tuple(min(int(c), n) for c, n in zip(chunks, shape))
    axes = _space(len(shape), space)
    shards = list(chunks)
    for axis, size in zip(axes[-2:], tuple(tile)[-2:]):
        if int(size) % chunks[axis]:
            raise ValueError(f"chunks {chunks} do not divide the tile {tuple(tile)}")
        shards[axis] = int(size)
    _grow_whole(shards, axes[:-2][::-1], shape, chunks, np.dtype(dtype).itemsize, shard_bytes)
    return None if tuple(shards) == chunks else tuple(shards)


def tile_layout(
    shape: Sequence[int],
    dtype: np.typing.DTypeLike,
    tile: Sequence[int],
    *,
    space: Sequence[int] | None = None,
    shard_bytes: int = SHARD_BYTES,
) -> Layout:
    """The default layout of a mosaic grid of ``(h, w)`` tiles: one tile per shard."""
    shape = tuple(int(n) for n in shape)
    axes = _space(len(shape), space)
    within = list(shape)
    for axis, size in zip(axes[-2:], tuple(tile)[-2:]):
        within[axis] = int(size)
    chunks = inner_chunks(shape, dtype, space=axes, within=within)
    shards = tile_shards(shape, chunks, dtype, tile, space=axes, shard_bytes=shard_bytes)
    return Layout(chunks, shards)


def _parse(value: Any, shape: tuple[int, ...], name: str) -> tuple[int, ...]:
    block = tuple(int(v) for v in value)
    if len(block) != len(shape) or min(block, default=1) < 1:
        raise ValueError(f"{name} must hold {len(shape)} positive integers, got {tuple(value)}")
    return block


def warn_file_count(shape: Sequence[int], chunks: Sequence[int], *, what: str) -> None:
    """Warn when an unsharded array of ``chunks`` makes over :data:`V2_WARN_FILES` files."""
    files = math.prod(-(-int(n) // int(c)) for n, c in zip(shape, chunks))
    if files > V2_WARN_FILES:
        logger.warning(
            "%s: %s chunks of %s make %s files (NGFF 0.4 has no shards); so many files are slow "
            "to write, copy and delete, on network file systems above all. Write NGFF 0.5 "
            "(sharded by default) or pass larger chunks",
            what,
            tuple(int(c) for c in chunks),
            tuple(int(n) for n in shape),
            f"{files:,}",
        )


def default_layout(
    shape: Sequence[int],
    dtype: np.typing.DTypeLike,
    *,
    chunks: Sequence[int] | None = None,
    shards: ShardsArg = "auto",
    ngff_version: NgffVersion | NgffFormat = "0.5",
    space: Sequence[int] | None = None,
    what: str = "this image",
) -> Layout:
    """Resolve a writer's ``chunks`` and ``shards``: ``chunks=None`` takes :func:`inner_chunks`,
    ``shards="auto"`` :func:`slab_shards` for NGFF 0.5 and none for 0.4 (with a warning when the
    files are very many), ``shards=None`` one file per chunk; explicit shapes are checked."""
    shape = tuple(int(n) for n in shape)
    sharding = format_of(ngff_version).sharding
    given = chunks is not None
    explicit = shards is not None and not isinstance(shards, str)
    shard = _parse(shards, shape, "shards") if explicit else None
    if given:
        chunk = _parse(chunks, shape, "chunks")
    else:  # within explicit shards: they must be multiples of the chunks
        chunk = inner_chunks(shape, dtype, space=space, within=shard)
    if isinstance(shards, str):
        if shards != "auto":
            raise ValueError(f"shards must be a shape, 'auto' or None, got {shards!r}")
        if not sharding:
            warn_file_count(shape, chunk, what=what)
            return Layout(chunk, None)
        return Layout(chunk, slab_shards(shape, chunk, dtype, space=space))
    if shards is None:
        if not sharding and not given:
            warn_file_count(shape, chunk, what=what)
        return Layout(chunk, None)
    assert shard is not None
    if not sharding:
        raise ValueError("shards need zarr v3: use ngff_version='0.5'")
    if any(s % c for s, c in zip(shard, chunk)):
        raise ValueError(f"shards {shard} must be multiples of chunks {chunk}")
    return Layout(chunk, shard)
