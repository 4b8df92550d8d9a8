"""The engine's plan stage: which stored chunks cover a region, and where each one lands.

A read is planned once: which chunk files (or which byte ranges inside shards) cover a region,
and where each decoded chunk lands in the output. Both back ends (:mod:`linumpy.io.engine.cpu`,
:mod:`linumpy.gpu.backend`) run the same plan through the same fetch and validate stages.

Layouts planned here: zarr v3 ``bytes`` + a registered compressor (``zstd``, ``gzip``...),
optionally followed by ``crc32c`` (checked before decoding, see :mod:`linumpy.io.engine.crc`);
zarr v3 sharding with those inner codecs (the shard index is read and its crc32c checked while
planning); zarr v2 with a registered compressor (``zstd``, ``zlib``, ``gzip``) and no filters
(the chains :mod:`linumpy.io.engine.codecs` recognises). Anything else raises
:class:`~linumpy.errors.UnsupportedLayoutError` so that callers fall back to zarr itself.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

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


class ChunkRead(NamedTuple):
    """One chunk to fetch, decode and scatter (a named tuple: plans of large arrays hold many).

    Attributes
    ----------
    key
        The chunk's file path (with the inner chunk's coordinates for sharded arrays), used in
        error messages.
    path
        The file holding the compressed bytes.
    offset
        Byte offset of the compressed bytes in the file.
    nbytes
        Number of compressed bytes, or -1 for the whole file (unsharded chunks, size unknown until
        read).
    out_sel
        Where the chunk's part of the region lands in the output.
    chunk_sel
        Which part of the decoded chunk is kept.

    Examples
    --------
    >>> import os, tempfile, zarr
    >>> path = tempfile.mkdtemp() + "/array.zarr"
    >>> array = zarr.create_array(path, shape=(4, 4), chunks=(2, 2), dtype="uint8")
    >>> read = plan_read(array, (slice(1, 3), slice(0, 2))).reads[0]
    >>> os.path.relpath(read.path, path), read.offset, read.nbytes
    ('c/0/0', 0, -1)
    >>> read.out_sel, read.chunk_sel
    ((slice(0, 1, None), slice(0, 2, None)), (slice(1, 2, None), slice(0, 2, None)))
    """

    key: str
    path: str
    offset: int
    nbytes: int
    out_sel: Region
    chunk_sel: Region


@dataclass(frozen=True)
class ReadPlan:
    """Everything a reader needs to produce ``array[region]``, as arrays over the plan's entries.

    An entry is one chunk (an inner chunk of a shard for sharded arrays) that the region
    touches. Entries are numbered in C order of the chunk grid; per-entry values are numpy
    arrays, so that plans of large arrays cost no Python object per chunk. :meth:`entry` gives
    one entry as a :class:`ChunkRead`.

    Attributes
    ----------
    source
        The array's location, for messages.
    shape
        Shape of the output (the region's shape).
    dtype
        Output dtype, equal to the dtype zarr returns.
    stored_dtype
        Dtype of the decoded bytes, with their stored byte order.
    chunk_shape
        Shape of a decoded chunk (the inner chunk of sharded arrays).
    order
        Memory order of decoded chunks (zarr v2 arrays may be ``"F"``).
    fill_value
        Value of elements whose chunk is not stored.
    region
        The region read, one slice per dimension.
    files
        The files entries are read from.
    file_index
        Per entry: index into ``files``.
    offsets, nbytes
        Per entry: where its compressed bytes start in its file and how many there are (-1: the
        whole file, size unknown until read).
    coords
        Per entry: the chunk's coordinates in the (inner) chunk grid, shape ``(n, ndim)``.
    stored
        Per entry: False when the plan already knows the chunk is not stored (an empty entry of
        a shard index, a missing shard); an unsharded chunk whose file is missing reads as
        ``fill_value`` too.
    chunks_per_shard
        For sharded arrays, the inner chunks along each axis of a shard (keys name the inner
        chunk); None otherwise.
    crc32c
        Whether each stored chunk ends with the crc32c of its compressed bytes (codec ``crc32c``).
    remote
        For an array on a remote store, the :class:`~linumpy.io.remote.RangeClient` that
        fetches its chunks (``files`` are then URLs); None for local files.
    codec
        The compressor (:class:`~linumpy.io.engine.codecs.protocol.Compressor`): frame checks,
        CPU decoding, the nvCOMP algorithm of GPU reads.

    Examples
    --------
    >>> import tempfile, zarr
    >>> path = tempfile.mkdtemp() + "/array.zarr"
    >>> array = zarr.create_array(path, shape=(8, 8), chunks=(4, 4), dtype="uint16")
    >>> plan = plan_read(array, (slice(2, 6), slice(0, 4)))
    >>> plan.shape, plan.chunk_shape, plan.n_entries, plan.out_nbytes, plan.chunk_nbytes
    ((4, 4), (4, 4), 2, 32, 32)
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
        """Per entry, ``(n, ndim)`` arrays: output start, output stop, start inside the chunk.

        Examples
        --------
        >>> import tempfile, zarr
        >>> array = zarr.create_array(tempfile.mkdtemp() + "/a.zarr", shape=(8,), chunks=(4,),
        ...                           dtype="uint8")
        >>> [b.ravel().tolist() for b in plan_read(array, (slice(2, 6),)).bounds()]
        [[0, 2], [2, 4], [2, 0]]
        """
        ndim = len(self.shape)
        chunk = np.array(self.chunk_shape, dtype=np.int64).reshape(1, ndim)
        lo = np.array([s.start for s in self.region], dtype=np.int64).reshape(1, ndim)
        hi = np.array([s.stop for s in self.region], dtype=np.int64).reshape(1, ndim)
        origin = self.coords * chunk
        start = np.maximum(origin, lo)
        stop = np.minimum(origin + chunk, hi)
        return start - lo, stop - lo, start - origin

    def key(self, i: int) -> str:
        """The name of entry ``i`` in errors: its file, and the inner chunk for shards.

        Examples
        --------
        >>> import os, tempfile, zarr
        >>> path = tempfile.mkdtemp() + "/array.zarr"
        >>> array = zarr.create_array(path, shape=(4, 4), chunks=(2, 2), dtype="uint8")
        >>> os.path.relpath(plan_read(array).key(3), path)
        'c/1/1'
        """
        path = self.files[int(self.file_index[i])]
        if self.chunks_per_shard is None:
            return path
        inner = [c % n for c, n in zip(self.coords[i].tolist(), self.chunks_per_shard)]
        return f"{path} [inner chunk {','.join(map(str, inner))}]"

    def entry(self, i: int) -> ChunkRead:
        """Entry ``i`` as a :class:`ChunkRead`.

        Examples
        --------
        >>> import tempfile, zarr
        >>> array = zarr.create_array(tempfile.mkdtemp() + "/a.zarr", shape=(4,), chunks=(2,),
        ...                           dtype="uint8")
        >>> plan_read(array, (slice(1, 3),)).entry(1)[3:]
        (-1, (slice(1, 2, None),), (slice(0, 1, None),))
        """
        out_start, out_stop, chunk_start = (b[i].tolist() for b in self.bounds())
        out_sel = tuple(slice(a, b) for a, b in zip(out_start, out_stop))
        chunk_sel = tuple(slice(c, c + b - a) for a, b, c in zip(out_start, out_stop, chunk_start))
        path = self.files[int(self.file_index[i])]
        offset, nbytes = int(self.offsets[i]), int(self.nbytes[i])
        return ChunkRead(self.key(i), path, offset, nbytes, out_sel, chunk_sel)

    @property
    def reads(self) -> tuple[ChunkRead, ...]:
        """The entries that may be stored, as :class:`ChunkRead` (slow for large plans)."""
        return tuple(self.entry(i) for i in np.flatnonzero(self.stored).tolist())

    @property
    def missing(self) -> tuple[ChunkRead, ...]:
        """The entries known not to be stored, as :class:`ChunkRead`."""
        return tuple(self.entry(i) for i in np.flatnonzero(~self.stored).tolist())


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
    """Plan the batched read of ``array[region]``.

    Parameters
    ----------
    array
        A zarr array on a local store.
    region
        The part to read (see :func:`parse_region`); the whole array by default.

    Returns
    -------
    ReadPlan
        The chunks to read and where each lands.

    Raises
    ------
    UnsupportedLayoutError
        When the store or codec chain is not one of the planned layouts.
    ChunkDecodeError
        When a shard index is corrupt.
    LinumpyError
        When the region is invalid.

    Examples
    --------
    >>> import tempfile, zarr
    >>> path = tempfile.mkdtemp() + "/array.zarr"
    >>> array = zarr.create_array(path, shape=(4, 4), chunks=(2, 2), shards=(4, 4),
    ...                           dtype="uint8", fill_value=7)
    >>> array[:2, :2] = 1
    >>> plan = plan_read(array)
    >>> len(plan.reads), len(plan.missing)
    (1, 3)
    """
    layout = parse_layout(array)
    return _plan(array, layout, parse_region(region, array.shape, layout.root))


def plan_region(array: zarr.Array, region: Region, settings: Settings | None = None) -> ReadPlan:
    """:func:`plan_read` of a region that :func:`parse_region` returned already; a remote
    array's requests and retries follow ``settings`` (by default the settings in force).

    Examples
    --------
    >>> import tempfile, zarr
    >>> array = zarr.create_array(tempfile.mkdtemp() + "/a.zarr", shape=(4,), chunks=(2,),
    ...                           dtype="uint8")
    >>> plan_region(array, parse_region((slice(1, 3),), array.shape)).n_entries
    2
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
    """View a decoded chunk's bytes (1-D uint8, numpy or cupy) as the chunk's array.

    Examples
    --------
    >>> import numpy as np, tempfile, zarr
    >>> from linumpy.io.engine.fetch import read_chunk_file
    >>> path = tempfile.mkdtemp() + "/array.zarr"
    >>> array = zarr.create_array(path, shape=(4, 4), chunks=(2, 2), dtype="uint8")
    >>> array[:] = np.arange(16, dtype=np.uint8).reshape(4, 4)
    >>> plan = plan_read(array)
    >>> read = plan.reads[-1]
    >>> data = read_chunk_file(read.path, read.offset, read.nbytes, lambda: read.key,
    ...                        lambda n: np.empty(n, np.uint8))
    >>> chunk_view(plan.codec.decode(data, key=read.key), plan)
    array([[10, 11],
           [14, 15]], dtype=uint8)
    """
    return buffer.view(plan.stored_dtype).reshape(plan.chunk_shape, order=plan.order)
