"""crc32c checked on the device, before nvCOMP decodes a frame, with no wait for the host.

nvCOMP trusts its input (a flipped bit can make it fault), so on the decode's stream, between the
upload of its tables and the decode (:func:`linumpy.gpu.nvcomp.decode`'s ``before_decode``),
nvCOMP's batched CRC32 computes each frame's crc32c and a kernel compares it with the stored one,
pointing a failed frame at a valid stand-in (:func:`standin_frame`). The flags are read after the
final synchronisation (:meth:`DeviceCrc32c.raise_first`). The binding follows ``nvcomp/crc32.h``
of nvCOMP 6 (struct sizes asserted, options passed by value).
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from linumpy.errors import ChunkDecodeError, GPUUnavailableError
from linumpy.gpu import nvcomp
from linumpy.gpu.kernel_cache import raw_kernel
from linumpy.io.engine.codecs.protocol import FRAME_GPU

if TYPE_CHECKING:
    import cupy

    from linumpy.io.engine.codecs.protocol import Compressor

__all__: list[str] = []


class _CRC32Spec(ctypes.Structure):
    """``nvcompCRC32Spec_t``: 32 bytes."""

    _fields_ = [
        ("poly", ctypes.c_uint32),
        ("init", ctypes.c_uint32),
        ("ref_in", ctypes.c_bool),
        ("ref_out", ctypes.c_bool),
        ("xorout", ctypes.c_uint32),
        ("reserved", ctypes.c_char * 16),
    ]


class _CRC32KernelConf(ctypes.Structure):
    """``nvcompCRC32KernelConf_t``: 32 bytes."""

    _fields_ = [
        ("kernel_kind", ctypes.c_int),
        ("bytes_per_read", ctypes.c_int32),
        ("blocks_per_msg", ctypes.c_int32),
        ("reserved", ctypes.c_char * 20),
    ]


class _CRC32Opts(ctypes.Structure):
    """``nvcompBatchedCRC32Opts_t``: 128 bytes, passed by value."""

    _fields_ = [
        ("spec", _CRC32Spec),
        ("kernel_conf", _CRC32KernelConf),
        ("reserved", ctypes.c_char * 64),
    ]


# The sizes nvcomp/crc32.h asserts: a struct declared otherwise would pass garbage by value.
assert (ctypes.sizeof(_CRC32Spec), ctypes.sizeof(_CRC32KernelConf)) == (32, 32)
assert ctypes.sizeof(_CRC32Opts) == 128

#: ``nvcompCRC32_C`` (CRC-32/ISCSI, as zarr's ``crc32c`` codec): polynomial, init, reflected
#: input and output, xorout.
_CRC32_C = (0x1EDC6F41, 0xFFFFFFFF, True, True, 0xFFFFFFFF)
_ONLY_SEGMENT = 0  # nvcompCRC32OnlySegment: each buffer is a whole message

_P = ctypes.c_void_p
_N = ctypes.c_size_t
_SIGNATURES: dict[str, tuple[Any, ...]] = {
    # input pointers, input sizes, count, crc32 out, options, segment kind, statuses, stream
    "nvcompBatchedCRC32Async": (_P, _P, _N, _P, _CRC32Opts, ctypes.c_int, _P, _P),
    # device input sizes (NULL: the largest is given), count, configuration out, largest, stream
    "nvcompBatchedCRC32GetHeuristicConf": (_P, _N, ctypes.POINTER(_CRC32KernelConf), _N, _P),
}

_THREADS_PER_BLOCK = 128

_GUARD_SOURCE = r"""
extern "C" __global__ void crc32c_guard(const long long sources_at, const long long sizes_at,
                                        const unsigned int* __restrict__ computed,
                                        unsigned int* __restrict__ stored,
                                        unsigned char* __restrict__ failed,
                                        const long long standin, const long long standin_size,
                                        const int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long* sources = (long long*)sources_at;
    long long* sizes = (long long*)sizes_at;
    // The four bytes after the frame: its crc32c, little endian, at any alignment.
    const unsigned char* p = (const unsigned char*)sources[i] + sizes[i];
    const unsigned int value = (unsigned int)p[0] | ((unsigned int)p[1] << 8)
                             | ((unsigned int)p[2] << 16) | ((unsigned int)p[3] << 24);
    stored[i] = value;
    const bool bad = value != computed[i];
    failed[i] = bad ? 1 : 0;
    if (bad) {  // nvCOMP decodes the stand-in instead: the damaged frame never reaches it
        sources[i] = standin;
        sizes[i] = standin_size;
    }
}
"""


@functools.cache
def _crc_library() -> ctypes.CDLL | str:
    """libnvcomp with its batched CRC32 functions typed, or why it has none."""
    library = nvcomp._library()
    for name, argtypes in _SIGNATURES.items():
        function = getattr(library, name, None)
        if function is None:
            return f"libnvcomp {'.'.join(map(str, nvcomp.library_version()))} has no {name}"
        function.argtypes = list(argtypes)
        function.restype = ctypes.c_int
    return library


def crc32c_unavailable_reason() -> str | None:
    """Why nvCOMP cannot compute crc32c here, or None when it can."""
    try:
        library = _crc_library()
    except GPUUnavailableError as exc:
        return str(exc)
    return library if isinstance(library, str) else None


@functools.lru_cache(maxsize=64)
def _options(device: int, count: int, largest: int) -> _CRC32Opts:
    """CRC-32C options with nvCOMP's kernel configuration for ``count`` inputs of at most
    ``largest`` bytes on ``device``: with the largest size given, nvCOMP's heuristic runs on the
    host and waits for no stream."""
    library = _crc_library()
    assert not isinstance(library, str), library
    conf = _CRC32KernelConf()
    status = library.nvcompBatchedCRC32GetHeuristicConf(
        None, count, ctypes.byref(conf), largest, None
    )
    if status != 0:
        raise RuntimeError(f"nvCOMP CRC32 configuration query failed (status {status})")
    poly, init, ref_in, ref_out, xorout = _CRC32_C
    return _CRC32Opts(_CRC32Spec(poly, init, ref_in, ref_out, xorout), conf)


def crc32c_device(
    sources: int, sizes: int, count: int, out: int, *, largest: int, stream: cupy.cuda.Stream
) -> None:
    """Queue nvCOMP's crc32c of ``count`` device buffers on ``stream`` (nothing is waited for).

    ``sources`` and ``sizes`` are device addresses of two int64 columns (each buffer's address and
    size); ``out`` the address of ``count`` uint32; ``largest`` picks nvCOMP's configuration.
    """
    if count == 0:
        return
    library = _crc_library()
    if isinstance(library, str):
        raise GPUUnavailableError(library)
    import cupy

    # Configurations are cached per power of two of the count and of the largest size (a bound
    # above the largest is valid): a few serve every read.
    count_class = 1 << max(0, count - 1).bit_length()
    size_class = 1 << max(0, int(largest) - 1).bit_length()
    options = _options(cupy.cuda.runtime.getDevice(), count_class, size_class)
    status = library.nvcompBatchedCRC32Async(
        sources, sizes, count, out, options, _ONLY_SEGMENT, None, stream.ptr
    )
    if status != 0:
        raise RuntimeError(f"nvCOMP CRC32 launch failed (status {status})")


@functools.lru_cache(maxsize=8)
def standin_frame(compressor: Compressor, nbytes: int) -> np.ndarray:
    """A valid nvCOMP-ready frame of ``compressor`` holding ``nbytes`` zeros (a few hundred
    bytes), decoded in place of a frame whose crc32c failed (the read then raises)."""
    encoded = compressor.encoder(1, False).encode(np.zeros(nbytes, dtype=np.uint8))
    frame = np.frombuffer(encoded, np.uint8)
    one = np.zeros(1, np.int64)
    verdict = compressor.check_frames(frame, one, np.array([frame.nbytes]), nbytes)
    if verdict[0] != FRAME_GPU:  # pragma: no cover - one-shot frames pass their checks
        raise RuntimeError(f"the stand-in frame of {nbytes} bytes is not nvCOMP-ready")
    return frame


def _guard_kernel() -> cupy.RawKernel:
    return raw_kernel(_GUARD_SOURCE, "crc32c_guard")


@dataclass(slots=True)
class _Verdicts:
    """One group's device check: per frame the stored and computed crc32c and a failure flag."""

    entries: np.ndarray  # plan entries, in the decode's order
    computed: Any
    stored: Any
    failed: Any


class DeviceCrc32c:
    """The device crc32c check of one read's groups, before nvCOMP decodes them; ``stream``
    uploads the stand-in frame (waited for once, here)."""

    def __init__(self, compressor: Compressor, chunk_nbytes: int, stream: cupy.cuda.Stream) -> None:
        import cupy

        frame = standin_frame(compressor, chunk_nbytes)
        with stream:
            self._standin = cupy.asarray(frame)
        stream.synchronize()  # every stream may need it: uploaded once, before any group
        self._standin_size = int(frame.nbytes)
        self._groups: list[_Verdicts] = []

    def guard(self, entries: np.ndarray, largest: int, stream: cupy.cuda.Stream) -> Any:
        """The ``before_decode`` of one group's :func:`~linumpy.gpu.nvcomp.decode` call.

        ``entries`` are the frames' plan entries in the decode's order, ``largest`` the largest
        frame (without its crc32c).
        """

        def before_decode(sources: int, sizes: int) -> None:
            import cupy

            n = len(entries)
            with stream:
                computed = cupy.empty(n, dtype=np.uint32)
                stored = cupy.empty(n, dtype=np.uint32)
                failed = cupy.empty(n, dtype=np.uint8)
                crc32c_device(
                    sources, sizes, n, int(computed.data.ptr), largest=largest, stream=stream
                )
                blocks = (n + _THREADS_PER_BLOCK - 1) // _THREADS_PER_BLOCK
                _guard_kernel()(
                    (blocks,),
                    (_THREADS_PER_BLOCK,),
                    (
                        np.int64(sources), np.int64(sizes), computed, stored, failed,
                        np.int64(self._standin.data.ptr), np.int64(self._standin_size),
                        np.int32(n),
                    ),
                )  # fmt: skip
            self._groups.append(_Verdicts(np.asarray(entries), computed, stored, failed))

        return before_decode

    def raise_first(self, key: Any) -> None:
        """After every stream is synchronised: raise ChunkDecodeError for the first chunk whose
        crc32c failed (groups in queue order; ``key(entry)`` names a plan entry)."""
        for group in self._groups:
            bad = np.flatnonzero(group.failed.get())
            if len(bad):
                i = int(bad[0])
                stored, computed = int(group.stored[i].get()), int(group.computed[i].get())
                raise ChunkDecodeError(
                    key(int(group.entries[i])),
                    f"crc32c checksum mismatch: stored 0x{stored:08X}, computed 0x{computed:08X} "
                    "(checked on the GPU; the stored bytes changed and nvCOMP never saw them)",
                )
