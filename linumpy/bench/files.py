"""The stored files of a zarr array and their zstd frames, read by plain thread pools: the
ceilings' reference reads, independent of linumpy's read engine."""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import zarr
from zarr.storage import LocalStore

from linumpy.errors import LinumpyError
from linumpy.io.formats import for_zarr_format

#: Alignment of each file and frame in the buffers (nvCOMP wants 16 bytes; a page suits copies).
ALIGN = 4096
#: Shard index entry of an inner chunk that is not stored.
_MISSING = 2**64 - 1


def array_directory(array: zarr.Array) -> Path:
    """The directory of ``array`` on the local file system (LinumpyError elsewhere)."""
    store = array.store_path.store
    if not isinstance(store, LocalStore):
        raise LinumpyError(f"{array.store_path}: not an array on the local file system")
    return Path(store.root) / array.store_path.path


def _zstd_only(array: zarr.Array) -> tuple[bool, str | None, int, int]:
    """(sharded, shard index location, shard index trailer bytes, chunk trailer bytes: 4 when
    the chain ends with crc32c); raise unless zstd-only."""
    meta = array.metadata
    if not for_zarr_format(meta.zarr_format).codec_pipeline:
        compressor = meta.compressor
        if compressor is None or compressor.codec_id != "zstd" or meta.filters:
            raise LinumpyError(f"{array_directory(array)}: the ceilings need zstd chunks")
        return False, None, 0, 0
    codecs = list(meta.codecs)
    sharding = next((c for c in codecs if type(c).__name__ == "ShardingCodec"), None)
    if sharding is not None:
        codecs = list(sharding.codecs)
    names = [type(c).__name__ for c in codecs]
    chunk_trailer = 4 if names[-1:] == ["Crc32cCodec"] else 0
    if chunk_trailer:
        names = names[:-1]
    if "ZstdCodec" not in names or set(names) - {"BytesCodec", "ZstdCodec", "TransposeCodec"}:
        raise LinumpyError(f"{array_directory(array)}: the ceilings need zstd chunks ({names})")
    if sharding is None:
        return False, None, 0, chunk_trailer
    index_names = [type(c).__name__ for c in sharding.index_codecs]
    if set(index_names) - {"BytesCodec", "Crc32cCodec"}:
        raise LinumpyError(f"{array_directory(array)}: shard index codecs {index_names}")
    return (
        True,
        str(getattr(sharding.index_location, "value", sharding.index_location)),
        4 * index_names.count("Crc32cCodec"),
        chunk_trailer,
    )


@dataclass(frozen=True)
class StoredFiles:
    """Where an array's stored files go in one buffer (each file's size and aligned offset, the
    buffer's size), and where its zstd frames are in it (offset and size of each, and the
    decoded size of one: a full chunk)."""

    paths: list[str]
    sizes: np.ndarray
    offsets: np.ndarray
    nbytes: int
    frame_offsets: np.ndarray
    frame_sizes: np.ndarray
    frame_nbytes: int
    shard_index: tuple[str, int, int] | None  # (location, inner chunks per shard, trailer bytes)
    chunk_trailer: int = 0  # bytes after each frame (4: the crc32c codec)

    @property
    def stored_bytes(self) -> int:
        """Bytes in the stored files."""
        return int(self.sizes.sum())

    def with_frames(self, buffer: np.ndarray) -> StoredFiles:
        """The same files with the frames of the shards read into ``buffer`` located."""
        if self.shard_index is None:
            return self
        location, n, trailer = self.shard_index
        index_bytes = 16 * n + trailer
        offsets, sizes = [], []
        for start, size in zip(self.offsets, self.sizes, strict=True):
            at = int(start) + (0 if location == "start" else int(size) - index_bytes)
            index = buffer[at : at + 16 * n].view("<u8").reshape(n, 2)
            stored = index[:, 0] != _MISSING
            offsets.append(int(start) + index[stored, 0].astype(np.int64))
            sizes.append(index[stored, 1].astype(np.int64) - self.chunk_trailer)
        return replace(
            self,
            frame_offsets=np.concatenate(offsets) if offsets else np.zeros(0, np.int64),
            frame_sizes=np.concatenate(sizes) if sizes else np.zeros(0, np.int64),
            shard_index=None,
        )


def stored_files(array: zarr.Array) -> StoredFiles:
    """The stored chunk or shard files of a local zstd zarr array (v2, v3, sharded v3), else
    LinumpyError. A sharded array's frames are located once its files are read
    (:meth:`StoredFiles.with_frames`)."""
    directory = array_directory(array)
    sharded, location, trailer, chunk_trailer = _zstd_only(array)
    storage = array.shards if sharded else array.chunks
    grid = [range(math.ceil(n / c)) for n, c in zip(array.shape, storage, strict=True)]
    paths, sizes = [], []
    for coords in itertools.product(*grid):
        path = os.path.join(directory, array.metadata.encode_chunk_key(coords))
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            continue
        paths.append(path)
        sizes.append(size)
    size_array = np.array(sizes, dtype=np.int64)
    aligned = -(-size_array // ALIGN) * ALIGN
    offsets = np.concatenate([[0], np.cumsum(aligned)]).astype(np.int64)
    frame_nbytes = math.prod(array.chunks) * array.dtype.itemsize
    n_inner = math.prod(s // c for s, c in zip(storage, array.chunks, strict=True))
    return StoredFiles(
        paths,
        size_array,
        offsets[:-1],
        max(int(offsets[-1]), 1),
        offsets[:-1] if not sharded else np.zeros(0, np.int64),
        size_array - chunk_trailer if not sharded else np.zeros(0, np.int64),
        frame_nbytes,
        (location, n_inner, trailer) if sharded else None,
        chunk_trailer,
    )


def in_threads(task: Callable[[np.ndarray], None], n: int, threads: int) -> None:
    """Call ``task`` on ``threads`` contiguous runs of ``range(n)`` at once; re-raise errors."""
    runs = [run for run in np.array_split(np.arange(n), max(1, min(threads, n))) if run.size]
    with ThreadPoolExecutor(max(1, len(runs))) as pool:
        for future in [pool.submit(task, run) for run in runs]:
            future.result()


def read_files(files: StoredFiles, buffer: np.ndarray, *, threads: int) -> None:
    """Read every stored file whole into ``buffer`` with ``os.preadv``, ``threads`` at a time."""
    view = memoryview(buffer)

    def task(run: np.ndarray) -> None:
        for i in run:
            start, n = int(files.offsets[i]), int(files.sizes[i])
            fd = os.open(files.paths[i], os.O_RDONLY)
            try:
                done = 0
                while done < n:
                    got = os.preadv(fd, [view[start + done : start + n]], done)
                    if got == 0:
                        raise OSError(f"{files.paths[i]}: ends after {done} of {n} bytes")
                    done += got
            finally:
                os.close(fd)

    in_threads(task, len(files.paths), threads)
