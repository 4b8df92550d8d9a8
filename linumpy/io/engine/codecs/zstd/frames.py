"""zstd's validate stage: frames walked header by header (RFC 8878) on the CPU before any decoder
sees them, which catches what a decoder may silently get wrong (truncation, garbage, trailing
bytes, a wrong content size). :func:`check_frames` checks many chunks at once with numpy;
:func:`inspect_chunk` walks one, says what is wrong, and accepts the valid layouts only libzstd
decodes. nvCOMP only ever sees frames that passed one of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from linumpy.errors import ChunkDecodeError
from linumpy.io.engine.codecs.protocol import (
    FRAME_CHECKSUM,
    FRAME_GPU,
    FRAME_NEEDS_CHECK,
    BytesLike,
)

__all__: list[str] = []

# RFC 8878's constants, shared by the scalar and the vectorised walk.
ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE_MAGIC_MASK = 0xFFFFFFF0
_SKIPPABLE_MAGIC = 0x184D2A50
_MAX_BLOCK_SIZE = 128 * 1024
_FCS_FIELD_SIZES = (0, 2, 4, 8)
_DICT_ID_FIELD_SIZES = (0, 1, 2, 4)
_FCS_2_BYTE_BIAS = 256  # a 2-byte content size field stores the size minus 256
_RESERVED_BIT = 0x08
_SINGLE_SEGMENT_BIT = 0x20
CHECKSUM_BIT = 0x04
DESCRIPTOR_OFFSET = 4  # the frame header descriptor follows the 4-byte magic number
#: Bytes of zstd's content checksum at the end of a frame.
CHECKSUM_BYTES = 4
_DICT_ID_MASK = 0x03
_BLOCK_RLE = 1
_BLOCK_RESERVED = 3
_MIN_FRAME = 6  # magic, descriptor and the smallest block header


@dataclass(frozen=True, slots=True)
class FrameInfo:
    """What the headers of one chunk's zstd data declare."""

    content_size: int | None
    checksum: int | None
    n_frames: int
    n_skippable: int

    @property
    def gpu_decodable(self) -> bool:
        """True when nvCOMP can decode the chunk: one data frame, nothing else, size declared."""
        return self.n_frames == 1 and self.n_skippable == 0 and self.content_size is not None

    @property
    def verdict(self) -> int:
        """The chunk's verdict (:mod:`~linumpy.io.engine.codecs.protocol`): nvCOMP decodes it,
        with or without a content checksum to verify, or only libzstd does."""
        if not self.gpu_decodable:
            return FRAME_NEEDS_CHECK
        return FRAME_GPU if self.checksum is None else FRAME_CHECKSUM


@dataclass(frozen=True, slots=True)
class _Frame:
    end: int
    content_size: int | None
    checksum: int | None


def _as_bytes_view(data: BytesLike) -> memoryview:
    view = memoryview(data)
    if not view.c_contiguous:
        raise TypeError("zstd chunk data must be a contiguous buffer")
    return view.cast("B")


def _read_frame(view: memoryview, start: int) -> _Frame:
    """Walk the zstd frame that starts at ``start`` (after its magic number); raise ValueError."""
    size = len(view)
    pos = start + 4
    if pos >= size:
        raise ValueError(f"frame header truncated at byte {pos}")
    descriptor = view[pos]
    pos += 1
    if descriptor & _RESERVED_BIT:
        raise ValueError("reserved bit set in the frame header descriptor")
    single_segment = bool(descriptor & _SINGLE_SEGMENT_BIT)
    has_checksum = bool(descriptor & CHECKSUM_BIT)
    dict_id_size = _DICT_ID_FIELD_SIZES[descriptor & _DICT_ID_MASK]
    fcs_flag = descriptor >> 6
    fcs_size = 1 if (fcs_flag == 0 and single_segment) else _FCS_FIELD_SIZES[fcs_flag]
    header_end = pos + (0 if single_segment else 1) + dict_id_size + fcs_size
    if header_end > size:
        raise ValueError(f"frame header truncated: needs {header_end} bytes, chunk has {size}")
    if not single_segment:
        pos += 1  # window descriptor
    if dict_id_size and int.from_bytes(view[pos : pos + dict_id_size], "little") != 0:
        raise ValueError("frame needs a zstd dictionary, which zarr chunks never use")
    pos += dict_id_size
    content_size = None
    if fcs_size:
        content_size = int.from_bytes(view[pos : pos + fcs_size], "little")
        if fcs_size == 2:
            content_size += _FCS_2_BYTE_BIAS
    pos = header_end
    while True:
        if pos + 3 > size:
            raise ValueError(f"block header truncated at byte {pos} (chunk has {size} bytes)")
        header = int.from_bytes(view[pos : pos + 3], "little")
        last = header & 1
        block_type = (header >> 1) & 3
        block_size = header >> 3
        if block_type == _BLOCK_RESERVED:
            raise ValueError(f"reserved block type at byte {pos}")
        if block_size > _MAX_BLOCK_SIZE:
            raise ValueError(f"block at byte {pos} declares {block_size} bytes, over 128 KiB")
        pos += 3 + (1 if block_type == _BLOCK_RLE else block_size)
        if pos > size:
            raise ValueError(f"block data truncated: needs {pos} bytes, chunk has {size}")
        if last:
            break
    checksum = None
    if has_checksum:
        if pos + 4 > size:
            raise ValueError("content checksum truncated")
        checksum = int.from_bytes(view[pos : pos + 4], "little")
        pos += 4
    return _Frame(end=pos, content_size=content_size, checksum=checksum)


def inspect_chunk(data: BytesLike, *, key: str, expected_size: int | None = None) -> FrameInfo:
    """Check that ``data`` is well-formed zstd and say what its headers declare."""
    view = _as_bytes_view(data)
    size = len(view)
    if size == 0:
        raise ChunkDecodeError(key, "empty chunk: zero bytes stored")
    pos = 0
    frames: list[_Frame] = []
    n_skippable = 0
    try:
        while pos < size:
            if pos + 4 > size:
                raise ValueError(f"{size - pos} trailing bytes after the last frame")
            magic = int.from_bytes(view[pos : pos + 4], "little")
            if magic == ZSTD_MAGIC:
                frame = _read_frame(view, pos)
                frames.append(frame)
                pos = frame.end
            elif magic & _SKIPPABLE_MAGIC_MASK == _SKIPPABLE_MAGIC:
                if pos + 8 > size:
                    raise ValueError("skippable frame header truncated")
                pos += 8 + int.from_bytes(view[pos + 4 : pos + 8], "little")
                if pos > size:
                    raise ValueError("skippable frame truncated")
                n_skippable += 1
            elif not frames and not n_skippable:
                raise ValueError(f"not zstd data: bad magic number 0x{magic:08X}")
            else:
                raise ValueError(f"garbage after the last frame at byte {pos}")
    except ValueError as exc:
        raise ChunkDecodeError(key, str(exc)) from None
    if not frames:
        raise ChunkDecodeError(key, "no zstd data frame, only skippable frames")
    single = frames[0] if len(frames) == 1 else None
    content_size = single.content_size if single else None
    if content_size is not None and expected_size is not None and content_size != expected_size:
        raise ChunkDecodeError(
            key,
            f"frame declares {content_size} decompressed bytes, the chunk holds {expected_size}",
        )
    return FrameInfo(
        content_size=content_size,
        checksum=single.checksum if single else None,
        n_frames=len(frames),
        n_skippable=n_skippable,
    )


def _gather(buffer: np.ndarray, positions: np.ndarray, width: int, valid: np.ndarray) -> np.ndarray:
    """Little-endian unsigned integers of ``width`` bytes at ``positions`` (0 where not valid)."""
    value = np.zeros(len(positions), dtype=np.uint64)
    safe = np.where(valid, positions, 0)
    for k in range(width):
        value |= buffer[safe + k].astype(np.uint64) << np.uint64(8 * k)
    return np.where(valid, value, np.uint64(0))


def check_frames(
    buffer: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, expected_size: int
) -> np.ndarray:
    """Walk the frame and block headers of many chunks of one buffer at once (numpy).

    The fast, strict subset of :func:`inspect_chunk`: a chunk passes when it is exactly one
    zstd frame, without dictionary, whose header declares ``expected_size`` bytes and whose blocks
    (valid types, at most 128 KiB) end exactly at the chunk's end, checksum included. Every other
    chunk is left to :func:`inspect_chunk`, which raises a precise error or accepts it for
    the CPU decoder.
    """
    start = np.asarray(offsets, dtype=np.int64)
    end = start + np.asarray(sizes, dtype=np.int64)
    ok = end - start >= _MIN_FRAME
    magic = _gather(buffer, start, 4, ok)
    ok &= magic == np.uint64(ZSTD_MAGIC)
    descriptor = _gather(buffer, start + 4, 1, ok).astype(np.int64)
    ok &= (descriptor & _RESERVED_BIT) == 0
    ok &= (descriptor & _DICT_ID_MASK) == 0
    single = (descriptor & _SINGLE_SEGMENT_BIT) != 0
    fcs_size = np.asarray(_FCS_FIELD_SIZES, dtype=np.int64)[descriptor >> 6]
    fcs_size = np.where((fcs_size == 0) & single, 1, fcs_size)
    ok &= fcs_size > 0
    # After the magic number, the descriptor and (unless single segment) the window byte.
    fcs_pos = start + 6 - single.astype(np.int64)
    position = fcs_pos + fcs_size
    ok &= position <= end
    content = np.zeros(len(start), dtype=np.uint64)
    for width in (1, 2, 4, 8):
        has = ok & (fcs_size == width)
        content = np.where(has, _gather(buffer, fcs_pos, width, has), content)
    content += np.where(fcs_size == 2, np.uint64(_FCS_2_BYTE_BIAS), np.uint64(0))
    ok &= content == np.uint64(expected_size)

    active = ok.copy()
    while True:
        idx = np.flatnonzero(active)
        if len(idx) == 0:
            break
        pos, stop = position[idx], end[idx]
        room = pos + 3 <= stop
        header = _gather(buffer, pos, 3, room).astype(np.int64)
        block_type = (header >> 1) & 3
        block_size = header >> 3
        after = pos + 3 + np.where(block_type == _BLOCK_RLE, 1, block_size)
        bad = ~room | (block_type == _BLOCK_RESERVED) | (block_size > _MAX_BLOCK_SIZE)
        bad |= after > stop
        position[idx] = after
        ok[idx[bad]] = False
        active[idx[bad | ((header & 1) == 1)]] = False

    has_checksum = (descriptor & CHECKSUM_BIT) != 0
    ok &= position + 4 * has_checksum == end
    verdict = np.full(len(start), FRAME_NEEDS_CHECK, dtype=np.int8)
    verdict[ok & ~has_checksum] = FRAME_GPU
    verdict[ok & has_checksum] = FRAME_CHECKSUM
    return verdict
