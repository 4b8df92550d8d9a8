"""read_volume and the CPU batched reader against zarr's own reads."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr_layouts import CHUNKS, DTYPES, LAYOUTS, SHAPE, make_array, read_plan, sample_data

from linumpy.errors import (
    ChunkDecodeError,
    GPUUnavailableError,
    LinumpyError,
    UnsupportedLayoutError,
)
from linumpy.io import read_volume, save_omezarr
from linumpy.io.engine.plan import plan_read
from linumpy.io.engine.read import last_read_report

REGIONS = [
    None,
    (slice(3, 17), slice(5, 30), slice(0, 47)),
    (slice(8, 16), slice(16, 32), slice(16, 32)),  # exactly one chunk
    (slice(20, 21), slice(33, 34), slice(46, 47)),  # one element in the last edge chunk
    (slice(5, 5),),  # empty
    (slice(-4, None), slice(None, -10)),
]


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    assert type(actual) is np.ndarray
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert actual.tobytes() == expected.tobytes()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_zarr_on_every_layout_and_dtype(tmp_path: Path, layout: str, dtype: str) -> None:
    array = make_array(tmp_path / "a.zarr", layout, sample_data(SHAPE, dtype), chunks=CHUNKS)
    for region in REGIONS:
        expected = zarr.open_array(tmp_path / "a.zarr", mode="r")[tuple(region) if region else ...]
        assert_same(read_volume(tmp_path / "a.zarr", region=region), expected)
    assert plan_read(array).stored.any()  # the batched path was taken, not a fallback


@pytest.mark.parametrize("layout", LAYOUTS)
def test_missing_chunks_read_as_fill_value(tmp_path: Path, layout: str) -> None:
    data = sample_data(SHAPE, "uint16")
    data[:8] = 7  # a whole slab of chunks equal to the fill value: never written
    data[16:, 16:32] = 7
    make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS, fill_value=7)
    files = sum(len(f) for _, _, f in os.walk(tmp_path / "a.zarr"))
    expected_chunks = np.prod([-(-s // c) for s, c in zip(SHAPE, CHUNKS)])
    if layout != "v3-sharded":
        assert files - 1 < expected_chunks  # some chunk files are really missing
    assert_same(read_volume(tmp_path / "a.zarr"), data)
    region = (slice(0, 9), slice(10, 20))
    assert_same(read_volume(tmp_path / "a.zarr", region=region), data[region])


def test_fill_value_of_an_array_never_written(tmp_path: Path) -> None:
    zarr.create_array(
        tmp_path / "a.zarr",
        shape=(5, 6),
        chunks=(2, 4),
        dtype="complex64",
        fill_value=1 + 2j,
        compressors=zarr.codecs.ZstdCodec(),
    )
    assert_same(read_volume(tmp_path / "a.zarr"), np.full((5, 6), 1 + 2j, np.complex64))


def test_v2_fortran_order_and_big_endian(tmp_path: Path) -> None:
    data = sample_data(SHAPE, "uint16").astype(">u2")
    make_array(tmp_path / "a.zarr", "v2", data, chunks=CHUNKS, order="F")
    expected = zarr.open_array(tmp_path / "a.zarr", mode="r")[...]
    assert_same(read_volume(tmp_path / "a.zarr"), expected)


def test_v3_big_endian(tmp_path: Path) -> None:
    data = sample_data(SHAPE, "float32")
    zarr.create_array(
        tmp_path / "a.zarr",
        shape=SHAPE,
        chunks=CHUNKS,
        dtype="float32",
        serializer=zarr.codecs.BytesCodec(endian="big"),
        compressors=zarr.codecs.ZstdCodec(),
    )[...] = data
    assert_same(read_volume(tmp_path / "a.zarr"), data)


def test_checksummed_chunks(tmp_path: Path) -> None:
    data = sample_data(SHAPE, "float32")
    make_array(tmp_path / "a.zarr", "v3", data, chunks=CHUNKS, checksum=True)
    assert_same(read_volume(tmp_path / "a.zarr"), data)


def test_direct_decode_into_contiguous_slabs(tmp_path: Path) -> None:
    data = sample_data((12, 10, 9), "uint16")
    make_array(tmp_path / "a.zarr", "v3", data, chunks=(4, 10, 9))
    plan = plan_read(zarr.open_array(tmp_path / "a.zarr", mode="r"))
    out = np.full(data.shape, 12345, np.uint16)
    read_plan(plan, out=out, threads=2)
    assert_same(out, data)


def test_ome_zarr_levels(tmp_path: Path) -> None:
    data = sample_data((16, 32, 32), "uint16")
    save_omezarr(
        data, tmp_path / "img.ome.zarr", voxel_size=(1, 1, 1), chunks=(8, 8, 8), n_levels=3
    )
    assert_same(read_volume(tmp_path / "img.ome.zarr"), data)
    level2 = zarr.open_array(tmp_path / "img.ome.zarr" / "2", mode="r")[...]
    assert_same(read_volume(tmp_path / "img.ome.zarr", level=2), level2)


def test_other_codecs_fall_back_to_zarr(tmp_path: Path) -> None:
    data = sample_data(SHAPE, "uint16")
    array = zarr.create_array(
        tmp_path / "a.zarr",
        shape=SHAPE,
        chunks=CHUNKS,
        dtype="uint16",
        compressors=zarr.codecs.BloscCodec(cname="lz4"),
    )
    array[...] = data
    with pytest.raises(UnsupportedLayoutError, match="not bytes\\+zstd"):
        plan_read(array)
    assert_same(read_volume(tmp_path / "a.zarr", region=(slice(2, 9),)), data[2:9])
    report = last_read_report("cpu")
    assert report is not None and report.path == "zarr" and report.backend == "cpu"
    assert "not bytes+zstd" in report.reason and report.output_bytes == data[2:9].nbytes


@pytest.mark.parametrize("layout", ["v3", "v3-sharded"])
def test_cpu_reads_report_their_phases(tmp_path: Path, layout: str) -> None:
    """A CPU read leaves the report a GPU read leaves: counts, bytes and phase times."""
    data = sample_data(SHAPE, "uint16")
    data[:8] = 0  # chunks not stored
    make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS)
    region = (slice(3, 17), slice(5, 30))
    assert_same(read_volume(tmp_path / "a.zarr", region=region), data[region])
    report = last_read_report("cpu")
    plan = plan_read(zarr.open_array(tmp_path / "a.zarr", mode="r"), region)
    assert report is not None and (report.path, report.backend, report.reader) == (
        "fast",
        "cpu",
        "pread",
    )
    assert report.n_reads + report.n_fill == plan.n_entries and report.n_fill > 0
    assert report.output_bytes == data[region].nbytes and report.compressed_bytes > 0
    assert {"plan", "allocate", "pipeline"} <= report.phases.keys()
    assert report.seconds >= report.phases["pipeline"] >= 0
    assert last_read_report("gpu") is None or last_read_report("gpu").backend == "gpu"


def corrupt(path: Path, how: str) -> None:
    raw = path.read_bytes()
    if how == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif how == "garbage":
        path.write_bytes(os.urandom(len(raw)))
    elif how == "empty":
        path.write_bytes(b"")
    else:  # a frame declaring another size
        path.write_bytes(raw + raw)


@pytest.mark.parametrize("how", ["truncate", "garbage", "empty", "two-frames"])
def test_corrupt_chunk_raises_naming_it(tmp_path: Path, how: str) -> None:
    make_array(tmp_path / "a.zarr", "v3", sample_data(SHAPE, "uint16"), chunks=CHUNKS)
    chunk = tmp_path / "a.zarr" / "c" / "1" / "1" / "2"
    corrupt(chunk, how)
    with pytest.raises(ChunkDecodeError) as info:
        read_volume(tmp_path / "a.zarr")
    assert info.value.key == str(chunk)
    # chunks that are fine still read, before and after
    good = (slice(0, 8), slice(0, 16))
    assert read_volume(tmp_path / "a.zarr", region=good).shape == (8, 16, 47)


def test_corrupt_inner_chunk_of_a_shard(tmp_path: Path) -> None:
    make_array(tmp_path / "a.zarr", "v3-sharded", sample_data(SHAPE, "uint16"), chunks=CHUNKS)
    shard = tmp_path / "a.zarr" / "c" / "0" / "0" / "0"
    raw = bytearray(shard.read_bytes())
    raw[10:20] = b"\xff" * 10  # inside the first inner chunk's frame header/blocks
    shard.write_bytes(bytes(raw))
    with pytest.raises(ChunkDecodeError, match="inner chunk"):
        read_volume(tmp_path / "a.zarr")


def test_corrupt_shard_index(tmp_path: Path) -> None:
    make_array(tmp_path / "a.zarr", "v3-sharded", sample_data(SHAPE, "uint16"), chunks=CHUNKS)
    shard = tmp_path / "a.zarr" / "c" / "0" / "0" / "0"
    raw = bytearray(shard.read_bytes())
    raw[-10] ^= 0xFF
    shard.write_bytes(bytes(raw))
    with pytest.raises(ChunkDecodeError, match="crc32c"):
        read_volume(tmp_path / "a.zarr")


def test_errors_name_path_level_and_region(tmp_path: Path) -> None:
    with pytest.raises(LinumpyError, match="nothere.zarr: no such file"):
        read_volume(tmp_path / "nothere.zarr")
    (tmp_path / "plain").mkdir()
    with pytest.raises(LinumpyError, match="plain: not a zarr"):
        read_volume(tmp_path / "plain")
    data = sample_data((8, 8, 8), "uint8")
    save_omezarr(data, tmp_path / "img.ome.zarr", voxel_size=(1, 1, 1), n_levels=2)
    with pytest.raises(LinumpyError, match="level 2 out of range.*levels 0 to 1"):
        read_volume(tmp_path / "img.ome.zarr", level=2)
    with pytest.raises(LinumpyError, match="out of bounds on axis 1"):
        read_volume(tmp_path / "img.ome.zarr", region=(slice(0, 2), slice(0, 9)))
    with pytest.raises(LinumpyError, match="step 1"):
        read_volume(tmp_path / "img.ome.zarr", region=(slice(0, 8, 2),))
    with pytest.raises(LinumpyError, match="4 dimensions"):
        read_volume(tmp_path / "img.ome.zarr", region=(slice(None),) * 4)
    zarr.create_array(tmp_path / "s.zarr", shape=(3,), dtype=str)
    with pytest.raises(LinumpyError, match="s.zarr.*dtype .* is not supported"):
        read_volume(tmp_path / "s.zarr")


def test_reading_writes_nothing(tmp_path: Path) -> None:
    make_array(tmp_path / "a.zarr", "v3-sharded", sample_data(SHAPE, "uint16"), chunks=CHUNKS)
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    read_volume(tmp_path / "a.zarr")
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before


def test_gpu_without_cupy_says_what_is_missing(tmp_path: Path) -> None:
    pytest.importorskip("linumpy.gpu.zarr_io")
    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("cupy is installed here")
    make_array(tmp_path / "a.zarr", "v3", sample_data((4, 4), "uint8"), chunks=(2, 2))
    with pytest.raises(GPUUnavailableError, match="cupy"):
        read_volume(tmp_path / "a.zarr", gpu=True)


@pytest.mark.parametrize("layout", ["v3", "v2"])
def test_zero_dimensional_array(tmp_path: Path, layout: str) -> None:
    make_array(tmp_path / "s.zarr", layout, np.array(41, np.uint16), chunks=())
    assert_same(read_volume(tmp_path / "s.zarr"), np.array(41, np.uint16))
