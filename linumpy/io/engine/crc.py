"""The crc32c that zarr's ``crc32c`` codec appends to each compressed chunk, checked before decode.

nvCOMP's zstd decoder trusts its input, and a flipped bit inside a frame can make it fault or
hang (the zstd content checksum is only checked after decoding), so the reading threads refuse a
changed chunk first. The ``crc32c`` package releases the GIL; ``google_crc32c`` is the fallback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Executor

import numpy as np

from linumpy.errors import ChunkDecodeError

logger = logging.getLogger(__name__)

__all__: list[str] = []

#: Bytes of the checksum at the end of each chunk.
CRC32C_BYTES = 4


def google_crc32c_of(data: np.ndarray | bytes | bytearray | memoryview) -> int:
    """The crc32c of ``data`` by ``google_crc32c``, the fallback when ``crc32c`` is missing.

    ``google_crc32c.value`` refuses memoryviews (it wants a read-only buffer); a numpy view of
    the same bytes passes without a copy.
    """
    from google_crc32c import value

    return int(value(np.frombuffer(data, dtype=np.uint8)))


def _implementation() -> Callable[[np.ndarray], int]:
    try:
        from crc32c import crc32c as compute  # releases the GIL on large buffers
    except ImportError:  # crc32c is a dependency, but an environment may lack it
        logger.warning("the crc32c package is missing: checksums are computed by google_crc32c")
        return google_crc32c_of
    return compute


_CRC32C = _implementation()


def crc32c(data: np.ndarray | bytes | bytearray) -> int:
    """The crc32c (Castagnoli) of ``data``."""
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data).view(np.uint8)
    elif not isinstance(data, bytes):
        data = np.frombuffer(data, dtype=np.uint8)
    return int(_CRC32C(data))


def crc32c_matches(view: memoryview, nbytes: int) -> bool:
    """Whether the first ``nbytes`` of ``view`` end with the crc32c of the bytes before.

    The reading threads' check, written for the fewest Python steps per chunk (the GIL is held
    for them, and with many threads it bounds the read): one slice, one call that releases the
    GIL for 32 KiB or more, one integer of the trailer. :func:`strip_crc32c` says what is wrong.
    """
    body = nbytes - CRC32C_BYTES
    return body >= 0 and _CRC32C(view[:body]) == int.from_bytes(view[body:nbytes], "little")


def strip_crc32c(chunk: np.ndarray | bytes, key: str | Callable[[], str]) -> np.ndarray | bytes:
    """Check a stored chunk's trailing crc32c and return the bytes before it.

    ``key`` names the chunk in errors; a callable is called only for an error (naming a chunk
    costs more than checking it on a reader's hot path).
    """
    name = (lambda: key) if isinstance(key, str) else key
    n = len(chunk)
    if n < CRC32C_BYTES:
        raise ChunkDecodeError(name(), f"{n} bytes, shorter than its {CRC32C_BYTES}-byte crc32c")
    body = chunk[: n - CRC32C_BYTES]
    stored = int.from_bytes(bytes(chunk[n - CRC32C_BYTES :]), "little")
    computed = crc32c(body)
    if computed != stored:
        raise ChunkDecodeError(name(), _mismatch(stored, computed))
    return body


def _mismatch(stored: int, computed: int) -> str:
    return (
        f"crc32c checksum mismatch: stored 0x{stored:08X}, computed 0x{computed:08X} "
        "(the stored bytes changed; nothing was decoded)"
    )


def crc32c_bodies(sizes: np.ndarray, key: Callable[[int], str]) -> np.ndarray:
    """The sizes of chunks without their crc32c, for a check made later (on the GPU)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    short = np.flatnonzero(sizes < CRC32C_BYTES)
    if len(short):
        i = int(short[0])
        raise ChunkDecodeError(
            key(i), f"{int(sizes[i])} bytes, shorter than its {CRC32C_BYTES}-byte crc32c"
        )
    return sizes - CRC32C_BYTES


def strip_crc32c_many(
    buffer: np.ndarray,
    offsets: np.ndarray,
    sizes: np.ndarray,
    key: Callable[[int], str],
    pool: Executor | None = None,
) -> np.ndarray:
    """Check the crc32c of chunks packed in ``buffer``; return their sizes without it."""
    bodies = crc32c_bodies(sizes, key)
    ends = np.asarray(offsets, dtype=np.int64) + bodies
    trailers = buffer[ends[:, None] + np.arange(CRC32C_BYTES)].copy().view("<u4").reshape(-1)
    starts = np.asarray(offsets, dtype=np.int64).tolist()
    stops = ends.tolist()
    view = memoryview(buffer)

    def compute(part: range) -> list[int]:
        return [_CRC32C(view[starts[i] : stops[i]]) for i in part]

    count = len(starts)
    if pool is None or count < 2:
        computed = compute(range(count))
    else:  # a few tasks per thread: one per chunk costs more than the check of a small one
        step = max(1, count // 64)
        parts = pool.map(compute, [range(a, min(a + step, count)) for a in range(0, count, step)])
        computed = [value for part in parts for value in part]
    bad = np.flatnonzero(np.asarray(computed, dtype=np.int64) != trailers.astype(np.int64))
    if len(bad):
        i = int(bad[0])
        raise ChunkDecodeError(key(i), _mismatch(int(trailers[i]), computed[i]))
    return bodies
