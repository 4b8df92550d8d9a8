"""The files of a write, for both encoders: the write's report, chunks equal to the fill value,
and a file assembled as zarr lays it out and written whole by a pool of threads.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from linumpy.io.durable import start_writeback
from linumpy.io.engine.crc import crc32c
from linumpy.io.engine.write_plan import WritePlan

__all__: list[str] = []

_EMPTY = np.uint64(2**64 - 1)
_IOV_MAX = 1024
_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@dataclass
class WriteReport:
    """What one :func:`write_array` call did."""

    backend: str
    files_written: int = 0
    chunks_written: int = 0
    chunks_empty: int = 0
    stored_bytes: int = 0
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)

    def add(self, written: bool, chunks: int, empty: int, nbytes: int) -> None:
        """Count one file's outcome."""
        self.files_written += written
        self.chunks_written += chunks
        self.chunks_empty += empty
        self.stored_bytes += nbytes


def empty_rows(xp: Any, rows: Any, fill_value: Any) -> Any:
    """Per row of a ``(n, size)`` array of chunks: whether every element is the fill value.

    The test zarr makes before leaving a chunk out: NaN equals a NaN fill value, and a zero
    float fill value is compared bit for bit (a chunk of ``-0.0`` is stored).
    """
    fill = np.asarray(fill_value, dtype=rows.dtype)
    if rows.dtype.kind in "fc":
        if bool(np.isnan(fill)):
            return xp.isnan(rows).all(axis=1)
        bits = _BITS.get(rows.dtype.itemsize, np.uint64)
        words = rows.view(bits).reshape(rows.shape[0], -1)
        fill_words = np.frombuffer(fill.tobytes(), dtype=bits)
        if len(fill_words) == 1:
            return (words == fill_words[0]).all(axis=1)
        pairs = words.reshape(rows.shape[0], -1, len(fill_words))
        return (pairs == xp.asarray(fill_words)).all(axis=(1, 2))
    return (rows == fill[()]).all(axis=1)


def _crc(frame: Any) -> bytes:
    return crc32c(frame).to_bytes(4, "little")


def assemble_file(plan: WritePlan, frames: Sequence[Any]) -> list[Any] | None:
    """The parts of one file, in order, or None when no chunk of it is stored."""
    layout = plan.layout
    if not layout.sharded:
        frame = frames[0]
        if frame is None:
            return None
        return [frame, _crc(frame)] if layout.crc32c else [frame]
    index = np.full((len(frames), 2), _EMPTY, dtype="<u8")
    index_nbytes = index.nbytes + 4
    position = index_nbytes if layout.index_at_start else 0
    parts: list[Any] = []
    extra = 4 if layout.crc32c else 0
    for j in layout.inner_order.tolist():
        frame = frames[j]
        if frame is None:
            continue
        size = len(frame) + extra
        index[j] = (position, size)
        position += size
        parts.append(frame)
        if extra:
            parts.append(_crc(frame))
    if not parts:
        return None
    raw = index.view(np.uint8).reshape(-1)
    index_bytes = raw.tobytes() + _crc(raw)
    return [index_bytes, *parts] if layout.index_at_start else [*parts, index_bytes]


def write_file(path: str, parts: list[Any] | None, *, writeback: bool = False) -> int:
    """Write ``parts`` as the whole file ``path`` (one open, one ``writev``); remove it for None.
    With ``writeback`` (durable writes), the disk starts writing it at once: the flush before
    the swap then waits for less.

    Returns the bytes written.
    """
    if parts is None:
        with suppress(FileNotFoundError):
            os.unlink(path)
        return 0
    views = [memoryview(p).cast("B") for p in parts]
    views = [v for v in views if len(v)]
    total = sum(len(v) for v in views)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        while views:
            done = os.writev(fd, views[:_IOV_MAX])
            while views and done >= len(views[0]):
                done -= len(views[0])
                views.pop(0)
            if done:
                views[0] = views[0][done:]
        if writeback:
            start_writeback(fd)
    finally:
        os.close(fd)
    return total


def make_directories(plan: WritePlan) -> None:
    """Create the directories the plan's files go in (once, before the threads write)."""
    for directory in sorted({os.path.dirname(plan.path(i)) for i in range(plan.n_blocks)}):
        os.makedirs(directory, exist_ok=True)


class FilePool:
    """Threads writing files, with at most ``window`` files' frames in flight."""

    def __init__(self, threads: int, window: int | None = None) -> None:
        self._pool = ThreadPoolExecutor(max(1, threads))
        self._window = window or 4 * max(1, threads)
        self._pending: deque[Future[Any]] = deque()
        self.results: list[Any] = []

    def submit(self, function: Any, *args: Any) -> Future[Any]:
        """Queue ``function(*args)``, first waiting for the oldest task when the window is full."""
        while len(self._pending) >= self._window:
            self.results.append(self._pending.popleft().result())
        future = self._pool.submit(function, *args)
        self._pending.append(future)
        return future

    def drain(self) -> None:
        """Wait for every queued task (raising the first error)."""
        while self._pending:
            self.results.append(self._pending.popleft().result())

    def __enter__(self) -> FilePool:
        return self

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        try:
            if exc_type is None:
                self.drain()
        finally:
            for future in self._pending:
                future.cancel()
            self._pool.shutdown(wait=True)
