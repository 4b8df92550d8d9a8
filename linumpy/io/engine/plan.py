"""The engine's plan stage: which stored chunks (or ranges inside shards) cover a region, and
where each lands in the output; shard indexes are read and checked here. Layouts are those
:mod:`linumpy.io.engine.codecs` recognises; anything else raises
:class:`~linumpy.errors.UnsupportedLayoutError` so that callers fall back to zarr.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import zarr

from linumpy.io.engine.array_layout import ArrayLayout, parse_layout
from linumpy.io.engine.codecs import DEFAULT
from linumpy.io.engine.codecs.protocol import Compressor
from linumpy.io.engine.fetch import EMPTY_INNER_CHUNK, SHARD_INDEX_ENTRY, read_shard_index
from linumpy.io.engine.keys import chunk_keys
from linumpy.io.engine.memory import check_host_memory
from linumpy.io.engine.region import Region, parse_region
from linumpy.settings import Settings

#: Largest decoded chunk a GPU read gives nvCOMP; libzstd decodes larger ones on the host.
GPU_CHUNK_BYTES = 16 * 2**20
__all__: list[str] = []


@dataclass(frozen=True)
class ReadPlan:
    """Everything a reader needs to produce ``array[region]``, as arrays over the plan's entries.

    An entry is one chunk (an inner chunk of a shard for sharded arrays) that the region
    touches. Entries are numbered in C order of the chunk grid; per-entry values are numpy
    arrays, so that plans of large arrays cost no Python object per chunk.
    """

    source: str
    shape: tuple[int, ...]
    dtype: np.dtype
    stored_dtype: np.dtype
    chunk_shape: tuple[int, ...]
    order: Literal["C", "F"]
    fill_value: np.generic
    region: Region
    files: tuple[str, ...]
    file_index: np.ndarray
    offsets: np.ndarray
    nbytes: np.ndarray
    coords: np.ndarray
    stored: np.ndarray
    chunks_per_shard: tuple[int, ...] | None = None
    crc32c: bool = False
    remote: Any = None
    codec: Compressor = DEFAULT

    @property
    def chunk_nbytes(self) -> int:
        """Size in bytes of one decoded chunk."""
        return math.prod(self.chunk_shape) * self.stored_dtype.itemsize

    @property
    def out_nbytes(self) -> int:
        """Size in bytes of the output."""
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def n_entries(self) -> int:
        """Number of chunks the region touches."""
        return len(self.offsets)

    def bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per entry, ``(n, ndim)`` arrays: output start, output stop, start inside the chunk."""
        ndim = len(self.shape)
        chunk = np.array(self.chunk_shape, dtype=np.int64).reshape(1, ndim)
        lo = np.array([s.start for s in self.region], dtype=np.int64).reshape(1, ndim)
        hi = np.array([s.stop for s in self.region], dtype=np.int64).reshape(1, ndim)
        origin = self.coords * chunk
        start = np.maximum(origin, lo)
        stop = np.minimum(origin + chunk, hi)
        return start - lo, stop - lo, start - origin

    def key(self, i: int) -> str:
        """The name of entry ``i`` in errors: its file, and the inner chunk for shards."""
        path = self.files[int(self.file_index[i])]
        if self.chunks_per_shard is None:
            return path
        inner = [c % n for c, n in zip(self.coords[i].tolist(), self.chunks_per_shard)]
        return f"{path} [inner chunk {','.join(map(str, inner))}]"


#: Host bytes a plan holds per chunk (coordinates, offsets, sizes, flags), for the memory check.
_PLAN_BYTES_PER_CHUNK = 96


def _grid(region: Region, block: tuple[int, ...], source: str) -> np.ndarray:
    """Coordinates of the blocks a region touches, in C order, shape ``(n, ndim)``."""
    counts = [max(0, -(-s.stop // b) - s.start // b) for s, b in zip(region, block)]
    check_host_memory(
        math.prod(counts) * _PLAN_BYTES_PER_CHUNK,
        source,
        f"planning a region of {math.prod(counts)} chunks of shape {block}",
    )
    axes = [np.arange(s.start // b, -(-s.stop // b), dtype=np.int64) for s, b in zip(region, block)]
    if not axes:  # a 0-d array: one chunk
        return np.zeros((1, 0), dtype=np.int64)
    if any(len(a) == 0 for a in axes):
        return np.zeros((0, len(axes)), dtype=np.int64)
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=1)


def plan_read(array: zarr.Array, region: slice | Sequence[slice] | None = None) -> ReadPlan:
    """Plan the batched read of ``array[region]``."""
    layout = parse_layout(array)
    return _plan(array, layout, parse_region(region, array.shape, layout.root))


def plan_region(array: zarr.Array, region: Region, settings: Settings | None = None) -> ReadPlan:
    """:func:`plan_read` of a region that :func:`parse_region` returned already; a remote
    array's requests and retries follow ``settings`` (by default the settings in force).
    """
    return _plan(array, parse_layout(array, settings), region)


def _plan(array: zarr.Array, layout: ArrayLayout, region: Region) -> ReadPlan:
    source = layout.root
    metadata = array.metadata
    fill = metadata.fill_value
    dtype = np.dtype(array.dtype)
    fill_value = np.zeros((), dtype)[()] if fill is None else np.asarray(fill, dtype)[()]
    coords = _grid(region, layout.chunk_shape, source)
    if layout.shard_index_location is None:
        files, file_index, offsets, nbytes, stored = _unsharded(metadata, layout, coords)
    else:
        files, file_index, offsets, nbytes, stored = _sharded(metadata, layout, coords)
    return ReadPlan(
        source=source,
        shape=tuple(s.stop - s.start for s in region),
        dtype=dtype,
        stored_dtype=layout.stored_dtype,
        chunk_shape=layout.chunk_shape,
        order=layout.order,
        fill_value=fill_value,
        region=region,
        files=files,
        file_index=file_index,
        offsets=offsets,
        nbytes=nbytes,
        coords=coords,
        stored=stored,
        chunks_per_shard=None
        if layout.shard_index_location is None
        else tuple(s // c for s, c in zip(layout.grid_shape, layout.chunk_shape)),
        crc32c=layout.chunk_crc32c,
        remote=layout.remote,
        codec=layout.codec,
    )


_Entries = tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _prefix(layout: ArrayLayout) -> str:
    """What precedes a chunk's key in its name: the array's folder, or its URL."""
    sep = "/" if layout.remote is not None else os.sep
    return layout.root.rstrip(sep) + sep


def _unsharded(metadata: Any, layout: ArrayLayout, coords: np.ndarray) -> _Entries:
    """One file per chunk, sized when read."""
    files = tuple(chunk_keys(metadata, coords, _prefix(layout)))
    n = len(files)
    return (
        files,
        np.arange(n, dtype=np.int64),
        np.zeros(n, dtype=np.int64),
        np.full(n, -1, dtype=np.int64),
        np.ones(n, dtype=bool),
    )


def _sharded(metadata: Any, layout: ArrayLayout, coords: np.ndarray) -> _Entries:
    """Inner chunks of shards: each shard index is read once (in this thread: the reads are too
    short to gain from threads) and looked up for all its chunks at once."""
    per_shard = tuple(s // c for s, c in zip(layout.grid_shape, layout.chunk_shape))
    n_inner = math.prod(per_shard)
    n = len(coords)
    shard_of, inner_of = np.divmod(coords, np.array(per_shard, dtype=np.int64))
    if len(per_shard) and n:
        shards, shard_id = np.unique(shard_of, axis=0, return_inverse=True)
        linear = np.ravel_multi_index(tuple(inner_of.T), per_shard)
    else:  # a 0-d array (one shard of one chunk), or nothing to read
        shards, shard_id = shard_of[:1], np.zeros(n, dtype=np.int64)
        linear = np.zeros(n, dtype=np.int64)
    shard_id = shard_id.reshape(-1)
    table = np.full((len(shards), n_inner, 2), EMPTY_INNER_CHUNK, dtype=SHARD_INDEX_ENTRY)
    files = []
    paths = chunk_keys(metadata, shards, _prefix(layout))
    at_start, crc32c = layout.shard_index_location == "start", layout.shard_index_crc32c
    if layout.remote is None:
        indexes: Any = (
            read_shard_index(p, n_inner, at_start=at_start, crc32c=crc32c) for p in paths
        )
    else:  # fetched together: each is a request
        from linumpy.io.engine.fetch_remote import remote_shard_indexes

        indexes = remote_shard_indexes(
            layout.remote, paths, n_inner, at_start=at_start, crc32c=crc32c
        )
    for k, (path, index) in enumerate(zip(paths, indexes)):
        files.append(path)
        if index is not None:
            table[k] = index
    entries = table[shard_id, linear]
    stored = entries[:, 0] != EMPTY_INNER_CHUNK
    offsets = np.where(stored, entries[:, 0], 0).astype(np.int64)
    nbytes = np.where(stored, entries[:, 1], 0).astype(np.int64)
    return tuple(files), shard_id.astype(np.int64), offsets, nbytes, stored


def chunk_view(buffer: Any, plan: ReadPlan) -> Any:
    """View a decoded chunk's bytes (1-D uint8, numpy or cupy) as the chunk's array."""
    return buffer.view(plan.stored_dtype).reshape(plan.chunk_shape, order=plan.order)
