"""Host and device memory of the GPU path: a cache of pinned buffers, free-memory checks.

Page-locking host memory is slow (a GPU stitch write once spent 1.24 s of 2.67 s in it), so
pinned buffers outlive a read in a small cache; the pinned memory the process holds stays bounded
by what one read asks for. Device memory is checked against the device's free memory before a
read allocates anything, so that a read too large fails with :class:`DeviceMemoryError` instead
of CUDA's own error halfway.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from linumpy.errors import DeviceMemoryError
from linumpy.io.engine.memory import format_size

__all__ = ["check_free", "pinned_buffer", "pinned_buffers"]

_pinned_lock = threading.Lock()
_pinned_idle: list[tuple[int, Any, np.ndarray]] = []
_IDLE_PINNED = 4  # the staging buffers of one read with the default number of streams


@contextmanager
def pinned_buffers(nbytes: int, count: int = 2, keep: int = 0) -> Iterator[list[np.ndarray]]:
    """Lend ``count`` page-locked host buffers of at least ``nbytes`` bytes each.

    Buffers come back to a small cache on exit: the largest ``max(count, keep, 4)`` stay idle
    (``keep``: how many one reader uses at once, e.g. one per stream).

    Examples
    --------
    >>> with pinned_buffers(1 << 20, count=2) as (first, second):  # doctest: +SKIP
    ...     first[:4] = 1
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
        memory = cupy.cuda.PinnedMemory(max(nbytes, 1))
        pointer = cupy.cuda.PinnedMemoryPointer(memory, 0)
        taken.append((nbytes, memory, np.frombuffer(pointer, dtype=np.uint8, count=nbytes)))
    try:
        yield [view for _, _, view in taken]
    finally:
        with _pinned_lock:
            _pinned_idle.extend(taken)
            _pinned_idle.sort(key=lambda e: -e[0])
            del _pinned_idle[max(count, keep, _IDLE_PINNED) :]


_slots_lock = threading.Lock()
_slots: dict[tuple[str, int], tuple[Any, np.ndarray]] = {}


def pinned_buffer(role: str, slot: int, nbytes: int) -> np.ndarray:
    """The page-locked buffer of a reader's ``(role, slot)``, kept for the process's next reads.

    A slot's buffer is grown when a read needs more, never shrunk, and reused by every later read
    (one at a time per slot: the GPU back end waits for a slot before reusing it). The pinned
    memory held is the largest each slot needed, bounded by the ``pinned_bytes`` setting for
    staging.

    Examples
    --------
    >>> staging = pinned_buffer("staging", 0, 1 << 20)  # doctest: +SKIP
    >>> pinned_buffer("staging", 0, 1 << 10) is staging  # doctest: +SKIP
    False
    """
    import cupy

    with _slots_lock:
        entry = _slots.get((role, slot))
        if entry is None or entry[1].nbytes < nbytes:
            _slots.pop((role, slot), None)
            entry = None
    if entry is None:
        memory = cupy.cuda.PinnedMemory(max(nbytes, 1))
        pointer = cupy.cuda.PinnedMemoryPointer(memory, 0)
        entry = (memory, np.frombuffer(pointer, dtype=np.uint8, count=max(nbytes, 1)))
        with _slots_lock:
            _slots[(role, slot)] = entry
    return entry[1][:nbytes]


def check_free(needed: int, source: str, shape: tuple[int, ...], dtype: Any, what: str) -> None:
    """Raise :class:`DeviceMemoryError` when ``needed`` bytes exceed what the device can give.

    CuPy's memory pool counts as free: its cached blocks are reused before CUDA is asked.

    Examples
    --------
    >>> check_free(2**62, "v.zarr", (2**31,), "uint16", "the output")  # doctest: +SKIP
    Traceback (most recent call last):
    ...
    linumpy.errors.DeviceMemoryError: v.zarr: reading a region of shape ...
    """
    import cupy

    free, total = cupy.cuda.runtime.memGetInfo()
    free += cupy.get_default_memory_pool().free_bytes()
    if needed > free:
        device = cupy.cuda.runtime.getDevice()
        raise DeviceMemoryError(
            f"{source}: reading a region of shape {shape} ({np.dtype(dtype)}) needs "
            f"{format_size(needed)} of GPU memory ({what}), but device {device} has "
            f"{format_size(free)} free of {format_size(total)}. Read a part at a time with "
            "region=(slice(start, stop), ...), or linumpy.io.open_volume(..., gpu=True)."
        )
