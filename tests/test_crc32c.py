"""Chunks that end with a crc32c (codec chain bytes, zstd, crc32c): checked before any decoder."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import zarr
from zarr_layouts import CHUNKS, REGIONS, SHAPE, make_array, sample_data, zarr_read

from linumpy.errors import ChunkDecodeError
from linumpy.io import read_volume
from linumpy.io.engine import crc as crc_module
from linumpy.io.engine.crc import crc32c, google_crc32c_of, strip_crc32c, strip_crc32c_many
from linumpy.io.engine.fetch import chunk_sizes
from linumpy.io.engine.plan import plan_read

CRC_LAYOUTS = ("v3", "v3-sharded")
TINY = {"scratch_bytes": 65536, "io_threads": 2}  # with 4096 bytes of staging: small groups


def _flip(path: Path, position: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[position] ^= 0x10
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("layout", CRC_LAYOUTS)
def test_plan_knows_the_chain_ends_with_crc32c(tmp_path: Path, layout: str) -> None:
    data = sample_data(SHAPE, "uint16")
    with_crc = plan_read(make_array(tmp_path / "a", layout, data, chunks=CHUNKS, crc32c=True))
    without = plan_read(make_array(tmp_path / "b", layout, data, chunks=CHUNKS))
    assert with_crc.crc32c and not without.crc32c
    stored = with_crc.stored & without.stored
    # the same frames, four bytes longer
    assert np.all(chunk_sizes(with_crc)[stored] == chunk_sizes(without)[stored] + 4)


@pytest.mark.parametrize("layout", CRC_LAYOUTS)
@pytest.mark.parametrize("region", REGIONS[:3])
@pytest.mark.parametrize("settings", [None, TINY])
def test_crc32c_arrays_read_like_zarr(
    tmp_path: Path, layout: str, region: object, settings: object
) -> None:
    data = sample_data(SHAPE, "uint16")
    make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS, crc32c=True, checksum=True)
    got = read_volume(tmp_path / "a.zarr", region=region, settings=settings)
    np.testing.assert_array_equal(got, zarr_read(tmp_path / "a.zarr", region))


def _victim(tmp_path: Path, layout: str) -> tuple[Path, str, int]:
    """An array whose entry 7 has one bit flipped in the middle of its zstd frame's blocks."""
    data = sample_data(SHAPE, "uint16")
    array = make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS, crc32c=True)
    plan = plan_read(array)
    victim = 7
    size = int(chunk_sizes(plan)[victim])
    _flip(Path(plan.files[plan.file_index[victim]]), int(plan.offsets[victim]) + size // 2)
    return tmp_path / "a.zarr", plan.key(victim), size


@pytest.mark.parametrize("layout", CRC_LAYOUTS)
@pytest.mark.parametrize("settings", [None, TINY])
def test_a_flipped_payload_bit_is_refused_before_decoding(
    tmp_path: Path, layout: str, settings: object
) -> None:
    path, key, _ = _victim(tmp_path, layout)
    with pytest.raises(ChunkDecodeError, match="crc32c checksum mismatch") as info:
        read_volume(path, settings=settings)
    assert info.value.key == key
    with pytest.raises(ValueError):  # zarr refuses it too
        zarr.open_array(path, mode="r")[...]


@pytest.mark.gpu
@pytest.mark.parametrize("layout", CRC_LAYOUTS)
def test_gpu_refuses_a_flipped_payload_bit_and_reads_again(tmp_path: Path, layout: str) -> None:
    """The case that made nvCOMP fault on an H200: the frame's headers are intact."""
    import cupy

    from linumpy.gpu import pinned_buffers

    path, key, _ = _victim(tmp_path, layout)
    for settings, staging in ((None, 0), (TINY, 4096)):
        with (
            mock.patch.object(pinned_buffers, "_FIXED_BYTES", staging),
            pytest.raises(ChunkDecodeError, match="crc32c") as info,
        ):
            read_volume(path, gpu=True, settings=settings)
        assert info.value.key == key
    good = tmp_path / "good.zarr"
    data = sample_data(SHAPE, "uint16", seed=3)
    make_array(good, layout, data, chunks=CHUNKS, crc32c=True, checksum=True)
    np.testing.assert_array_equal(cupy.asnumpy(read_volume(good, gpu=True)), data)


def test_strip_crc32c_many_names_the_first_bad_chunk() -> None:
    frames = [bytes([i]) * (100 + i) for i in range(6)]
    packed = bytearray(b"".join(f + crc32c(f).to_bytes(4, "little") for f in frames))
    sizes = np.array([len(f) + 4 for f in frames])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    buffer = np.frombuffer(bytes(packed), np.uint8)
    assert strip_crc32c_many(buffer, offsets, sizes, str).tolist() == [len(f) for f in frames]
    packed[int(offsets[4]) + 3] ^= 1
    packed[int(offsets[2]) + 3] ^= 1
    with pytest.raises(ChunkDecodeError, match="crc32c") as info:
        strip_crc32c_many(np.frombuffer(bytes(packed), np.uint8), offsets, sizes, str)
    assert info.value.key == "2"
    with pytest.raises(ChunkDecodeError, match="shorter than its 4-byte crc32c"):
        strip_crc32c(b"abc", "k")
    assert strip_crc32c(frames[0] + crc32c(frames[0]).to_bytes(4, "little"), "k") == frames[0]


@pytest.mark.parametrize("layout", CRC_LAYOUTS)
def test_the_run_loop_strips_and_checks_crc32c(tmp_path: Path, layout: str) -> None:
    """Through run() (the GPU reader's loop), on the CPU back end: chunk files sized as they are
    read and packed, sharded chunks sized by their index; a flipped bit named."""
    from linumpy.io.engine.backend import GroupBudget
    from linumpy.io.engine.cpu import CpuBackend
    from linumpy.io.engine.run import run

    class SmallGroups(CpuBackend):
        def budget(self, sizes: np.ndarray) -> GroupBudget:
            return GroupBudget(4000, 2**40, 3)

    def read(path: Path) -> np.ndarray:
        plan = plan_read(zarr.open_array(path, mode="r"))
        backend = SmallGroups(plan, threads=3)
        try:
            run(plan, backend, reader="pread", threads=3)
        finally:
            backend.close()
        return backend.out

    data = sample_data(SHAPE, "uint16")
    data[:8] = 0  # chunks never written
    make_array(tmp_path / "good.zarr", layout, data, chunks=CHUNKS, crc32c=True)
    np.testing.assert_array_equal(read(tmp_path / "good.zarr"), data)
    path, key, _ = _victim(tmp_path, layout)
    with pytest.raises(ChunkDecodeError, match="crc32c checksum mismatch") as info:
        read(path)
    assert info.value.key == key


def test_google_crc32c_fallback_takes_every_buffer_the_readers_pass() -> None:
    from crc32c import crc32c as reference

    raw = bytes(range(256)) * 300
    buffers = [raw, bytearray(raw), memoryview(bytearray(raw))[7:-3], np.frombuffer(raw, "<u2")]
    for data in buffers:
        assert google_crc32c_of(data) == reference(bytes(memoryview(data).cast("B")))


@pytest.mark.parametrize("layout", CRC_LAYOUTS)
def test_checksummed_reads_with_the_google_crc32c_fallback(
    tmp_path: Path, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an environment without the crc32c package checks with google_crc32c, on the same views
    monkeypatch.setattr(crc_module, "_CRC32C", google_crc32c_of)
    data = sample_data(SHAPE, "uint16")
    make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS, crc32c=True, checksum=True)
    np.testing.assert_array_equal(read_volume(tmp_path / "a.zarr"), data)
    path, key, _ = _victim(tmp_path / "b", layout)
    with pytest.raises(ChunkDecodeError, match="crc32c checksum mismatch") as info:
        read_volume(path)
    assert info.value.key == key
