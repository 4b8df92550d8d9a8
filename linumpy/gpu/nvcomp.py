"""The nvCOMP layer: batched decode and encode through nvCOMP's C API, on a CuPy stream.

Compressors name their nvCOMP algorithm (``NVCOMP``, a key of :data:`ALGORITHMS`). ``libnvcomp``'s
batched asynchronous C functions are called through ``ctypes`` rather than ``nvidia.nvcomp.Codec``,
whose calls allocate their work space and wait for the device: here a call only queues its work,
and per-chunk statuses are checked when the caller waits. nvCOMP checks little, so callers hand it
only frames that passed their checks; its statuses and sizes are still checked.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from linumpy.errors import ChunkDecodeError, GPUUnavailableError
from linumpy.gpu.pinned_buffers import pinned_empty

if TYPE_CHECKING:
    import cupy

__all__: list[str] = []

#: Largest chunk nvCOMP's zstd decoder takes (``nvcompZstdDecompressionMaxAllowedChunkSize``).
MAX_DECODE_BYTES = (1 << 31) - 1
#: Largest chunk encoded on the GPU: nvCOMP's zstd encoder documents 16 MB chunks.
MAX_ENCODE_BYTES = 1 << 24

_SUCCESS = 0
_STATUS_NAMES = {
    10: "invalid value",
    11: "not supported",
    12: "cannot decompress",
    13: "bad checksum",
    15: "output buffer too small",
    17: "alignment",
    18: "chunk size too large",
    19: "cannot compress",
    20: "wrong input length",
    1000: "CUDA error",
}


class _DecompressOpts(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_int), ("reserved", ctypes.c_char * 60)]


class _CompressOpts(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


class _Alignments(ctypes.Structure):
    _fields_ = [("input", ctypes.c_size_t), ("output", ctypes.c_size_t), ("temp", ctypes.c_size_t)]


#: The algorithms a compressor's ``NVCOMP`` may name, and their name in nvCOMP's C functions.
ALGORITHMS = {"zstd": "Zstd", "deflate": "Deflate"}

_P = ctypes.c_void_p
_N = ctypes.c_size_t
_SIGNATURES: dict[str, tuple[Any, ...]] = {
    "nvcompBatchedZstdCompressGetRequiredAlignments": (_CompressOpts, ctypes.POINTER(_Alignments)),
    "nvcompBatchedZstdCompressGetTempSize": (_N, _N, _CompressOpts, ctypes.POINTER(_N), _N, _P),
    "nvcompBatchedZstdCompressGetMaxOutputChunkSize": (_N, _CompressOpts, ctypes.POINTER(_N)),
    "nvcompBatchedZstdCompressAsync": (_P, _P, _N, _N, _P, _N, _P, _P, _CompressOpts, _P, _P),
}
for _name in ALGORITHMS.values():  # every algorithm's decoder has the same signatures
    _SIGNATURES |= {
        f"nvcompBatched{_name}DecompressGetRequiredAlignments": (
            _DecompressOpts,
            ctypes.POINTER(_Alignments),
        ),
        f"nvcompBatched{_name}DecompressGetTempSize": (
            _N,
            _N,
            _DecompressOpts,
            ctypes.POINTER(_N),
            _N,
            _P,
        ),
        f"nvcompBatched{_name}DecompressAsync": (_P, _P, _P, _P, _N, _P, _N, _P)
        + (_DecompressOpts, _P, _P),
    }


#: The nvCOMP major version whose C API this module declares.
SUPPORTED_MAJOR = 6


def _version_of(library: ctypes.CDLL) -> tuple[int, int, int]:
    """(major, minor, patch) from ``nvcompGetProperties`` (version = major*1000 + minor*100 +
    patch); the struct is read into a larger buffer so a grown struct cannot overrun it."""
    properties = (ctypes.c_uint32 * 16)()
    function = library.nvcompGetProperties
    function.argtypes, function.restype = [ctypes.c_void_p], ctypes.c_int
    if function(ctypes.cast(properties, ctypes.c_void_p)) != _SUCCESS:
        raise GPUUnavailableError("libnvcomp did not report its version (nvcompGetProperties)")
    value = int(properties[0])
    return value // 1000, value % 1000 // 100, value % 100


@functools.cache
def library_version() -> tuple[int, int, int]:
    """The loaded libnvcomp's version, as (major, minor, patch)."""
    return _version_of(_library())


@functools.cache
def _library() -> ctypes.CDLL:
    """libnvcomp, loaded the way the ``nvidia-nvcomp`` wheels load it, with typed functions."""
    try:
        # ``nvidia.nvcomp`` deletes the ``libnvcomp`` attribute of the ``nvidia`` namespace after
        # importing it, so look the module up rather than through the attribute.
        libnvcomp = importlib.import_module("nvidia.libnvcomp")
    except ImportError as exc:
        raise GPUUnavailableError(f"nvidia-libnvcomp is not installed ({exc})") from None
    library = libnvcomp.load_library()
    if library is None:
        raise GPUUnavailableError("libnvcomp could not be loaded")
    version = _version_of(library)
    if version[0] != SUPPORTED_MAJOR:  # the C structs below are declared for this major version
        raise GPUUnavailableError(
            f"libnvcomp {'.'.join(map(str, version))} is installed; linumpy needs nvCOMP "
            f"{SUPPORTED_MAJOR}.x (pip install 'nvidia-nvcomp-cu13>={SUPPORTED_MAJOR},"
            f"<{SUPPORTED_MAJOR + 1}')"
        )
    for name, argtypes in _SIGNATURES.items():
        # zstd's functions must be there; another algorithm's missing only fails its own reads
        function = getattr(library, name) if "Zstd" in name else getattr(library, name, None)
        if function is not None:
            function.argtypes = list(argtypes)
            function.restype = ctypes.c_int
    return library


def _check(status: int, what: str) -> None:
    if status != _SUCCESS:
        raise RuntimeError(f"nvCOMP {what} failed: {_STATUS_NAMES.get(status, status)}")


def _function(algorithm: str, suffix: str) -> Any:
    """nvCOMP's ``nvcompBatched<Algorithm><suffix>`` (GPUUnavailableError when missing)."""
    name = f"nvcompBatched{ALGORITHMS[algorithm]}{suffix}"
    function = getattr(_library(), name, None)
    if function is None:
        version = ".".join(map(str, library_version()))
        raise GPUUnavailableError(f"libnvcomp {version} has no {name}")
    return function


@functools.cache
def alignments(algorithm: str = "zstd") -> tuple[int, int]:
    """Byte alignment an nvCOMP decoder needs of (compressed inputs, decoded outputs)."""
    result = _Alignments()
    _check(
        _function(algorithm, "DecompressGetRequiredAlignments")(
            _DecompressOpts(), ctypes.byref(result)
        ),
        "alignment query",
    )
    return int(result.input), int(result.output)


def _temp(stream: cupy.cuda.Stream, nbytes: int) -> tuple[int, int, Any]:
    """A device work space of ``nbytes`` for one call on ``stream``, and the array to keep alive.

    From cupy's pool (stream-ordered reuse), given back as soon as the call is queued: a cache per
    stream would keep the largest space ever asked on every thread's streams.
    """
    import cupy

    if not nbytes:
        return 0, 0, None
    with stream:
        space = cupy.empty(nbytes, dtype=np.uint8)
    return int(space.data.ptr), int(space.nbytes), space


@dataclass(slots=True)
class PendingStatuses:
    """What one nvCOMP call will report: per-chunk statuses and sizes, copied back to the host.

    Call :meth:`check` after the stream has been synchronised.
    """

    host: np.ndarray  # (2, n) int64 in pinned memory: statuses, actual sizes
    expected: np.ndarray  # (n,) the sizes every chunk must have, or -1 to accept any
    device: Any = None  # keeps the device tables alive until the stream is done
    what: str = "decode"

    def sizes(self) -> np.ndarray:
        """The sizes nvCOMP reported (decoded sizes, or compressed sizes for an encode)."""
        return self.host[1]

    def check(self, keys: Sequence[str] | None = None) -> None:
        """Raise :class:`~linumpy.errors.ChunkDecodeError` for the first chunk that failed."""
        statuses, sizes = self.host
        bad = (statuses != _SUCCESS) | ((self.expected >= 0) & (sizes != self.expected))
        if not bad.any():
            return
        i = int(np.flatnonzero(bad)[0])
        key = keys[i] if keys is not None else f"batch item {i}"
        status = int(statuses[i])
        if status != _SUCCESS:
            reason = f"nvCOMP {self.what} failed: {_STATUS_NAMES.get(status, status)}"
        else:
            reason = f"nvCOMP {self.what}d to {int(sizes[i])} bytes, expected {self.expected[i]}"
        raise ChunkDecodeError(key, reason)


def _tables(
    stream: cupy.cuda.Stream, columns: Sequence[np.ndarray], n: int
) -> tuple[list[int], Any]:
    """Upload per-chunk int64 columns and room for statuses and sizes; return each column's
    device address and the device table."""
    import cupy

    host = np.zeros((len(columns) + 2, n), dtype=np.int64)
    for row, column in enumerate(columns):
        host[row] = column
    with stream:
        device = cupy.asarray(host)
    base = int(device.data.ptr)
    addresses = [base + 8 * n * row for row in range(len(columns) + 2)]
    return addresses, device


def _statuses(
    stream: cupy.cuda.Stream, device: Any, expected: np.ndarray, what: str
) -> PendingStatuses:
    """Queue the copy of the last two table rows (statuses, sizes) back to pinned memory."""
    import cupy

    n = len(expected)
    host = pinned_empty(16 * n).view(np.int64).reshape(2, n)
    source = int(device.data.ptr) + 8 * n * (device.shape[0] - 2)
    runtime = cupy.cuda.runtime
    runtime.memcpyAsync(host.ctypes.data, source, 16 * n, runtime.memcpyDeviceToHost, stream.ptr)
    return PendingStatuses(host, expected, device, what)


def decode(
    sources: np.ndarray,
    sizes: np.ndarray,
    targets: np.ndarray,
    capacities: np.ndarray,
    *,
    stream: cupy.cuda.Stream,
    before_decode: Callable[[int, int], None] | None = None,
    algorithm: str = "zstd",
) -> PendingStatuses:
    """Queue one batched nvCOMP decode on ``stream``; return its pending statuses.

    Per frame: the device address and size of its compressed bytes (aligned to
    :func:`alignments`), and the address and exact size of its decoded bytes. ``before_decode``
    is called with the device addresses of the sources and sizes columns once their upload is
    queued: it may queue work that rewrites them (the device crc32c check's stand-in).
    """
    n = len(sources)
    expected = np.asarray(capacities, dtype=np.int64)
    if n == 0:
        return PendingStatuses(np.zeros((2, 0), dtype=np.int64), expected)
    opts = _DecompressOpts()
    needed = ctypes.c_size_t()
    _check(
        _function(algorithm, "DecompressGetTempSize")(
            n, int(expected.max()), opts, ctypes.byref(needed), int(expected.sum()), stream.ptr
        ),
        "decode work-space query",
    )
    temp, temp_bytes, space = _temp(stream, int(needed.value))
    (src, src_n, dst_n, dst, statuses, actual), device = _tables(
        stream, [sources, sizes, capacities, targets], n
    )
    if before_decode is not None:
        before_decode(src, src_n)
    _check(
        _function(algorithm, "DecompressAsync")(
            src, src_n, dst_n, actual, n, temp, temp_bytes, dst, opts, statuses, stream.ptr
        ),
        "decode launch",
    )
    del space  # back to the pool now: only later work on this stream can reuse it
    return _statuses(stream, device, expected, "decode")


@functools.cache
def max_encoded_size(chunk_nbytes: int) -> int:
    """The most bytes nvCOMP's zstd encoder may write for a chunk of ``chunk_nbytes``."""
    result = ctypes.c_size_t()
    _check(
        _library().nvcompBatchedZstdCompressGetMaxOutputChunkSize(
            chunk_nbytes, _CompressOpts(), ctypes.byref(result)
        ),
        "output size query",
    )
    return int(result.value)


def encode(
    sources: np.ndarray,
    sizes: np.ndarray,
    targets: np.ndarray,
    *,
    stream: cupy.cuda.Stream,
) -> PendingStatuses:
    """Queue one batched nvCOMP zstd encode on ``stream``; return its pending statuses.

    Per chunk: device address and size (at most :data:`MAX_ENCODE_BYTES`, 4-byte aligned), and
    room for :func:`max_encoded_size` bytes at ``targets``.
    """
    n = len(sources)
    if n == 0:
        return PendingStatuses(
            np.zeros((2, 0), dtype=np.int64), np.zeros(0, np.int64), None, "encode"
        )
    library = _library()
    opts = _CompressOpts()
    sizes = np.asarray(sizes, dtype=np.int64)
    largest, total = int(sizes.max()), int(sizes.sum())
    needed = ctypes.c_size_t()
    _check(
        library.nvcompBatchedZstdCompressGetTempSize(
            n, largest, opts, ctypes.byref(needed), total, stream.ptr
        ),
        "encode work-space query",
    )
    temp, temp_bytes, space = _temp(stream, int(needed.value))
    (src, src_n, dst, statuses, actual), device = _tables(stream, [sources, sizes, targets], n)
    _check(
        library.nvcompBatchedZstdCompressAsync(
            src, src_n, largest, n, temp, temp_bytes, dst, actual, opts, statuses, stream.ptr
        ),
        "encode launch",
    )
    del space  # back to the pool now: only later work on this stream can reuse it
    return _statuses(stream, device, np.full(n, -1, dtype=np.int64), "encode")
