"""Chunk files sized as they are read: the fetch stage for arrays of one file per chunk.

A sharded array's plan knows every chunk's size from the shard indexes; an unsharded one knows
only the file names. Sizing every file with ``os.stat`` before the first read cost the GPU reader
6.9 ms of a 1 GiB read of 2048 files of 64^3 chunks on an H200 host (one thread: a stat is
shorter than the hand-over of Python's GIL between threads). Here each file is sized through the
descriptor the read opens anyway (``fstat``; for kvikio, of ``CuFile.fileno()``) and packed
into the group's staging buffer as it is read; the groups were cut from an estimate
(:func:`estimate_sizes`), and no file may be larger than :func:`frame_capacity`.

A file larger than any zstd frame of its chunk can be (several frames, skippable frames), or one
that finds the group's buffer full (chunks that compress worse than the estimate), is read whole
into a buffer of its own and decoded by libzstd; a file that does not exist is a chunk never
written (the fill value).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from concurrent.futures import wait
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from linumpy.errors import ChunkDecodeError
from linumpy.io.engine.fetch import ALIGN, Layout, align_up, read_chunk_file, read_exactly

__all__ = ["UnsizedRead", "estimate_sizes", "frame_capacity", "read_unsized", "unsized_layout"]

#: Files sized by ``os.stat`` to estimate the others' sizes (for the groups' budgets only).
SAMPLE_FILES = 16


def frame_capacity(chunk_nbytes: int, crc32c: bool = False) -> int:
    """Bytes reserved per chunk file: zstd's compress bound of the chunk (a whole frame, header
    and checksum included), a margin, and the crc32c.

    Examples
    --------
    >>> frame_capacity(512 * 1024)
    526400
    """
    small = (128 * 1024 - chunk_nbytes) >> 11 if chunk_nbytes < 128 * 1024 else 0
    return align_up(chunk_nbytes + (chunk_nbytes >> 8) + small + 64 + (4 if crc32c else 0))


def estimate_sizes(plan: Any, sample: int = SAMPLE_FILES) -> np.ndarray:
    """Every chunk's compressed size guessed from a few files' (their mean), for grouping.

    Examples
    --------
    >>> import tempfile, zarr
    >>> from linumpy.io.engine.plan import plan_read
    >>> array = zarr.create_array(tempfile.mkdtemp() + "/a.zarr", shape=(4,), chunks=(2,),
    ...                           dtype="uint8")
    >>> array[:] = 1
    >>> sizes = estimate_sizes(plan_read(array))
    >>> len(sizes), bool(sizes[0] == sizes[1] > 0)
    (2, True)
    """
    n = plan.n_entries
    found = []
    for i in np.unique(np.linspace(0, n - 1, min(n, sample)).astype(np.int64)).tolist():
        with_suppressed = _size_or_none(plan.files[plan.file_index[i]])
        if with_suppressed is not None:
            found.append(with_suppressed)
    guess = int(np.mean(found)) if found else plan.chunk_nbytes // 2
    return np.full(n, max(guess, 1), dtype=np.int64)


def _size_or_none(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except (FileNotFoundError, NotADirectoryError):
        return None


def unsized_layout(files: Sequence[str], file_index: np.ndarray, nbytes: int) -> Layout:
    """The layout of a group of chunk files not sized yet: one run per file (-1 for its size),
    the buffer's ``nbytes`` shared evenly between them (a reader packs them anyway).

    Examples
    --------
    >>> layout = unsized_layout(["a", "b"], np.array([1, 0]), 64)
    >>> layout.offsets.tolist(), [run[0] for run in layout.runs], layout.sized
    ([0, 32], ['b', 'a'], False)
    """
    n = len(file_index)
    offsets = np.arange(n, dtype=np.int64) * nbytes // max(n, 1) // ALIGN * ALIGN
    runs = tuple(
        (files[f], 0, -1, at, i)
        for i, (f, at) in enumerate(zip(file_index.tolist(), offsets.tolist()))
    )
    return Layout(offsets, runs, nbytes, sized=False)


@dataclass(slots=True)
class UnsizedRead:
    """What reading a group of unsized chunk files found.

    Attributes
    ----------
    sizes
        Per chunk: its file's size, -1 when the file does not exist.
    offsets
        Per chunk: where it was packed in the buffer (0 when not there).
    spans
        ``(start, nbytes)`` ranges of the buffer holding the packed chunks.
    outside
        Chunks larger than their capacity: their whole files, read apart from the buffer.

    Examples
    --------
    >>> UnsizedRead(np.array([3, -1]), np.array([0, 0])).spans
    []
    """

    sizes: np.ndarray
    offsets: np.ndarray
    spans: list[tuple[int, int]] = field(default_factory=list)
    outside: dict[int, np.ndarray] = field(default_factory=dict)


def _pread_part(
    runs: Sequence[tuple[str, int, int, int, int]],
    buffer: np.ndarray,
    limit: int,
    capacity: int,
    keys: Any,
    found: UnsizedRead,
) -> tuple[int, int]:
    """Read a part's files one after the other, packed from its first file's offset up to
    ``limit``; return the span they fill."""
    start = pos = end = runs[0][3] if runs else 0
    view = memoryview(buffer)
    for path, _, _, _, i in runs:
        key = functools.partial(keys, i)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue  # sizes[i] stays -1: never written
        except IsADirectoryError:
            raise ChunkDecodeError(key(), f"{path} is a directory, not a chunk file") from None
        try:
            size = os.fstat(fd).st_size
            if size > capacity or pos + size > limit:
                found.outside[i] = data = np.empty(size, dtype=np.uint8)
                read_exactly(fd, memoryview(data), 0, key)
            else:
                read_exactly(fd, view[pos : pos + size], 0, key)
                found.offsets[i] = pos
                end = pos + size
                pos = align_up(end)
            found.sizes[i] = size
        except IsADirectoryError:
            raise ChunkDecodeError(key(), f"{path} is a directory, not a chunk file") from None
        finally:
            os.close(fd)
    return start, end - start


def _kvikio_files(
    runs: Sequence[tuple[str, int, int, int, int]],
    buffer: np.ndarray,
    limit: int,
    capacity: int,
    keys: Any,
    found: UnsizedRead,
) -> None:
    """Open each file with kvikio in turn, size it, and queue its read packed after the last."""
    import kvikio

    pos = end = waited = 0
    pending = []
    handles = []
    try:
        for path, _, _, _, i in runs:
            try:
                handle = kvikio.CuFile(path, "r")
            except (FileNotFoundError, RuntimeError, OSError) as exc:
                if not os.path.exists(path):
                    continue  # never written
                raise ChunkDecodeError(keys(i), f"cannot open: {exc}") from None
            handles.append(handle)
            size = os.fstat(handle.fileno()).st_size
            found.sizes[i] = size
            if size > capacity or pos + size > limit:
                data = read_chunk_file(path, 0, -1, functools.partial(keys, i), _new_buffer)
                if data is None:
                    raise ChunkDecodeError(keys(i), "chunk file vanished while reading")
                found.outside[i] = data
                continue
            found.offsets[i] = pos
            pending.append((i, size, handle.pread(buffer[pos : pos + size], size, 0)))
            end = pos + size
            pos = align_up(end)
        for i, size, future in pending:
            waited += 1
            got = future.get()
            if got != size:
                raise ChunkDecodeError(keys(i), f"file ends after {got} of {size} bytes")
    finally:
        for _, _, future in pending[waited:]:
            with suppress(Exception):  # the first error is already on its way
                future.get()  # reads in flight write into ``buffer``: let them end first
        for handle in handles:
            handle.close()
    found.spans.append((0, end))


def _new_buffer(n: int) -> np.ndarray:
    return np.empty(n, dtype=np.uint8)


def read_unsized(
    buffer: np.ndarray,
    layout: Layout,
    capacity: int,
    keys: Any,
    *,
    reader: str,
    pool: Any,
    threads: int,
) -> UnsizedRead:
    """Read a group laid out by :func:`unsized_layout`, sizing each file as it is opened.

    Parameters
    ----------
    buffer
        Host buffer of at least ``layout.nbytes`` bytes.
    layout
        From :func:`unsized_layout`.
    capacity
        The largest file a chunk's frame can be (:func:`frame_capacity`).
    keys
        ``keys(i)``: the name of chunk ``i`` of the group, for errors.
    reader, pool, threads
        As for :func:`linumpy.io.engine.fetch.read_group`: ``"pread"`` threads each read a
        contiguous part of the files, packed from the part's first file's offset up to the
        next part's; kvikio's files are opened in this thread and read by its pool, packed one
        after the other.

    Raises
    ------
    ChunkDecodeError
        When a file is a directory, cannot be opened, or ends while it is read.

    Examples
    --------
    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> for name, payload in (("a", b"xyz"), ("b", b"0123456789")):
    ...     _ = open(f"{root}/{name}", "wb").write(payload)
    >>> layout = unsized_layout([f"{root}/a", f"{root}/missing", f"{root}/b"],
    ...                         np.array([0, 1, 2]), 96)
    >>> buffer = np.zeros(layout.nbytes, np.uint8)
    >>> found = read_unsized(buffer, layout, 32, str, reader="pread", pool=None, threads=1)
    >>> found.sizes.tolist(), found.offsets.tolist(), found.spans
    ([3, -1, 10], [0, 0, 16], [(0, 26)])
    >>> buffer[16:26].tobytes()
    b'0123456789'
    """
    n = len(layout.runs)
    found = UnsizedRead(np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64))
    if reader == "kvikio":
        _kvikio_files(layout.runs, buffer, layout.nbytes, capacity, keys, found)
        return found
    parts = min(n, max(1, threads)) if pool is not None else 1
    bounds = np.linspace(0, n, parts + 1).astype(np.int64).tolist()
    runs = layout.runs
    pieces = [
        (runs[a:b], runs[b][3] if b < n else layout.nbytes)
        for a, b in zip(bounds, bounds[1:])
        if b > a
    ]
    if len(pieces) == 1:
        piece, limit = pieces[0]
        spans = [_pread_part(piece, buffer, limit, capacity, keys, found)]
    else:
        futures = [
            pool.submit(_pread_part, piece, buffer, limit, capacity, keys, found)
            for piece, limit in pieces
        ]
        wait(futures)  # all parts end before an error leaves: they write into ``buffer``
        spans = [future.result() for future in futures]
    found.spans = [span for span in spans if span[1] > 0]
    return found
