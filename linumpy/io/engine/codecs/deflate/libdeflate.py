"""libdeflate called through ctypes: one reused decompressor per thread, no GIL held (about
twice as fast as zlib's ``inflate``); :data:`AVAILABLE` is False where it is not installed.

Only the fast path lives here: a stream that fails or does not fill its destination exactly is
handed back (False) for the slow path to decode or explain.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

from linumpy.io.engine.codecs._native import PerThread

__all__: list[str] = []

_SUCCESS = 0


def _load() -> Any:
    name = ctypes.util.find_library("deflate")
    if not name:
        return None
    try:
        lib = ctypes.CDLL(name)
        lib.libdeflate_alloc_decompressor.restype = ctypes.c_void_p
        lib.libdeflate_alloc_decompressor.argtypes = []
        lib.libdeflate_free_decompressor.restype = None
        lib.libdeflate_free_decompressor.argtypes = [ctypes.c_void_p]
        for function in (lib.libdeflate_zlib_decompress_ex, lib.libdeflate_gzip_decompress_ex):
            function.restype = ctypes.c_int
            function.argtypes = [
                ctypes.c_void_p,  # decompressor
                ctypes.c_void_p,  # in
                ctypes.c_size_t,  # in_nbytes
                ctypes.c_void_p,  # out
                ctypes.c_size_t,  # out_nbytes_avail
                ctypes.POINTER(ctypes.c_size_t),  # actual_in_nbytes_ret
                ctypes.c_void_p,  # actual_out_nbytes_ret: NULL, the output must be filled
            ]
    except (OSError, AttributeError):
        return None
    return lib


_LIB = _load()
#: Whether libdeflate could be loaded; when False, :func:`decode_into` must not be called.
AVAILABLE = _LIB is not None


_DECOMPRESSORS = (
    PerThread(
        _LIB.libdeflate_alloc_decompressor,
        _LIB.libdeflate_free_decompressor,
        "libdeflate_alloc_decompressor",
    )
    if AVAILABLE
    else None
)


def decode_into(wrapper: str, src: Any, src_size: int, dst: int, dst_size: int) -> bool:
    """Decode one ``"zlib"`` or ``"gzip"`` stream into exactly ``dst_size`` bytes at ``dst``."""
    function = _LIB.libdeflate_zlib_decompress_ex
    if wrapper != "zlib":
        function = _LIB.libdeflate_gzip_decompress_ex
    consumed = ctypes.c_size_t()
    status = function(
        _DECOMPRESSORS.get(), src, src_size, dst, dst_size, ctypes.byref(consumed), None
    )
    return status == _SUCCESS and consumed.value == src_size
