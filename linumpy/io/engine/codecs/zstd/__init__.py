"""zstd, the engine's default compressor: recognition, frame checks, CPU decode and encode, and
the GPU hooks, implementing :class:`~linumpy.io.engine.codecs.protocol.Compressor`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numcodecs import Zstd
from zarr.codecs import ZstdCodec

from linumpy.errors import ChunkDecodeError
from linumpy.io.engine.codecs.protocol import BytesLike, decode_fast, decoded_chunk
from linumpy.io.engine.codecs.zstd import libzstd
from linumpy.io.engine.codecs.zstd.frames import (
    CHECKSUM_BIT,
    CHECKSUM_BYTES,
    DESCRIPTOR_OFFSET,
    FrameInfo,
    check_frames,
    inspect_chunk,
)

__all__ = [
    "CHECKSUM_BYTES",
    "FAST_DECODE",
    "NAME",
    "NVCOMP",
    "NVCOMP_ENCODE",
    "FrameInfo",
    "check_frames",
    "config_of",
    "decode",
    "decode_into",
    "encoder",
    "inspect_chunk",
    "nvcomp_span",
    "set_checksum",
]

#: The compressor's name in messages.
NAME = "zstd"
#: nvCOMP's algorithm for its frames (:data:`linumpy.gpu.nvcomp.ALGORITHMS`).
NVCOMP = "zstd"
#: nvCOMP writes zstd frames (:mod:`linumpy.gpu.encode`).
NVCOMP_ENCODE = True
#: Whether :func:`decode_into` works here (libzstd loaded through ctypes); :func:`decode` works
#: everywhere (numcodecs).
FAST_DECODE = libzstd.AVAILABLE
decode_into = libzstd.decode_into


def config_of(codec: Any) -> tuple[int, bool] | None:
    """The level and checksum flag of a zstd codec (zarr v3) or compressor (zarr v2), or None
    when ``codec`` is not zstd.
    """
    if isinstance(codec, ZstdCodec | Zstd):
        return int(codec.level), bool(codec.checksum)
    return None


def encoder(level: int, checksum: bool) -> Zstd:
    """The CPU encoder of zstd frames of ``level``, with content checksums when ``checksum``."""
    return Zstd(level=level, checksum=checksum)


def nvcomp_span(offsets: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """nvCOMP decodes the whole frame."""
    return offsets, sizes


_ZSTD = Zstd()


def decode(
    data: BytesLike,
    *,
    key: str,
    out: np.ndarray | None = None,
    expected_size: int | None = None,
    checked: bool = False,
) -> np.ndarray:
    """Validate and decode one zstd chunk on the CPU with libzstd (or numcodecs).

    When the decoded size is known (``out`` or ``expected_size``) the decoder never writes more:
    a frame that declares no size and inflates past the chunk fails at the chunk's size.

    The chunk is first checked with :func:`inspect_chunk`; libzstd then decodes every valid
    layout (several frames, skippable frames, no declared size) and verifies stored checksums.
    """
    if out is not None:
        expected_size = out.nbytes
    single = True
    if not (checked and out is not None):
        info = inspect_chunk(data, key=key, expected_size=expected_size)
        single = info.n_frames == 1 and info.n_skippable == 0
    # One frame (its declared size, if any, was checked): decoding into a buffer of the chunk's
    # size writes no more than that, and libzstd fails when a frame that declares no size
    # decodes to more or fewer bytes, so it cannot inflate past the chunk. Several frames are
    # decoded into a buffer of their own (libzstd sizes it from the frames) and checked after.
    target = out
    if single and target is None and expected_size is not None:
        target = np.empty(expected_size, dtype=np.uint8)
    # libzstd through ctypes on a context this thread keeps; on failure numcodecs decodes again
    if single and target is not None and FAST_DECODE and decode_fast(decode_into, data, target):
        return target
    try:
        decoded = _ZSTD.decode(data, out=target if single else None)
    except (RuntimeError, ValueError) as exc:
        raise ChunkDecodeError(key, f"zstd decode failed: {exc}") from None
    if single and target is not None:
        return target
    return decoded_chunk(decoded, key=key, expected_size=expected_size, out=out)


def set_checksum(frame: np.ndarray, checksum: int) -> None:
    """Make the single zstd frame ``frame[:-4]`` carry ``checksum`` in its last four bytes.

    ``frame`` is a 1-D uint8 array: a frame written without a checksum (nvCOMP writes none)
    followed by four spare bytes. The frame header descriptor gains the Content_Checksum_flag and
    the checksum (the low 32 bits of XXH64 of the content) is stored little-endian after the last
    block (RFC 8878, section 3.1.1).
    """
    frame[DESCRIPTOR_OFFSET] |= CHECKSUM_BIT
    frame[-CHECKSUM_BYTES:] = np.frombuffer(
        (checksum & 0xFFFFFFFF).to_bytes(CHECKSUM_BYTES, "little"), dtype=np.uint8
    )
