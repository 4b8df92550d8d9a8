"""Page-locked (pinned) host buffers of the GPU path, kept between reads and writes.

Page-locking is slow (up to half of a GPU write), so buffers outlive a read in a small cache. A
process's reads stage through :data:`FIRST_PINNED_BYTES` at first, growing to
:data:`MAX_PINNED_BYTES` as they move data (:func:`pinned_allowance`): a command that reads once
pays for every byte it locks.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

__all__: list[str] = []

#: Page-locked staging a process's reads start with: locking more costs a first read more than
#: the larger staging saves it.
FIRST_PINNED_BYTES = 256 * 2**20
#: The most the default staging grows to.
MAX_PINNED_BYTES = 1024 * 2**20
#: Beyond :data:`FIRST_PINNED_BYTES`, one byte of staging per this many bytes the process's
#: reads have staged: the larger staging is locked once the time it saves has paid for it.
PINNED_PAYBACK = 16

_moved_lock = threading.Lock()
_moved = 0  # compressed bytes the process's GPU reads have staged


# Page-locked staging of every read when not 0 (set by tests and by steady_staging).
_FIXED_BYTES = 0


def pinned_allowance() -> int:
    """The page-locked staging a read may use now: :data:`FIRST_PINNED_BYTES` in a new process,
    one more byte per :data:`PINNED_PAYBACK` bytes staged since, up to :data:`MAX_PINNED_BYTES`."""
    if _FIXED_BYTES > 0:
        return _FIXED_BYTES
    return min(MAX_PINNED_BYTES, max(FIRST_PINNED_BYTES, _moved // PINNED_PAYBACK))


@contextmanager
def steady_staging() -> Iterator[None]:
    """Within: reads stage through :data:`MAX_PINNED_BYTES` from the first, as a process that has
    read for a while does (for benchmarks of repeated reads)."""
    global _FIXED_BYTES
    before, _FIXED_BYTES = _FIXED_BYTES, _FIXED_BYTES or MAX_PINNED_BYTES
    try:
        yield
    finally:
        _FIXED_BYTES = before


def count_moved(nbytes: int) -> None:
    """Record that a read staged ``nbytes`` through pinned memory (see :func:`pinned_allowance`)."""
    global _moved
    with _moved_lock:
        _moved += max(0, int(nbytes))


def pinned_empty(nbytes: int) -> np.ndarray:
    """An uninitialised 1-D uint8 array in page-locked host memory (CuPy's pinned pool)."""
    import cupy

    memory = cupy.cuda.alloc_pinned_memory(max(nbytes, 1))
    return np.frombuffer(memory, dtype=np.uint8, count=nbytes)


def _page_locked(nbytes: int) -> tuple[Any, np.ndarray]:
    """New page-locked memory and a uint8 view of its ``nbytes`` (keep both)."""
    import cupy

    memory = cupy.cuda.PinnedMemory(max(nbytes, 1))
    pointer = cupy.cuda.PinnedMemoryPointer(memory, 0)
    return memory, np.frombuffer(pointer, dtype=np.uint8, count=nbytes)


_pinned_lock = threading.Lock()
_pinned_idle: list[tuple[int, Any, np.ndarray]] = []
_IDLE_PINNED = 4  # the staging buffers of one read with the default number of streams


@contextmanager
def pinned_buffers(nbytes: int, count: int = 2) -> Iterator[list[np.ndarray]]:
    """Lend ``count`` page-locked host buffers of at least ``nbytes`` bytes each; on exit the
    largest ``max(count, 4)`` stay idle for the next."""
    taken: list[tuple[int, Any, np.ndarray]] = []
    with _pinned_lock:
        for entry in sorted(_pinned_idle, key=lambda e: e[0]):
            if entry[0] >= nbytes and len(taken) < count:
                taken.append(entry)
        for entry in taken:
            _pinned_idle.remove(entry)
    while len(taken) < count:
        taken.append((nbytes, *_page_locked(nbytes)))
    try:
        yield [view for _, _, view in taken]
    finally:
        with _pinned_lock:
            _pinned_idle.extend(taken)
            _pinned_idle.sort(key=lambda e: -e[0])
            del _pinned_idle[max(count, _IDLE_PINNED) :]


def roomy(nbytes: int, room: int) -> int:
    """Bytes to page-lock for a request of ``nbytes``: the next power of two, but no more than
    ``room`` (the most later requests may ask) and no less than ``nbytes``; a buffer locked at
    an exact size would serve no larger request of a job's next blocks (docs/gpu_guide.md)."""
    return max(nbytes, min(1 << (max(nbytes, 1) - 1).bit_length(), room))


_lease_lock = threading.Lock()
_idle: dict[tuple[str, int], list[tuple[Any, np.ndarray]]] = {}
_IDLE_PER_SLOT = 8  # sets kept for reads that run at once (e.g. dask's threads)
_IDLE_BYTES = 4 * 2**30  # and at most this much idle pinned memory in all


def prestage(role: str, slots: int, nbytes: int, count: int = 1) -> None:
    """Page-lock buffers of ``nbytes`` so that each of the first ``slots`` slots of ``role`` has
    ``count`` idle, for the next leases to take (ahead of a process's first reads)."""
    for slot in range(slots):
        with _lease_lock:
            missing = count - len(_idle.get((role, slot), []))
        for _ in range(missing):
            entry = _page_locked(nbytes)
            with _lease_lock:
                _idle.setdefault((role, slot), []).append(entry)


class PinnedLease:
    """Page-locked buffers lent to one read, by ``(role, slot)``, until :meth:`close` gives them
    back to a per-slot idle list (at most eight per slot and 4 GiB in all) for the next reads."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, int], tuple[Any, np.ndarray]] = {}

    def get(self, role: str, slot: int, nbytes: int, room: int = 0) -> np.ndarray:
        """The first ``nbytes`` of the lease's buffer of ``(role, slot)``; a new buffer gets
        :func:`roomy` bytes (``room``: the most this role's requests can ask, 0: ``nbytes``)."""
        key = (role, slot)
        entry = self._held.get(key)
        if entry is None or entry[1].nbytes < nbytes:
            with _lease_lock:
                idle = _idle.setdefault(key, [])
                fits = [e for e in idle if e[1].nbytes >= nbytes]
                if fits:
                    entry = min(fits, key=lambda e: e[1].nbytes)
                    idle.remove(entry)
                else:
                    entry = None
            if entry is None:
                entry = _page_locked(max(roomy(nbytes, room), 1))
            self._give_back(self._held.pop(key, None), key)
            self._held[key] = entry
        return entry[1][:nbytes]

    def _give_back(self, entry: tuple[Any, np.ndarray] | None, key: tuple[str, int]) -> None:
        if entry is None:
            return
        with _lease_lock:
            idle = _idle.setdefault(key, [])
            idle.append(entry)
            idle.sort(key=lambda e: -e[1].nbytes)
            del idle[_IDLE_PER_SLOT:]
            # Over the cap, drop the smallest buffers first: a large read's set is kept whole.
            sizes = sorted(
                ((e[1].nbytes, k, id(e)) for k, entries in _idle.items() for e in entries)
            )
            total = sum(n for n, _, _ in sizes)
            for n, k, ident in sizes:
                if total <= _IDLE_BYTES:
                    break
                _idle[k] = [e for e in _idle[k] if id(e) != ident]
                total -= n

    def close(self) -> None:
        """Give every buffer back (only once nothing uses them any more)."""
        for key, entry in list(self._held.items()):
            self._give_back(entry, key)
        self._held.clear()
