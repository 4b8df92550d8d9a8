"""Free device memory checked before a GPU read allocates anything, so that a read too large
fails with :class:`~linumpy.errors.DeviceMemoryError` instead of CUDA's own error halfway."""

from __future__ import annotations

from typing import Any

import numpy as np

from linumpy.errors import DeviceMemoryError
from linumpy.io.engine.memory import format_size

__all__: list[str] = []


def check_free(needed: int, source: str, shape: tuple[int, ...], dtype: Any, what: str) -> None:
    """Raise :class:`DeviceMemoryError` when ``needed`` bytes exceed what the device can give
    (cupy's pool's cached blocks count as free)."""
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
