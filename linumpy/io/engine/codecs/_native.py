"""A native library's handle per thread (a decompression context), created on first use in a
thread and freed with the thread's locals: the libraries' decoders are not shared by threads."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__: list[str] = []


class _Handle:
    """One handle, freed when its thread's locals go."""

    __slots__ = ("free", "pointer")

    def __init__(self, create: Callable[[], int], free: Callable[[int], Any], what: str) -> None:
        self.pointer = create()
        if not self.pointer:
            raise MemoryError(f"{what} failed")
        self.free = free  # kept here: the library's module may be gone when the handle is freed

    def __del__(self) -> None:
        if self.pointer:
            self.free(self.pointer)
            self.pointer = None


class PerThread:
    """The handle ``create()`` makes, one per thread; ``free(handle)`` releases it."""

    def __init__(self, create: Callable[[], int], free: Callable[[int], Any], what: str) -> None:
        self._create, self._free, self._what = create, free, what
        self._local = threading.local()

    def get(self) -> int:
        """This thread's handle."""
        handle = getattr(self._local, "handle", None)
        if handle is None:
            handle = self._local.handle = _Handle(self._create, self._free, self._what)
        return handle.pointer
