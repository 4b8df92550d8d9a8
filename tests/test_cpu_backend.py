"""The CPU back end's own paths: libzstd through ctypes, in-place decodes, batches, fallbacks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from linumpy.errors import ChunkDecodeError
from linumpy.io.engine import cpu
from linumpy.io.engine.codecs import zstd
from linumpy.io.engine.codecs.zstd import libzstd
from linumpy.io.engine.cpu import CpuBackend
from linumpy.io.engine.cpu_layout import batches, tapering_batches
from linumpy.io.engine.fetch import chunk_sizes
from linumpy.io.engine.plan import plan_read
from tests.zarr_layouts import (
    LAYOUTS,
    REGIONS,
    make_array,
    read_plan,
    sample_data,
    zarr_read,
    zstd_frame,
)

pytestmark = pytest.mark.skipif(not libzstd.AVAILABLE, reason="libzstd not loadable")


def test_decode_into_decodes_exactly_the_expected_size() -> None:
    data = sample_data((40, 50), "uint16")
    frame = zstd_frame(data, checksum=True)
    out = np.zeros(data.nbytes, np.uint8)
    assert libzstd.decode_into(frame, len(frame), out.ctypes.data, out.nbytes)
    assert out.tobytes() == data.tobytes()
    big = np.zeros(data.nbytes + 2, np.uint8)
    assert not libzstd.decode_into(frame, len(frame), big.ctypes.data, big.nbytes)  # too few
    assert not libzstd.decode_into(frame, len(frame), out.ctypes.data, out.nbytes - 2)  # too many
    damaged = bytearray(frame)
    damaged[-1] ^= 0xFF  # the stored content checksum
    assert not libzstd.decode_into(bytes(damaged), len(frame), out.ctypes.data, out.nbytes)
    assert not libzstd.decode_into(frame[:-5], len(frame) - 5, out.ctypes.data, out.nbytes)
    assert not libzstd.decode_into(b"", 0, out.ctypes.data, out.nbytes)


def test_decode_into_takes_an_address_and_several_frames() -> None:
    data = sample_data((64,), "uint8")
    frames = zstd_frame(data[:30]) + zstd_frame(data[30:])
    source = np.frombuffer(frames, np.uint8).copy()
    out = np.zeros(64, np.uint8)
    assert libzstd.decode_into(source.ctypes.data, source.nbytes, out.ctypes.data, 64)
    assert out.tobytes() == data.tobytes()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("available", [True, False])
def test_read_plan_matches_zarr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str, threads: int, available: bool
) -> None:
    monkeypatch.setattr(zstd, "FAST_DECODE", available)  # False: numcodecs for every chunk
    data = sample_data((21, 34, 47), "uint16")
    data[:8] = 0  # chunks not stored
    make_array(tmp_path / "a.zarr", layout, data, chunks=(8, 16, 16))
    array = zarr.open_array(tmp_path / "a.zarr", mode="r")
    for region in REGIONS:
        plan = plan_read(array, region)
        out, stats = read_plan(plan, threads=threads)
        assert out.tobytes() == zarr_read(tmp_path / "a.zarr", region).tobytes()
        if out.size:  # an empty region reads nothing
            assert stats.n_reads + stats.n_fill == plan.n_entries


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [">u2", "<f4"])
def test_v2_orders_and_byte_orders_match_zarr(tmp_path: Path, order: str, dtype: str) -> None:
    data = sample_data((17, 20, 24), dtype)
    make_array(tmp_path / "a.zarr", "v2", data, chunks=(8, 8, 24), order=order)
    array = zarr.open_array(tmp_path / "a.zarr", mode="r")
    for region in (None, (slice(3, 17), slice(0, 20))):
        out, _ = read_plan(plan_read(array, region), threads=2)
        expected = zarr_read(tmp_path / "a.zarr", region)
        assert out.dtype == expected.dtype and np.array_equal(out, expected)


def test_chunks_spanning_the_trailing_axes_are_decoded_in_place(tmp_path: Path) -> None:
    data = sample_data((24, 16, 32), "uint16") + 1
    array = make_array(tmp_path / "a.zarr", "v3", data, chunks=(4, 16, 32))
    plan = plan_read(array)
    backend = CpuBackend(plan, threads=1)
    try:
        offsets = backend._direct
        assert offsets == [k * 4 * 16 * 32 * 2 for k in range(6)]
        stats = backend.read_files()
    finally:
        backend.close()
    assert stats.n_reads == 6 and backend.out.tobytes() == data.tobytes()
    plan = plan_read(array, (slice(5, 6), slice(2, 3)))
    assert CpuBackend(plan, threads=1)._direct == [-2]  # partly outside the region: copied
    # Leading axes of length 1 do not break a block; a narrower middle axis does.
    flat = make_array(tmp_path / "b.zarr", "v3", data, chunks=(1, 8, 32))
    assert CpuBackend(plan_read(flat), threads=1)._direct[:3] == [0, 8 * 32 * 2, 16 * 32 * 2]
    assert read_plan(plan_read(flat), threads=2)[0].tobytes() == data.tobytes()
    narrow = make_array(tmp_path / "n.zarr", "v3", data, chunks=(4, 8, 32))
    assert set(CpuBackend(plan_read(narrow), threads=1)._direct) == {-1}
    cubes = make_array(tmp_path / "c.zarr", "v3", data, chunks=(4, 8, 16))
    assert set(CpuBackend(plan_read(cubes), threads=1)._direct) == {-1}


class _Scattered(CpuBackend):
    """Every chunk through _scatter, as a back end with a device output reads (counted)."""

    in_place = False

    def _scatter(self, entry: int, chunk: np.ndarray, direct: int) -> None:
        self.scattered += 1
        super()._scatter(entry, chunk, direct)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_without_in_place_decodes_every_chunk_is_scattered(tmp_path: Path, layout: str) -> None:
    data = sample_data((24, 16, 32), "uint16") + 1
    make_array(tmp_path / "a.zarr", layout, data, chunks=(4, 16, 32))  # contiguous chunks
    array = zarr.open_array(tmp_path / "a.zarr", mode="r")
    for region in (None, (slice(5, 19), slice(2, 15))):
        plan = plan_read(array, region)
        backend = _Scattered(plan, threads=2, out=np.empty(plan.shape, plan.dtype))
        backend.scattered = 0
        try:
            stats = backend.read_files()
        finally:
            backend.close()
        assert backend.out.tobytes() == zarr_read(tmp_path / "a.zarr", region).tobytes()
        assert backend.scattered == stats.n_reads == plan.n_entries


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("damage", ["flip", "checksum", "truncate"])
def test_corrupt_chunks_are_named(tmp_path: Path, layout: str, damage: str) -> None:
    data = sample_data((21, 34, 47), "uint16") + 1
    array = make_array(tmp_path / "a.zarr", layout, data, chunks=(8, 16, 16), checksum=True)
    plan = plan_read(array)
    victim = 13
    path = Path(plan.files[plan.file_index[victim]])
    start = int(plan.offsets[victim])
    raw = bytearray(path.read_bytes())
    size = int(chunk_sizes(plan)[victim]) if layout == "v3-sharded" else len(raw)
    if damage == "flip":
        raw[start + size // 2] ^= 0x5A
    elif damage == "checksum":
        raw[start + size - 1] ^= 0xFF
    else:
        if layout == "v3-sharded":
            pytest.skip("a shard's chunk cannot be truncated without rewriting its index")
        raw = raw[: size - 7]
    path.write_bytes(bytes(raw))
    for threads in (1, 3):
        with pytest.raises(ChunkDecodeError) as info:
            read_plan(plan, threads=threads)
        assert info.value.key == plan.key(victim)


@pytest.mark.parametrize("threads", [1, 3])
def test_shards_are_read_by_the_threads_as_zarr_reads_them(tmp_path: Path, threads: int) -> None:
    # Each thread reads its inner chunks from the shards it holds open (no run loop, no groups);
    # checksummed frames and the crc32c codec; chunks not stored; partial chunks; regions.
    data = sample_data((21, 34, 47), "uint16")
    data[:8] = 0  # inner chunks not stored
    make_array(
        tmp_path / "a.zarr", "v3-sharded", data, chunks=(8, 8, 16), shards=(8, 16, 32),
        checksum=True, crc32c=True,
    )  # fmt: skip
    array = zarr.open_array(tmp_path / "a.zarr", mode="r")
    for region in REGIONS:
        plan = plan_read(array, region)
        out, stats = read_plan(plan, threads=threads)
        assert out.tobytes() == zarr_read(tmp_path / "a.zarr", region).tobytes()
        assert stats.n_groups == 0  # read by the threads, not in groups
        if out.size:
            assert stats.n_reads + stats.n_fill == plan.n_entries
        if region is None:
            assert stats.n_fill > 0


@pytest.mark.parametrize("layout", ["v3", "v3-sharded"])
def test_a_bad_crc32c_names_its_chunk(tmp_path: Path, layout: str) -> None:
    data = sample_data((21, 34, 47), "uint16") + 1
    array = make_array(tmp_path / "a.zarr", layout, data, chunks=(8, 16, 16), crc32c=True)
    plan = plan_read(array)
    victim = 13
    path = Path(plan.files[plan.file_index[victim]])
    raw = bytearray(path.read_bytes())
    end = int(plan.offsets[victim]) + int(chunk_sizes(plan)[victim])
    raw[end - 1 if layout == "v3-sharded" else -1] ^= 0x01  # the chunk's crc32c
    path.write_bytes(bytes(raw))
    for threads in (1, 3):
        with pytest.raises(ChunkDecodeError, match="crc32c") as info:
            read_plan(plan, threads=threads)
        assert info.value.key == plan.key(victim)


def test_a_shard_cut_short_or_gone_after_planning_names_a_chunk(tmp_path: Path) -> None:
    data = sample_data((16, 32, 32), "uint16") + 1
    array = make_array(
        tmp_path / "a.zarr", "v3-sharded", data, chunks=(8, 8, 8), shards=(16, 16, 16)
    )
    plan = plan_read(array)
    in_first = np.flatnonzero(plan.file_index == 0)
    victim = int(in_first[np.argmax(plan.offsets[in_first])])  # stored last in its shard
    path = Path(plan.files[0])
    raw = path.read_bytes()
    path.write_bytes(raw[: int(plan.offsets[victim]) + int(plan.nbytes[victim]) - 7])
    for threads in (1, 3):
        with pytest.raises(ChunkDecodeError, match="file ends") as info:
            read_plan(plan, threads=threads)
        assert info.value.key == plan.key(victim)
    path.unlink()
    with pytest.raises(ChunkDecodeError, match="vanished") as info:
        read_plan(plan, threads=3)
    assert info.value.key in {plan.key(int(i)) for i in in_first}
    path.mkdir()
    with pytest.raises(ChunkDecodeError, match="directory") as info:
        read_plan(plan, threads=1)
    assert info.value.key == plan.key(int(in_first[0]))


def test_a_chunk_of_two_frames_reads_as_zarr_reads_it(tmp_path: Path) -> None:
    # Valid zstd that check_frames leaves to libzstd: written by hand into a v2 chunk file.
    data = sample_data((8, 8), "uint16") + 1
    array = make_array(tmp_path / "a.zarr", "v2", data, chunks=(4, 8))
    flat = data[:4].tobytes()
    chunk = Path(tmp_path / "a.zarr" / "0.0")
    chunk.write_bytes(
        zstd_frame(np.frombuffer(flat[:20], np.uint8))
        + zstd_frame(np.frombuffer(flat[20:], np.uint8))
    )
    out, _ = read_plan(plan_read(array), threads=2)
    assert out.tobytes() == data.tobytes() == zarr_read(tmp_path / "a.zarr", None).tobytes()


def test_batches_cover_every_index_once() -> None:
    for n in (0, 1, 7, 100, 1001):
        for threads in (1, 2, 16):
            even = batches(n, threads)
            assert [i for a, b in even for i in range(a, b)] == list(range(n))
            assert len(even) <= 4 * threads
            tapering = tapering_batches(n, threads)
            assert [i for a, b in tapering for i in range(a, b)] == list(range(n))
            sizes = [b - a for a, b in tapering]
            assert sizes == sorted(sizes, reverse=True)  # the large first
            assert not sizes or (sizes[0] == even[0][1] and sizes[-1] == 1)
            if n >= 8 * threads:  # the first half as in even batches, then smaller
                assert sum(size == sizes[0] for size in sizes) >= 2 * threads - 1


def test_groups_hold_about_four_chunks_per_thread(tmp_path: Path) -> None:
    array = make_array(tmp_path / "a.zarr", "v3", np.ones((8, 8), "u2"), chunks=(4, 4))
    plan = plan_read(array)
    sizes = np.full(10, 10**6)
    assert CpuBackend(plan, threads=2).budget(sizes).max_compressed == cpu.MIN_GROUP_BYTES
    assert CpuBackend(plan, threads=4).budget(sizes).max_compressed == 16 * 10**6
    assert CpuBackend(plan, threads=64).budget(sizes).max_compressed == cpu.GROUP_BYTES


def test_decode_entry_takes_any_bytes_like(tmp_path: Path) -> None:
    data = sample_data((4, 8), "uint16") + 1
    plan = plan_read(make_array(tmp_path / "a.zarr", "v3", data, chunks=(2, 8)))
    frame = zstd_frame(data[2:])
    backend = CpuBackend(plan, threads=1)
    try:
        for kind in (bytes, bytearray, memoryview):
            backend.out[...] = 0
            backend.decode_entry(1, kind(frame), checked=False)
            assert backend.out[2:].tobytes() == data[2:].tobytes(), kind
        backend.decode_entry(0, np.frombuffer(zstd_frame(data[:2]), np.uint8), checked=False)
        assert backend.out.tobytes() == data.tobytes()
        with pytest.raises(ChunkDecodeError) as info:
            backend.decode_entry(0, bytearray(), checked=False)
        assert info.value.key == plan.key(0)
    finally:
        backend.close()


@pytest.mark.parametrize(
    ("dtype", "order", "rows"), [("<u2", "C", "V16"), (">u2", "C", "V16"), ("<u2", "F", None)]
)
def test_rows_are_copied_as_opaque_items_only_without_conversion(
    tmp_path: Path, dtype: str, order: str, rows: str | None
) -> None:
    data = sample_data((12, 10, 20), dtype)
    array = make_array(tmp_path / "a.zarr", "v2", data, chunks=(4, 4, 8), order=order)
    for region in (None, (slice(1, 11), slice(3, 9), slice(2, 19))):
        plan = plan_read(array, region)
        backend = CpuBackend(plan, threads=2)
        backend.close()
        assert backend._rows == (np.dtype(rows) if rows else None)
        out, _ = read_plan(plan, threads=2)
        assert np.array_equal(out, zarr_read(tmp_path / "a.zarr", region))


def test_byte_swapped_chunks_are_copied_with_conversion(tmp_path: Path) -> None:
    data = sample_data((8, 12), "uint16") + 1
    path = str(tmp_path / "a.zarr")
    array = zarr.create_array(
        path,
        shape=data.shape,
        chunks=(4, 4),
        dtype="u2",
        serializer=zarr.codecs.BytesCodec(endian="big"),
        compressors=zarr.codecs.ZstdCodec(),
    )
    array[...] = data
    plan = plan_read(array)
    backend = CpuBackend(plan, threads=1)
    backend.close()
    assert plan.stored_dtype != plan.dtype and backend._rows is None
    out, _ = read_plan(plan, threads=2)
    assert out.dtype == data.dtype and np.array_equal(out, data)


@pytest.mark.parametrize("shards", [None, (8, 16, 32)], ids=["chunk-files", "sharded"])
@pytest.mark.parametrize("threads", [1, 3])
def test_runs_of_chunks_along_the_last_axis_equal_zarr(
    tmp_path: Path, shards: tuple[int, ...] | None, threads: int, monkeypatch
) -> None:
    # Whole chunks side by side along x are decoded into a run and copied in one assignment;
    # runs end at a row's end, at a partial or missing chunk, at a batch's end and when full.
    monkeypatch.setattr(cpu, "RUN_BYTES", 3 * 4 * 8 * 8 * 2)  # runs of at most 3 chunks
    data = sample_data((16, 24, 80), "uint16")
    array = zarr.create_array(
        tmp_path / "a.zarr", shape=data.shape, chunks=(4, 8, 8), shards=shards, dtype="uint16"
    )
    array[...] = data
    if shards is None:
        (tmp_path / "a.zarr" / "c" / "1" / "1" / "4").unlink()  # a hole in a row: fill value
    backend = CpuBackend(plan_read(array), threads=1)
    assert backend._run_max == 3 and sum(backend._joins) > 100  # runs are taken
    backend.close()
    for region in (None, (slice(2, 14), slice(3, 21), slice(5, 75)), (slice(4, 8), slice(0, 8))):
        result, _ = read_plan(plan_read(array, region), threads=threads)
        np.testing.assert_array_equal(result, zarr_read(tmp_path / "a.zarr", region))


def test_a_new_output_faulted_in_first_holds_the_read(tmp_path: Path, monkeypatch) -> None:
    # The new output is written (zeros) before decoding: fill values and partial chunks after.
    monkeypatch.setattr(cpu, "PREFAULT_BYTES", 1)
    data = sample_data((8, 20, 24), "uint16")
    array = zarr.create_array(
        tmp_path / "a.zarr", shape=data.shape, chunks=(4, 8, 8), dtype="u2", fill_value=7
    )
    array[...] = data
    (tmp_path / "a.zarr" / "c" / "0" / "0" / "0").unlink()
    for region in (None, (slice(1, 7), slice(3, 19), slice(0, 23))):
        result, _ = read_plan(plan_read(array, region), threads=3)
        np.testing.assert_array_equal(result, zarr_read(tmp_path / "a.zarr", region))
