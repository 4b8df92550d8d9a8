"""Host memory checks: a read that cannot fit fails before it allocates, saying how much it
asked (hostile or mistaken metadata must not make a reader try to allocate it).
"""

from __future__ import annotations

import os

from linumpy.errors import HostMemoryError

__all__: list[str] = []


def available_memory() -> int:
    """Host memory available to new allocations, in bytes (``MemAvailable`` on Linux)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_host_memory(
    nbytes: int,
    source: str,
    what: str,
    hint: str = "read a region at a time (region=...) or lazily with linumpy.io.open_volume",
) -> None:
    """Raise :class:`~linumpy.errors.HostMemoryError` before allocating more than is available."""
    available = available_memory()
    if nbytes > available:
        raise HostMemoryError(
            f"{source}: {what} needs {format_size(nbytes)} of host memory, but "
            f"{format_size(available)} is available; {hint}"
        )


def format_size(nbytes: float) -> str:
    """A byte count for people."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if nbytes < 1024 or unit == "TiB":
            return f"{nbytes:.0f} {unit}" if unit == "bytes" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    raise AssertionError("unreachable")
