"""libzstd called through ctypes: one reused decompression context per thread, no GIL held.

numcodecs' ``Zstd.decode`` holds the GIL for about 20 us per call, which bounds a many-threaded
read of small chunks. The library is numcodecs' own (its extension exports libzstd's symbols),
else the system's; when neither loads, :data:`AVAILABLE` is False and callers use numcodecs.
A chunk that fails is handed back (False) for :func:`linumpy.io.engine.codecs.zstd.decode` to
explain.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

from linumpy.io.engine.codecs._native import PerThread

__all__: list[str] = []


def _load() -> Any:
    import numcodecs.zstd

    candidates = [numcodecs.zstd.__file__]
    system = ctypes.util.find_library("zstd")
    if system:
        candidates.append(system)
    for name in candidates:
        try:
            lib = ctypes.CDLL(name)
            lib.ZSTD_createDCtx.restype = ctypes.c_void_p
            lib.ZSTD_createDCtx.argtypes = []
            lib.ZSTD_freeDCtx.restype = ctypes.c_size_t
            lib.ZSTD_freeDCtx.argtypes = [ctypes.c_void_p]
            lib.ZSTD_decompressDCtx.restype = ctypes.c_size_t
            lib.ZSTD_decompressDCtx.argtypes = [
                ctypes.c_void_p,
                ctypes.c_void_p,
                ctypes.c_size_t,
                ctypes.c_void_p,
                ctypes.c_size_t,
            ]
        except (OSError, AttributeError):
            continue
        return lib
    return None


_LIB = _load()
#: Whether libzstd could be loaded; when False, :func:`decode_into` must not be called.
AVAILABLE = _LIB is not None


_CONTEXTS = (
    PerThread(_LIB.ZSTD_createDCtx, _LIB.ZSTD_freeDCtx, "ZSTD_createDCtx") if AVAILABLE else None
)


def decode_into(src: Any, src_size: int, dst: int, dst_size: int) -> bool:
    """Decode zstd data into ``dst_size`` bytes at address ``dst``; False unless exactly that."""
    result = _LIB.ZSTD_decompressDCtx(_CONTEXTS.get(), dst, dst_size, src, src_size)
    # An error is a size_t above (size_t)-120 (ZSTD_isError): never equal to a real chunk size.
    return result == dst_size
