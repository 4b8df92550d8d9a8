"""The CPU zstd frame validator on crafted frames."""

from __future__ import annotations

import numpy as np
import pytest
from numcodecs import Zstd

from linumpy.errors import ChunkDecodeError
from linumpy.io.engine.codecs.zstd import decode, inspect_chunk

DATA = np.random.default_rng(0).integers(0, 400, 50_000, dtype=np.uint16)
NBYTES = DATA.nbytes


def frame(checksum: bool = False, data: np.ndarray = DATA) -> bytes:
    return bytes(Zstd(level=3, checksum=checksum).encode(data))


def raw_frame_without_size(payload: bytes) -> bytes:
    """A valid frame with one raw block and no content size field (window descriptor instead)."""
    header = (0xFD2FB528).to_bytes(4, "little") + bytes([0x00, 0x48])
    return header + ((len(payload) << 3) | 1).to_bytes(3, "little") + payload


def skippable(content: bytes) -> bytes:
    return (0x184D2A53).to_bytes(4, "little") + len(content).to_bytes(4, "little") + content


def test_valid_frame() -> None:
    info = inspect_chunk(frame(), key="c/0", expected_size=NBYTES)
    assert info.content_size == NBYTES
    assert info.checksum is None
    assert (info.n_frames, info.n_skippable) == (1, 0)
    assert info.gpu_decodable
    out = decode(frame(), key="c/0", out=np.empty(NBYTES, np.uint8))
    np.testing.assert_array_equal(out.view(np.uint16), DATA)


def test_checksum_is_reported_and_verified() -> None:
    good = frame(checksum=True)
    info = inspect_chunk(good, key="c/0", expected_size=NBYTES)
    assert info.checksum == int.from_bytes(good[-4:], "little")
    assert info.gpu_decodable
    decode(good, key="c/0", expected_size=NBYTES)
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    inspect_chunk(bytes(bad), key="c/0", expected_size=NBYTES)  # headers are still fine
    with pytest.raises(ChunkDecodeError, match="c/0.*checksum"):
        decode(bytes(bad), key="c/0", expected_size=NBYTES)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"\x00\x01\x02\x03" * 10, "bad magic"),
        (b"\x28\xb5\x2f", "trailing bytes"),
        (frame()[: len(frame()) // 2], "truncated"),
        (frame()[:7], "truncated"),
        (frame() + b"\x00\x01", "trailing bytes"),
        (frame() + b"garbage!", "garbage"),
        (skippable(b"abc"), "no zstd data frame"),
    ],
    ids=["empty", "bad-magic", "short", "half", "header-only", "trailing", "garbage", "skip-only"],
)
def test_invalid_frames_raise_naming_the_chunk(data: bytes, reason: str) -> None:
    with pytest.raises(ChunkDecodeError, match=reason) as info:
        inspect_chunk(data, key="0/c/1/2/3", expected_size=NBYTES)
    assert info.value.key == "0/c/1/2/3"
    with pytest.raises(ChunkDecodeError):
        decode(data, key="0/c/1/2/3", expected_size=NBYTES)


def test_reserved_bits_rejected() -> None:
    data = bytearray(frame())
    data[4] |= 0x08
    with pytest.raises(ChunkDecodeError, match="reserved bit"):
        inspect_chunk(bytes(data), key="k")


def test_wrong_declared_size_rejected() -> None:
    with pytest.raises(ChunkDecodeError, match=f"declares {NBYTES} decompressed bytes"):
        inspect_chunk(frame(), key="k", expected_size=NBYTES + 2)


def test_two_frames_are_valid_but_not_for_the_gpu() -> None:
    half = DATA.size // 2
    data = frame(data=DATA[:half]) + frame(data=DATA[half:])
    info = inspect_chunk(data, key="k", expected_size=NBYTES)
    assert (info.n_frames, info.content_size, info.gpu_decodable) == (2, None, False)
    out = decode(data, key="k", out=np.empty(NBYTES, np.uint8))
    np.testing.assert_array_equal(out.view(np.uint16), DATA)


def test_two_frames_decoding_short_is_an_error() -> None:
    data = frame(data=DATA[:100]) + frame(data=DATA[100:200])
    with pytest.raises(ChunkDecodeError, match="decoded to 400 bytes"):
        decode(data, key="k", out=np.empty(NBYTES, np.uint8))


def test_frame_without_content_size() -> None:
    payload = DATA.tobytes()[:1000]
    data = raw_frame_without_size(payload)
    info = inspect_chunk(data, key="k", expected_size=1000)
    assert (info.content_size, info.gpu_decodable) == (None, False)
    out = decode(data, key="k", out=np.empty(1000, np.uint8))
    assert out.tobytes() == payload


def test_skippable_frames_are_valid_but_not_for_the_gpu() -> None:
    data = skippable(b"metadata") + frame()
    info = inspect_chunk(data, key="k", expected_size=NBYTES)
    assert (info.n_skippable, info.content_size, info.gpu_decodable) == (1, NBYTES, False)
    out = decode(data, key="k", expected_size=NBYTES)
    np.testing.assert_array_equal(out.view(np.uint16), DATA)


def test_numpy_input_accepted() -> None:
    data = np.frombuffer(frame(), dtype=np.uint8)
    assert inspect_chunk(data, key="k").content_size == NBYTES
