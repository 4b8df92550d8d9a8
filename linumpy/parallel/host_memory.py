"""Host memory of a process that runs dask blocks one after another in several threads."""

from __future__ import annotations

__all__: list[str] = []

#: Allocations from this size up are mapped and unmapped one by one under a memory limit.
MMAP_THRESHOLD = 256 * 2**10


def release_freed_memory() -> bool:
    """Make glibc return large freed blocks to the system at once (Linux, glibc only); True
    when the setting took effect.

    glibc raises its mmap threshold as large blocks are freed, then keeps later ones in its
    per-thread arenas: a process freeing block after block in several threads holds far more
    than it uses. A fixed threshold (``mallopt(M_MMAP_THRESHOLD)``) keeps the resident size near
    the working set, as ``dask.distributed``'s nanny does for its workers.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    m_mmap_threshold = -3
    return bool(mallopt(m_mmap_threshold, MMAP_THRESHOLD))
