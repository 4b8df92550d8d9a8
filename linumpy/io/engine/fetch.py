"""The engine's fetch stage: the one layer that reads chunk bytes from local files.

A group's chunks are sorted by file and offset and adjacent byte ranges of one file are merged
into one read (a whole shard is one ``preadv``), by a pool of ``os.preadv`` calls or by kvikio
(:mod:`linumpy.io.engine.fetch_kvikio`), which is imported only when a read asks for it.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np

from linumpy.errors import ChunkDecodeError
from linumpy.io.engine.crc import crc32c as crc32c_of
from linumpy.io.engine.fetch_kvikio import read_runs_kvikio

__all__: list[str] = []

#: Alignment of every run of chunks in staging buffers.
ALIGN = 16
#: Bytes between two byte ranges of one file below which they are read as one range.
MERGE_GAP = 4096
#: Smallest piece a long run is cut into for the ``pread`` reader's threads.
PIECE_BYTES = 4 * 1024 * 1024
EMPTY_INNER_CHUNK = 2**64 - 1
SHARD_INDEX_ENTRY = np.dtype("<u8")


def align_up(n: int, alignment: int = ALIGN) -> int:
    """Round ``n`` up to a multiple of ``alignment``."""
    return -(-n // alignment) * alignment


def open_chunk_file(path: str, key: Callable[[], str]) -> int:
    """Open a chunk or shard file for reading; anything but a regular file (a directory, a FIFO,
    a device) raises :class:`~linumpy.errors.ChunkDecodeError` naming ``key()``, without a
    blocking open or read of it. FileNotFoundError propagates.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else None
        raise ChunkDecodeError(key(), f"{path} is {kind or 'not a regular file'}, not a chunk file")
    os.set_blocking(fd, True)
    return fd


def read_exactly(fd: int, view: memoryview, offset: int, key: Callable[[], str]) -> None:
    """Fill ``view`` from ``fd`` at ``offset``; a file that ends first raises
    :class:`~linumpy.errors.ChunkDecodeError` naming ``key()`` (called only then)."""
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if got == 0:
            raise ChunkDecodeError(
                key(), f"file ends after {done} of {len(view)} bytes at offset {offset}"
            )
        done += got


def read_chunk_file(
    path: str, key: Callable[[], str], buffer: Callable[[int], np.ndarray]
) -> np.ndarray | None:
    """Read a chunk file's bytes into ``buffer(n)``; None when the file does not exist."""
    try:
        fd = open_chunk_file(path, key)
    except FileNotFoundError:
        return None
    try:
        nbytes = os.fstat(fd).st_size
        data = buffer(nbytes)[:nbytes]
        view = memoryview(data)
        got = os.preadv(fd, [view], 0)
        if got < nbytes:  # a short read: go on, or say where the file ends
            read_exactly(fd, view[got:], got, key)
        return data
    finally:
        os.close(fd)


def read_shard_index(
    path: str, n_chunks: int, *, at_start: bool, crc32c: bool
) -> np.ndarray | None:
    """Read and check a shard's index: ``(n_chunks, 2)`` of (offset, nbytes), or None if absent.

    Entries of chunks that are not stored hold ``2**64 - 1``.
    """
    index_nbytes = n_chunks * 16 + (4 if crc32c else 0)
    try:
        fd = open_chunk_file(path, lambda: path)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size < index_nbytes:
            raise ChunkDecodeError(path, f"shard of {size} bytes is shorter than its index")
        raw = bytearray(index_nbytes)
        read_exactly(fd, memoryview(raw), 0 if at_start else size - index_nbytes, lambda: path)
    finally:
        os.close(fd)
    return parse_shard_index(raw, size, n_chunks, crc32c=crc32c, name=path)


def parse_shard_index(
    raw: bytes | bytearray | memoryview, size: int, n_chunks: int, *, crc32c: bool, name: str
) -> np.ndarray:
    """Check a shard index's bytes (read from a shard of ``size`` bytes named ``name``)."""
    if crc32c:
        stored = int.from_bytes(raw[-4:], "little")
        if crc32c_of(raw[:-4]) != stored:
            raise ChunkDecodeError(name, "shard index crc32c checksum mismatch")
    index = np.frombuffer(raw, dtype=SHARD_INDEX_ENTRY, count=n_chunks * 2).reshape(n_chunks, 2)
    present = index[:, 0] != EMPTY_INNER_CHUNK
    if np.any(index[present].sum(axis=1) > size):
        raise ChunkDecodeError(name, "shard index points past the end of the shard")
    return index


def chunk_sizes(plan: Any) -> np.ndarray:
    """Compressed size of each entry of a read plan, -1 where it is not stored.

    Sharded entries carry their size in the plan; unsharded chunk files are sized with
    ``os.stat`` in the calling thread: a stat is shorter than the hand-over of Python's GIL
    between threads, so more threads size them more slowly.
    """
    sizes = np.where(plan.stored, plan.nbytes, -1).astype(np.int64)
    unknown = np.flatnonzero(plan.stored & (plan.nbytes < 0))
    if getattr(plan, "remote", None) is not None:  # sized when fetched; until then a quarter
        sizes[unknown] = max(1, plan.chunk_nbytes // 4)  # of the decoded size guides grouping
        return sizes
    files = plan.files
    paths = [files[f] for f in plan.file_index[unknown].tolist()]
    found = np.array([_file_size(path) for path in paths], dtype=np.int64)
    sizes[unknown] = np.where(found >= 0, found - plan.offsets[unknown], -1)
    return sizes


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return -1


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a group's chunks go in a staging buffer, and the file reads that put them there."""

    offsets: np.ndarray
    runs: tuple[tuple[str, int, int, int, int], ...]
    nbytes: int


def layout_group(
    files: Sequence[str],
    file_index: np.ndarray,
    file_offsets: np.ndarray,
    sizes: np.ndarray,
    merge_gap: int = MERGE_GAP,
) -> Layout:
    """Lay out a group of stored chunks in a staging buffer, merging reads of adjacent ranges."""
    n = len(file_index)
    if n == 0:
        return Layout(np.zeros(0, dtype=np.int64), (), 0)
    file_index = np.asarray(file_index, dtype=np.int64)
    starts = np.asarray(file_offsets, dtype=np.int64)
    ends = starts + np.asarray(sizes, dtype=np.int64)
    order = np.lexsort((starts, file_index))
    f, lo, hi = file_index[order], starts[order], ends[order]
    reach = _reach_per_file(f, hi)  # the furthest byte of its file read up to each chunk
    new_run = np.ones(n, dtype=bool)
    new_run[1:] = (f[1:] != f[:-1]) | (lo[1:] > reach[:-1] + merge_gap)
    run_id = np.cumsum(new_run) - 1
    run_first = np.flatnonzero(new_run)
    run_start = lo[run_first]
    run_end = np.maximum.reduceat(hi, run_first)
    run_len = run_end - run_start
    run_buffer = np.zeros(len(run_first), dtype=np.int64)
    run_buffer[1:] = np.cumsum((run_len[:-1] + ALIGN - 1) // ALIGN * ALIGN)
    offsets = np.empty(n, dtype=np.int64)
    offsets[order] = run_buffer[run_id] + lo - run_start[run_id]
    runs = tuple(
        (files[int(fi)], int(start), int(length), int(at), int(first))
        for fi, start, length, at, first in zip(
            f[run_first].tolist(),
            run_start.tolist(),
            run_len.tolist(),
            run_buffer.tolist(),
            order[run_first].tolist(),
        )
    )
    return Layout(offsets, runs, int(run_buffer[-1] + run_len[-1]))


def _reach_per_file(f: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Running maximum of ``hi`` that restarts where the (sorted) file index ``f`` changes."""
    span = int(hi.max()) + 1
    if int(f.max()) < 2**62 // span:
        # Offsetting each file by more than any byte offset keeps files' maxima apart.
        return np.maximum.accumulate(hi + f * span) - f * span
    reach = hi.copy()
    for i in range(1, len(hi)):
        if f[i] == f[i - 1]:
            reach[i] = max(reach[i], reach[i - 1])
    return reach


def _split_runs(
    runs: Sequence[tuple[str, int, int, int, int]], piece: int
) -> list[tuple[str, int, int, int, int]]:
    """Runs cut into pieces of at most ``piece`` bytes, so that threads share a long run."""
    pieces = []
    for path, start, nbytes, at, first in runs:
        for done in range(0, max(nbytes, 1), piece):
            pieces.append((path, start + done, min(piece, nbytes - done), at + done, first))
    return pieces


def _pread_runs(
    runs: Sequence[tuple[str, int, int, int, int]], buffer: np.ndarray, keys: Any
) -> None:
    view = memoryview(buffer)
    path, fd = None, -1
    try:
        for run_path, start, nbytes, at, first in runs:
            if run_path != path:
                if fd >= 0:
                    os.close(fd)
                    fd = -1
                try:
                    fd = open_chunk_file(run_path, functools.partial(keys, first))
                except FileNotFoundError:
                    raise ChunkDecodeError(
                        keys(first), "chunk file vanished while reading"
                    ) from None
                path = run_path
            read_exactly(fd, view[at : at + nbytes], start, functools.partial(keys, first))
    finally:
        if fd >= 0:
            os.close(fd)


def read_group(
    buffer: np.ndarray,
    layout: Layout,
    keys: Any,
    *,
    reader: str,
    pool: Executor | None,
    threads: int,
) -> None:
    """Fill ``buffer`` with a group's chunks as :func:`layout_group` laid them out."""
    runs = layout.runs
    if reader == "kvikio":
        read_runs_kvikio(runs, buffer, keys)
        return
    if pool is not None and threads > 1:
        runs = _split_runs(runs, max(PIECE_BYTES, layout.nbytes // (4 * threads)))
    if pool is None or threads < 2 or len(runs) < 2:
        _pread_runs(runs, buffer, keys)
        return
    # Runs in contiguous parts of about equal bytes, so that a thread keeps a file open across
    # consecutive runs of it.
    weights = np.cumsum([run[2] + 4096 for run in runs], dtype=np.float64)
    parts = min(threads, len(runs))
    cuts = np.searchsorted(weights, weights[-1] * np.arange(1, parts) / parts, side="right")
    bounds = [0, *sorted(set(cuts.tolist()) - {0, len(runs)}), len(runs)]
    futures = [
        pool.submit(_pread_runs, runs[lo:hi], buffer, keys) for lo, hi in zip(bounds, bounds[1:])
    ]
    wait(futures)  # every part ends before an error leaves: they all write into ``buffer``
    for future in futures:
        future.result()
