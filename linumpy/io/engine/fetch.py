"""Host side of the GPU reader: chunk sizes, file readers, pinned staging and batched frame checks.

The GPU reader (:mod:`linumpy.gpu.zarr_io`) moves each batch of compressed chunks through one host
buffer: the chunks' bytes are read into it at 16-byte aligned offsets, their zstd frames are
checked on the CPU, and the used part goes to the device in one copy. Two readers fill a buffer:
a thread pool of ``os.preadv`` calls, or kvikio's ``CuFile.pread`` (its C++ thread pool, no GIL).
Both write to host memory, because every frame must be checked on the CPU before nvCOMP sees it.

Nothing here imports cupy, nvCOMP or kvikio before a GPU read asks for them.
"""

from __future__ import annotations

import functools
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from contextlib import contextmanager, suppress
from typing import Any

import numpy as np

from linumpy.errors import ChunkDecodeError
from linumpy.io.plan import ChunkRead
from linumpy.io.zstd_frames import ZSTD_MAGIC

__all__ = [
    "ALIGN",
    "FRAME_CHECKSUM",
    "FRAME_GPU",
    "FRAME_NEEDS_CHECK",
    "align_up",
    "check_frames",
    "chunk_sizes",
    "kvikio_unusable_reason",
    "pinned_buffers",
    "read_into",
    "use_kvikio_threads",
]

#: Alignment of every chunk in staging and scratch buffers (nvCOMP asks for 16 bytes).
ALIGN = 16
#: :func:`check_frames` verdicts.
FRAME_GPU, FRAME_CHECKSUM, FRAME_NEEDS_CHECK = 0, 1, 2

_MAX_BLOCK = 128 * 1024
_FCS_SIZES = np.array([0, 2, 4, 8], dtype=np.int64)
#: Files kept open at once by the kvikio reader (unsharded arrays have one file per chunk).
_KVIKIO_OPEN_FILES = 256


def align_up(n: int, alignment: int = ALIGN) -> int:
    """Round ``n`` up to a multiple of ``alignment``."""
    return -(-n // alignment) * alignment


def _groups(indices: np.ndarray, weights: np.ndarray, parts: int) -> list[np.ndarray]:
    """Split ``indices`` into at most ``parts`` runs of about equal total weight."""
    if len(indices) == 0:
        return []
    parts = max(1, min(parts, len(indices)))
    cumulative = np.cumsum(weights[indices].astype(np.float64) + 1.0)
    cuts = np.searchsorted(cumulative, cumulative[-1] * np.arange(1, parts) / parts)
    return [g for g in np.split(indices, np.unique(cuts)) if len(g)]


def chunk_sizes(reads: Sequence[ChunkRead]) -> np.ndarray:
    """Compressed size of each read, with -1 where an unsharded chunk's file does not exist.

    Sharded reads carry their size in the plan; unsharded ones are sized with ``os.stat``, in
    the calling thread: a stat is shorter than the hand-over of Python's GIL between threads
    (on the H200's host, 1792 files took 3.4 ms in one thread, 12.4 ms in 16).
    """
    sizes = np.fromiter((r.nbytes for r in reads), dtype=np.int64, count=len(reads))
    for i in np.flatnonzero(sizes < 0):
        read = reads[i]
        try:
            sizes[i] = os.stat(read.path).st_size - read.offset
        except FileNotFoundError:
            sizes[i] = -1
    return sizes


def _pread_run(
    indices: np.ndarray,
    reads: Sequence[ChunkRead],
    sizes: np.ndarray,
    offsets: np.ndarray,
    staging: np.ndarray,
) -> None:
    """Read a run of chunks into ``staging``, keeping a file open across consecutive reads of it."""
    view = memoryview(staging)
    path, fd = None, -1
    try:
        for i in indices:
            read = reads[i]
            if read.path != path:
                if fd >= 0:
                    os.close(fd)
                    fd = -1
                try:
                    fd = os.open(read.path, os.O_RDONLY)
                except FileNotFoundError:
                    raise ChunkDecodeError(read.key, "chunk file vanished while reading") from None
                path = read.path
            start, n = int(offsets[i]), int(sizes[i])
            done = 0
            while done < n:
                got = os.preadv(fd, [view[start + done : start + n]], read.offset + done)
                if got == 0:
                    raise ChunkDecodeError(
                        read.key, f"file ends after {done} of {n} bytes at offset {read.offset}"
                    )
                done += got
    finally:
        if fd >= 0:
            os.close(fd)


def _kvikio_read(
    reads: Sequence[ChunkRead], sizes: np.ndarray, offsets: np.ndarray, staging: np.ndarray
) -> None:
    """Read chunks into host ``staging`` with ``kvikio.CuFile.pread``, few files open at once."""
    import kvikio

    windows = np.array_split(np.arange(len(reads)), max(1, -(-len(reads) // _KVIKIO_OPEN_FILES)))
    for window in windows:
        files: dict[str, Any] = {}
        pending = []
        waited = 0
        try:
            for i in window:
                read = reads[i]
                handle = files.get(read.path)
                if handle is None:
                    try:
                        handle = files[read.path] = kvikio.CuFile(read.path, "r")
                    except (FileNotFoundError, RuntimeError) as exc:
                        raise ChunkDecodeError(read.key, f"cannot open chunk file: {exc}") from None
                start, n = int(offsets[i]), int(sizes[i])
                pending.append((read, n, handle.pread(staging[start : start + n], n, read.offset)))
            for read, n, future in pending:
                waited += 1  # a future can be waited for once, even when that raises
                got = future.get()
                if got != n:
                    raise ChunkDecodeError(
                        read.key, f"file ends after {got} of {n} bytes at offset {read.offset}"
                    )
        finally:
            # Reads still in flight write into ``staging``: let them finish before leaving.
            for _, _, future in pending[waited:]:
                with suppress(Exception):
                    future.get()
            for handle in files.values():
                handle.close()


def read_into(
    staging: np.ndarray,
    reads: Sequence[ChunkRead],
    sizes: np.ndarray,
    offsets: np.ndarray,
    *,
    reader: str,
    pool: Executor,
    threads: int,
) -> None:
    """Read the compressed bytes of every chunk in ``reads`` into one host buffer.

    Parameters
    ----------
    staging
        1-D uint8 host buffer (pinned for the GPU reader; any numpy buffer works).
    reads
        The chunks to fetch.
    sizes, offsets
        Per chunk: compressed size and byte offset in ``staging``.
    reader
        ``"pread"`` (a thread pool of ``os.preadv``) or ``"kvikio"`` (``CuFile.pread``).
    pool, threads
        Thread pool and the number of runs the ``pread`` reader splits the work into.

    Raises
    ------
    ChunkDecodeError
        When a file is shorter than its chunk or vanished since it was sized.
    """
    if reader == "kvikio":
        _kvikio_read(reads, sizes, offsets, staging)
        return
    runs = _groups(np.arange(len(reads)), sizes, threads)
    work: Callable[[np.ndarray], None] = functools.partial(
        _pread_run, reads=reads, sizes=sizes, offsets=offsets, staging=staging
    )
    for _ in pool.map(work, runs):
        pass


def _gather(buffer: np.ndarray, positions: np.ndarray, width: int, valid: np.ndarray) -> np.ndarray:
    """Little-endian unsigned integers of ``width`` bytes at ``positions`` (0 where not valid)."""
    value = np.zeros(len(positions), dtype=np.uint64)
    safe = np.where(valid, positions, 0)
    for k in range(width):
        value |= buffer[safe + k].astype(np.uint64) << np.uint64(8 * k)
    return np.where(valid, value, np.uint64(0))


def check_frames(
    buffer: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, expected_size: int
) -> np.ndarray:
    """Walk the zstd frame and block headers of many chunks at once (vectorised over chunks).

    The fast, strict subset of :func:`linumpy.io.zstd_frames.inspect_zstd_chunk`: a chunk passes
    when it is exactly one zstd frame, without dictionary, whose header declares
    ``expected_size`` bytes and whose blocks (valid types, at most 128 KiB) end exactly at the
    chunk's end, checksum included. Every other chunk is left to ``inspect_zstd_chunk``, which
    raises a precise error or accepts it for the CPU decoder.

    Parameters
    ----------
    buffer
        1-D uint8 host buffer holding the chunks.
    offsets, sizes
        Start and length of each chunk in ``buffer``.
    expected_size
        Decompressed size of every chunk.

    Returns
    -------
    numpy.ndarray
        int8 per chunk: :data:`FRAME_GPU` (nvCOMP can decode it), :data:`FRAME_CHECKSUM` (the
        same, with a stored content checksum to verify) or :data:`FRAME_NEEDS_CHECK`.
    """
    start = np.asarray(offsets, dtype=np.int64)
    end = start + np.asarray(sizes, dtype=np.int64)
    ok = end - start >= 6
    magic = _gather(buffer, start, 4, ok)
    ok &= magic == np.uint64(ZSTD_MAGIC)
    descriptor = _gather(buffer, start + 4, 1, ok).astype(np.int64)
    ok &= (descriptor & 0x08) == 0  # reserved bit
    ok &= (descriptor & 0x03) == 0  # no dictionary id field
    single = (descriptor >> 5) & 1
    fcs_flag = descriptor >> 6
    fcs_size = np.where((fcs_flag == 0) & (single == 1), 1, _FCS_SIZES[fcs_flag])
    ok &= fcs_size > 0
    fcs_pos = start + 6 - single
    position = fcs_pos + fcs_size
    ok &= position <= end
    content = np.zeros(len(start), dtype=np.uint64)
    for width in (1, 2, 4, 8):
        has = ok & (fcs_size == width)
        content = np.where(has, _gather(buffer, fcs_pos, width, has), content)
    content += np.where(fcs_size == 2, np.uint64(256), np.uint64(0))
    ok &= content == np.uint64(expected_size)

    active = ok.copy()
    while True:
        idx = np.flatnonzero(active)
        if len(idx) == 0:
            break
        pos, stop = position[idx], end[idx]
        room = pos + 3 <= stop
        header = _gather(buffer, pos, 3, room).astype(np.int64)
        block_type = (header >> 1) & 3
        block_size = header >> 3
        after = pos + 3 + np.where(block_type == 1, 1, block_size)
        bad = ~room | (block_type == 3) | (block_size > _MAX_BLOCK) | (after > stop)
        position[idx] = after
        ok[idx[bad]] = False
        active[idx[bad | ((header & 1) == 1)]] = False

    has_checksum = ((descriptor >> 2) & 1) == 1
    ok &= position + 4 * has_checksum == end
    verdict = np.full(len(start), FRAME_NEEDS_CHECK, dtype=np.int8)
    verdict[ok & ~has_checksum] = FRAME_GPU
    verdict[ok & has_checksum] = FRAME_CHECKSUM
    return verdict


# Pinned host buffers outlive a read so that the next one skips the (slow) page-locking.
_pinned_lock = threading.Lock()
_pinned_idle: list[tuple[int, Any, np.ndarray]] = []
_IDLE_PINNED = 2  # the fast path's two staging buffers


@contextmanager
def pinned_buffers(nbytes: int, count: int = 2) -> Iterator[list[np.ndarray]]:
    """Lend ``count`` page-locked host buffers of at least ``nbytes`` bytes each.

    Buffers come back to a small cache on exit (the largest ``max(count, 2)`` are kept idle), so
    the pinned memory held by the process stays bounded by what one read asks for.
    """
    import cupy

    taken: list[tuple[int, Any, np.ndarray]] = []
    with _pinned_lock:
        for entry in sorted(_pinned_idle, key=lambda e: e[0]):
            if entry[0] >= nbytes and len(taken) < count:
                taken.append(entry)
        for entry in taken:
            _pinned_idle.remove(entry)
    while len(taken) < count:
        memory = cupy.cuda.PinnedMemory(nbytes)
        pointer = cupy.cuda.PinnedMemoryPointer(memory, 0)
        taken.append((nbytes, memory, np.frombuffer(pointer, dtype=np.uint8, count=nbytes)))
    try:
        yield [view for _, _, view in taken]
    finally:
        with _pinned_lock:
            _pinned_idle.extend(taken)
            _pinned_idle.sort(key=lambda e: -e[0])
            del _pinned_idle[max(count, _IDLE_PINNED) :]


@functools.cache
def kvikio_unusable_reason() -> str | None:
    """Say why kvikio cannot read files here, or None after a real ``CuFile.pread`` worked.

    kvikio imports on machines without a GPU driver and only fails when it reads, so a small
    temporary file is read once per process before kvikio is chosen.
    """
    try:
        import kvikio
    except ImportError as exc:
        return f"kvikio is not installed ({exc})"
    payload = bytes(range(256)) * 16
    try:
        with tempfile.NamedTemporaryFile() as probe:
            probe.write(payload)
            probe.flush()
            target = np.zeros(len(payload), dtype=np.uint8)
            with kvikio.CuFile(probe.name, "r") as handle:
                got = handle.pread(target, len(payload), 0).get()
    except Exception as exc:  # kvikio raises RuntimeError and others when CUDA/cuFile is missing
        return f"kvikio cannot read files here ({type(exc).__name__}: {exc})"
    if got != len(payload) or target.tobytes() != payload:
        return "kvikio's probe read returned wrong bytes"
    return None


_kvikio_threads_lock = threading.Lock()


def use_kvikio_threads(threads: int) -> None:
    """Give kvikio's thread pool ``threads`` threads (its default of 1 is several times slower).

    An explicit ``KVIKIO_NTHREADS`` in the environment is the user's choice and is left alone.
    """
    if "KVIKIO_NTHREADS" in os.environ:
        return
    import kvikio.defaults

    with _kvikio_threads_lock:
        if kvikio.defaults.get("num_threads") != threads:
            kvikio.defaults.set("num_threads", threads)
