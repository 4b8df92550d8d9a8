"""zlib and gzip, the DEFLATE compressors of public OME-Zarr data, in one package.

They differ only in their wrapper (RFC 1950 and 1952). CPU decoding uses libdeflate where it is
installed, else Python's :mod:`zlib`; nvCOMP decodes the stream between header and trailer
(:meth:`Deflate.nvcomp_span`), for plain headers only, and the trailer's checksum is not verified
on the device (nvCOMP's statuses and the decoded size are).
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
from numcodecs import GZip, Zlib
from zarr.codecs import GzipCodec

from linumpy.errors import ChunkDecodeError
from linumpy.io.engine.codecs.deflate import libdeflate
from linumpy.io.engine.codecs.protocol import (
    FRAME_GPU,
    FRAME_NEEDS_CHECK,
    BytesLike,
    decode_fast,
    decoded_chunk,
)

__all__: list[str] = []

_DEFLATE = 8  # the compression method of both wrappers
_ZLIB_HEADER, _ZLIB_TRAILER = 2, 4
_ZLIB_PRESET_DICTIONARY = 0x20
_GZIP_MAGIC = (0x1F, 0x8B)
_GZIP_HEADER, _GZIP_TRAILER = 10, 8
_GZIP_RESERVED = 0xE0
_GZIP_EXTRA, _GZIP_NAME, _GZIP_COMMENT, _GZIP_HEADER_CRC = 0x04, 0x08, 0x10, 0x02
_SIZE_MASK = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """What one chunk's wrapper declares."""

    checksum: int
    verdict: int


def _uint(buffer: np.ndarray, positions: np.ndarray, width: int, valid: np.ndarray) -> np.ndarray:
    """Little-endian unsigned integers of ``width`` bytes at ``positions`` (0 where not valid)."""
    value = np.zeros(len(positions), dtype=np.int64)
    safe = np.where(valid, positions, 0)
    for k in range(width):
        value |= buffer[safe + k].astype(np.int64) << (8 * k)
    return np.where(valid, value, 0)


class Deflate:
    """A DEFLATE compressor in one wrapper, ``"zlib"`` or ``"gzip"`` (:data:`ZLIB`,
    :data:`GZIP`).
    """

    NVCOMP: str | None = "deflate"
    NVCOMP_ENCODE = False
    CHECKSUM_BYTES = 0  # no verdict asks the GPU to verify a trailer
    FAST_DECODE = libdeflate.AVAILABLE

    def __init__(self, name: str) -> None:
        self.NAME = name
        self._zlib = name == "zlib"
        self._head = _ZLIB_HEADER if self._zlib else _GZIP_HEADER
        self._tail = _ZLIB_TRAILER if self._zlib else _GZIP_TRAILER

    def __repr__(self) -> str:
        return f"<compressor {self.NAME}>"

    def config_of(self, codec: Any) -> tuple[int, bool] | None:
        """The level of a codec of this wrapper (no content checksum flag), or None."""
        ours = isinstance(codec, Zlib) if self._zlib else isinstance(codec, GZip | GzipCodec)
        if not ours:  # numcodecs' codecs wrapped for zarr v3
            config = getattr(codec, "codec_config", None)
            ours = isinstance(config, dict) and config.get("id") == self.NAME
            if ours:
                return int(config.get("level", 1)), False
            return None
        return int(codec.level), False

    def encoder(self, level: int, checksum: bool) -> Any:
        """numcodecs' codec of ``level`` (``checksum`` is ignored: the trailer always has one)."""
        return Zlib(level=level) if self._zlib else GZip(level=level)

    def nvcomp_span(self, offsets: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The raw DEFLATE stream between a plain header and the trailer."""
        return offsets + self._head, sizes - self._head - self._tail

    def set_checksum(self, frame: np.ndarray, checksum: int) -> None:
        """nvCOMP writes no zlib or gzip stream: nothing to complete."""
        raise NotImplementedError(f"nvCOMP does not write {self.NAME} streams")

    def check_frames(
        self, buffer: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, expected_size: int
    ) -> np.ndarray:
        """The headers (and gzip's size) of many chunks of one buffer, checked at once."""
        start = np.asarray(offsets, dtype=np.int64)
        size = np.asarray(sizes, dtype=np.int64)
        ok = size > self._head + self._tail
        first = _uint(buffer, start, 1, ok)
        second = _uint(buffer, start + 1, 1, ok)
        if self._zlib:
            ok &= (first & 0x0F) == _DEFLATE
            ok &= (first >> 4) <= 7
            ok &= (first * 256 + second) % 31 == 0
            ok &= (second & _ZLIB_PRESET_DICTIONARY) == 0
        else:
            ok &= (first == _GZIP_MAGIC[0]) & (second == _GZIP_MAGIC[1])
            ok &= _uint(buffer, start + 2, 1, ok) == _DEFLATE
            ok &= _uint(buffer, start + 3, 1, ok) == 0  # a plain header: no optional fields
            isize = _uint(buffer, start + size - 4, 4, ok)
            ok &= isize == (expected_size & _SIZE_MASK)
        verdict = np.full(len(start), FRAME_NEEDS_CHECK, dtype=np.int8)
        verdict[ok] = FRAME_GPU
        return verdict

    def inspect_chunk(
        self, data: BytesLike, *, key: str, expected_size: int | None = None
    ) -> StreamInfo:
        """Check one chunk's wrapper, saying precisely what is wrong with it."""
        view = memoryview(data).cast("B")
        if len(view) <= self._head + self._tail:
            raise ChunkDecodeError(key, f"{len(view)} bytes are too few for a {self.NAME} stream")
        if self._zlib:
            cmf, flg = view[0], view[1]
            if (cmf & 0x0F) != _DEFLATE or cmf >> 4 > 7 or (cmf * 256 + flg) % 31:
                raise ChunkDecodeError(
                    key, f"not a zlib stream (it starts with {cmf:02x} {flg:02x})"
                )
            if flg & _ZLIB_PRESET_DICTIONARY:
                raise ChunkDecodeError(key, "the zlib stream needs a preset dictionary")
            return StreamInfo(int.from_bytes(view[-4:], "big"), FRAME_GPU)
        if (view[0], view[1]) != _GZIP_MAGIC:
            raise ChunkDecodeError(
                key, f"not a gzip member (it starts with {view[0]:02x} {view[1]:02x})"
            )
        if view[2] != _DEFLATE or view[3] & _GZIP_RESERVED:
            raise ChunkDecodeError(
                key, f"gzip method {view[2]} or flags {view[3]:#x} are not DEFLATE's"
            )
        isize = int.from_bytes(view[-4:], "little")
        plain = view[3] == 0 and (expected_size is None or isize == expected_size & _SIZE_MASK)
        # Optional header fields, or several members: valid, decoded on the CPU.
        verdict = FRAME_GPU if plain else FRAME_NEEDS_CHECK
        return StreamInfo(int.from_bytes(view[-8:-4], "little"), verdict)

    def decode_into(self, src: Any, src_size: int, dst: int, dst_size: int) -> bool:
        """libdeflate's decode of one stream into exactly ``dst_size`` bytes at ``dst``."""
        return libdeflate.decode_into(self.NAME, src, src_size, dst, dst_size)

    def decode(
        self,
        data: BytesLike,
        *,
        key: str,
        out: np.ndarray | None = None,
        expected_size: int | None = None,
        checked: bool = False,
    ) -> np.ndarray:
        """Check and decode one chunk on the CPU: libdeflate, or Python's :mod:`zlib`."""
        if out is not None:
            expected_size = out.nbytes
        if not checked:
            self.inspect_chunk(data, key=key)
        target = out
        if target is None and expected_size is not None:
            target = np.empty(expected_size, dtype=np.uint8)
        if target is not None and self.FAST_DECODE and decode_fast(self.decode_into, data, target):
            return target
        try:
            if self._zlib:
                stream = zlib.decompressobj()
                decoded = stream.decompress(data)
                if not stream.eof:
                    raise zlib.error("the stream is truncated")
                if stream.unused_data:
                    raise zlib.error(f"{len(stream.unused_data)} bytes follow the stream")
            else:  # several members are valid gzip
                decoded = gzip.decompress(data)
        except (zlib.error, OSError, EOFError) as exc:
            raise ChunkDecodeError(key, f"{self.NAME} decode failed: {exc}") from None
        return decoded_chunk(decoded, key=key, expected_size=expected_size, out=out)


#: zlib (RFC 1950): zarr v2's ``zlib`` compressor.
ZLIB = Deflate("zlib")
#: gzip (RFC 1952): zarr v3's ``gzip`` codec, zarr v2's ``gzip`` compressor.
GZIP = Deflate("gzip")
