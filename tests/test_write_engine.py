"""The write engine (linumpy.io.engine.write): files zarr reads back exactly, and equal to zarr's.

Every layout the engine writes is written by the engine and by zarr from the same data; the
engine's array must read back exactly (zarr, numcodecs, read_volume) and hold the same files with
the same bytes. `gpu` tests run nvCOMP and check the result with zarr on the CPU.
"""

from __future__ import annotations

import os
from pathlib import Path

import google_crc32c
import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, ShardingCodec

from linumpy import settings
from linumpy.errors import UnsupportedLayoutError
from linumpy.gpu.encode import GPU_ENCODER, _finish_file
from linumpy.io import OmeZarrWriter, read_volume, save_omezarr
from linumpy.io.block_write import device_encoder
from linumpy.io.engine import write as write_module
from linumpy.io.engine.array_layout import parse_layout
from linumpy.io.engine.write import write_array
from linumpy.io.engine.write_files import empty_rows, write_file
from linumpy.io.engine.write_plan import gather_chunks, group_boxes, group_rows, plan_write

SHAPE = (37, 50, 21)  # edge chunks on every axis
CHUNKS = (8, 16, 8)
SHARDS = (16, 32, 16)

ZSTD = zarr.codecs.ZstdCodec(level=3, checksum=False)
ZSTD_SUM = zarr.codecs.ZstdCodec(level=3, checksum=True)
CRC = zarr.codecs.Crc32cCodec()

LAYOUTS = {
    "chunks": dict(compressors=ZSTD),
    "chunks-crc32c": dict(compressors=[ZSTD_SUM, CRC]),
    "chunks-dot": dict(
        compressors=ZSTD_SUM, chunk_key_encoding={"name": "default", "separator": "."}
    ),
    "sharded": dict(compressors=ZSTD, shards=SHARDS),
    "sharded-crc32c": dict(compressors=[ZSTD_SUM, CRC], shards=SHARDS),
    "sharded-index-start": dict(
        codecs=[
            zarr.codecs.ShardingCodec(
                chunk_shape=CHUNKS,
                codecs=[zarr.codecs.BytesCodec(), ZSTD_SUM, CRC],
                index_location="start",
            )
        ]
    ),
}


def create(path: Path, layout: str, dtype: str = "uint16", fill_value: object = 0) -> zarr.Array:
    kwargs = dict(LAYOUTS[layout])
    if "codecs" in kwargs:  # a hand-made sharding codec (index at the start)
        kwargs = dict(chunks=SHARDS, serializer=kwargs["codecs"][0], compressors=None)
    kwargs.setdefault("chunks", CHUNKS)
    return zarr.create_array(str(path), shape=SHAPE, dtype=dtype, fill_value=fill_value, **kwargs)


def sample(dtype: str = "uint16", fill: float = 0) -> np.ndarray:
    rng = np.random.default_rng(7)
    data = rng.integers(0, 60, SHAPE).astype(dtype)
    data[:16] = fill  # whole chunks and shards of fill value: not stored
    data[20:24, :16, :8] = fill  # one chunk of fill value inside a stored shard
    return data


def files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and p.name != "zarr.json"
    }


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_layouts_read_back_and_match_zarr(tmp_path: Path, layout: str) -> None:
    data = sample()
    ours, theirs = create(tmp_path / "e.zarr", layout), create(tmp_path / "z.zarr", layout)
    report = write_array(ours, data)
    theirs[...] = data
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "e.zarr"))[...], data)
    np.testing.assert_array_equal(read_volume(tmp_path / "e.zarr"), data)
    assert report.backend == "cpu" and report.chunks_empty > 0
    ours_files, zarr_files = files(tmp_path / "e.zarr"), files(tmp_path / "z.zarr")
    assert sorted(ours_files) == sorted(zarr_files)  # all-fill chunk files left out, like zarr
    assert ours_files == zarr_files  # byte for byte
    assert report.files_written == len(ours_files)
    assert report.stored_bytes == sum(len(b) for b in ours_files.values())


@pytest.mark.parametrize("dtype,fill", [("float32", np.nan), ("float64", 0.0), ("int8", -3)])
def test_dtypes_and_fill_values(tmp_path: Path, dtype: str, fill: float) -> None:
    data = sample(dtype, fill)
    if dtype == "float64":
        data[24:32, :16, :8] = -0.0  # stored by zarr: not bit-equal to the fill value
    ours = create(tmp_path / "e.zarr", "sharded-crc32c", dtype, fill)
    theirs = create(tmp_path / "z.zarr", "sharded-crc32c", dtype, fill)
    write_array(ours, data)
    theirs[...] = data
    back = zarr.open_array(str(tmp_path / "e.zarr"))[...]
    np.testing.assert_array_equal(back, data)
    assert np.array_equal(np.signbit(back), np.signbit(data))
    assert files(tmp_path / "e.zarr") == files(tmp_path / "z.zarr")


def test_numcodecs_decodes_a_chunk_file(tmp_path: Path) -> None:
    data = sample()
    write_array(create(tmp_path / "e.zarr", "chunks-crc32c"), data)
    raw = (tmp_path / "e.zarr" / "c" / "2" / "1" / "0").read_bytes()
    frame, crc = raw[:-4], raw[-4:]
    assert int.from_bytes(crc, "little") == google_crc32c.value(frame)
    chunk = np.frombuffer(numcodecs.Zstd().decode(frame), "<u2").reshape(CHUNKS)
    np.testing.assert_array_equal(chunk, data[16:24, 16:32, 0:8])


@pytest.mark.parametrize("layout", ["chunks-crc32c", "sharded-crc32c", "sharded-index-start"])
def test_tensorstore_reads_it(tmp_path: Path, layout: str) -> None:
    ts = pytest.importorskip("tensorstore")
    data = sample()
    write_array(create(tmp_path / "e.zarr", layout), data)
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "e.zarr")}}
    np.testing.assert_array_equal(ts.open(spec, read=True).result().read().result(), data)


def test_crc32c_is_verified_by_zarr(tmp_path: Path) -> None:
    write_array(create(tmp_path / "e.zarr", "sharded-crc32c"), sample())
    shard = tmp_path / "e.zarr" / "c" / "1" / "0" / "0"
    raw = bytearray(shard.read_bytes())
    raw[40] ^= 0x01  # inside the first inner chunk's frame
    shard.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="checksum"):
        zarr.open_array(str(tmp_path / "e.zarr"))[...]


def test_region_writes(tmp_path: Path) -> None:
    data = sample()
    array = create(tmp_path / "e.zarr", "sharded-crc32c")
    write_array(array, np.full(SHAPE, 5, np.uint16))
    write_array(array, data[16:], (slice(16, None),))  # up to the array's end
    write_array(array, data[:16, 32:], (slice(0, 16), slice(32, 50)))
    expected = np.full(SHAPE, 5, np.uint16)
    expected[16:] = data[16:]
    expected[:16, 32:] = data[:16, 32:]
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "e.zarr"))[...], expected)
    # the all-fill shards of the last region write were removed, as zarr removes them
    assert not (tmp_path / "e.zarr" / "c" / "0" / "1" / "0").exists()
    assert (tmp_path / "e.zarr" / "c" / "0" / "0" / "0").exists()


@pytest.mark.parametrize("region", [(slice(8, 16),), (slice(0, 16), slice(0, 40)), (slice(0, 20),)])
def test_unaligned_regions_are_left_to_zarr(tmp_path: Path, region) -> None:
    array = create(tmp_path / "e.zarr", "sharded")
    full = tuple(region) + (slice(None),) * (3 - len(region))
    block = np.zeros(np.zeros(SHAPE, np.uint8)[full].shape, np.uint16)
    with pytest.raises(UnsupportedLayoutError, match="not aligned"):
        write_array(array, block, region)


def test_unsupported_layouts(tmp_path: Path) -> None:
    data = np.zeros((4, 4), np.uint8)
    cases = [
        zarr.create_array(
            str(tmp_path / "blosc.zarr"),
            shape=(4, 4),
            dtype="u1",
            compressors=zarr.codecs.BloscCodec(),
        ),
        zarr.create_array(str(tmp_path / "v2.zarr"), shape=(4, 4), dtype="u1", zarr_format=2),
        zarr.create_array({}, shape=(4, 4), dtype="u1"),
        zarr.create_array(
            str(tmp_path / "be.zarr"),
            shape=(4, 4),
            dtype=">u2",
            serializer=zarr.codecs.BytesCodec(endian="big"),
            compressors=ZSTD,
        ),
    ]
    for array in cases:
        with pytest.raises(UnsupportedLayoutError):
            write_array(array, data.astype(array.dtype))
    with pytest.raises(UnsupportedLayoutError, match="shape"):
        write_array(create(tmp_path / "e.zarr", "chunks"), np.zeros((2, 2, 2), np.uint16))
    assert not any((tmp_path / "e.zarr").rglob("c"))


def test_write_file_writes_many_parts(tmp_path: Path) -> None:
    parts = [bytes([i % 256]) * (i % 7 + 1) for i in range(3000)]  # beyond IOV_MAX
    assert write_file(str(tmp_path / "f"), parts) == sum(map(len, parts))
    assert (tmp_path / "f").read_bytes() == b"".join(parts)


def test_empty_rows_like_zarr() -> None:
    rows = np.array([[1, 1], [1, 2]], np.int32)
    assert empty_rows(np, rows, 1).tolist() == [True, False]
    c = np.array([[0j, 0j], [complex(-0.0, 0), 0j]])
    assert empty_rows(np, c, 0).tolist() == [True, False]


def test_gather_chunks_pads_and_orders() -> None:
    data = np.arange(5 * 7, dtype=np.int16).reshape(5, 7)
    rows = gather_chunks(np, data, (2, 3), -1)
    assert rows.shape == (3 * 3, 6)
    padded = np.full((6, 9), -1, np.int16)
    padded[:5, :7] = data
    for r, (i, j) in enumerate(np.ndindex(3, 3)):
        np.testing.assert_array_equal(rows[r], padded[2 * i : 2 * i + 2, 3 * j : 3 * j + 3].ravel())


@pytest.mark.parametrize(
    "layout", ["chunks", "chunks-crc32c", "sharded", "sharded-crc32c", "sharded-index-start"]
)
@pytest.mark.parametrize("max_blocks", [1, 3, 1000])
def test_gpu_grouping_rehearsed_on_the_cpu(tmp_path: Path, layout: str, max_blocks: int) -> None:
    """The GPU back end's bookkeeping (groups, one gather per group, empty rows, rows to files,
    checksums patched into checksum-less frames, the file threads' work) with numpy and numcodecs
    in place of cupy, nvCOMP and the XXH64 kernel: the files must equal zarr's."""
    data = sample()
    ours, theirs = create(tmp_path / "e.zarr", layout), create(tmp_path / "z.zarr", layout)
    theirs[...] = data
    region = (slice(16, 37), slice(0, 50))
    theirs[region] = data[region]
    plan = plan_write(ours, region)
    write_module.make_directories(plan)
    plain = numcodecs.Zstd(level=3, checksum=False)  # nvCOMP writes no checksum...
    summed = numcodecs.Zstd(level=3, checksum=True)  # ...the XXH64 kernel gives it
    spare = 4 if plan.layout.checksum else 0
    n_inner = int(np.prod(plan.layout.chunks_per_block))
    written = set()
    for start, stop in group_boxes(plan, max_blocks):
        box, files_, row_file, row_inner = group_rows(plan, start, stop)
        rows = gather_chunks(np, data[box], plan.layout.chunk_shape, plan.layout.fill_value)
        keep = np.flatnonzero(~empty_rows(np, rows, plan.layout.fill_value))
        frames = {int(f): [None] * n_inner for f in files_}
        hashes: dict[int, dict[int, int]] = {int(f): {} for f in files_}
        for r in keep:
            row = np.ascontiguousarray(rows[r])
            frame = np.frombuffer(plain.encode(row) + b"\0" * spare, np.uint8).copy()
            f, j = int(row_file[r]), int(row_inner[r])
            frames[f][j] = frame
            hashes[f][j] = int.from_bytes(summed.encode(row)[-4:], "little")
        for f, parts in frames.items():
            empty = sum(p is None for p in parts)
            assert _finish_file(plan, f, parts, hashes[f], empty)[0] == (empty < n_inner)
            written.add(f)
    assert written == set(range(plan.n_blocks))
    write_array(ours, data[:16], (slice(0, 16),))
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "e.zarr"))[...], data)
    assert files(tmp_path / "e.zarr") == files(tmp_path / "z.zarr")


# -- the writer ---------------------------------------------------------------------------------


def test_writer_uses_the_engine_and_the_crc32c_chain(tmp_path: Path, monkeypatch) -> None:
    calls = []
    real = write_module.write_array

    def counted(*args, **kwargs):
        calls.append(args[2] if len(args) > 2 else kwargs.get("region"))
        return real(*args, **kwargs)

    import linumpy.io.block_write as block_write_module

    monkeypatch.setattr(block_write_module, "write_array", counted)
    data = sample()
    path = tmp_path / "img.ome.zarr"
    with OmeZarrWriter(
        path, SHAPE, data.dtype, voxel_size=(1, 1, 1), chunks=CHUNKS, shards=SHARDS, n_levels=2
    ) as writer:
        writer[:16] = data[:16]  # aligned: the engine
        writer[16:] = data[16:]  # to the end: the engine
        writer[3:5, 1] = 9  # not a region of slices: zarr
    data[3:5, 1] = 9
    assert len(calls) >= 2
    array = zarr.open_array(str(path / "0"))
    assert [type(c).__name__ for c in array.metadata.codecs[0].codecs] == [
        "BytesCodec",
        "ZstdCodec",
        "Crc32cCodec",
    ]
    np.testing.assert_array_equal(array[...], data)
    level1 = zarr.open_array(str(path / "1"))[...]
    assert level1.shape == (19, 25, 11)


def test_save_omezarr_round_trip_with_checksums_off(tmp_path: Path) -> None:
    data = sample("float32")
    save_omezarr(data, tmp_path / "a.ome.zarr", voxel_size=(1, 1, 1), chunks=CHUNKS, checksum=False)
    array = zarr.open_array(str(tmp_path / "a.ome.zarr" / "0"))
    assert [type(c).__name__ for c in array.compressors] == ["ZstdCodec"]
    np.testing.assert_array_equal(array[...], data)
    np.testing.assert_array_equal(read_volume(tmp_path / "a.ome.zarr"), data)


def test_gpu_encode_min_bytes_scales_with_io_threads() -> None:
    def threshold(threads: int) -> int:
        return write_module.gpu_encode_min_bytes(settings.resolve({"io_threads": threads}))

    assert threshold(16) == 32 * settings.MIB and threshold(2) == 16 * settings.MIB
    with write_module.encode_min_bytes(1):
        assert threshold(16) == 1
    assert threshold(2) == 16 * settings.MIB


# -- GPU ----------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_gpu_writes_what_zarr_reads_on_the_cpu(tmp_path: Path, layout: str) -> None:
    import cupy

    data = sample()
    ours, cpu = create(tmp_path / "g.zarr", layout), create(tmp_path / "c.zarr", layout)
    with write_module.encode_min_bytes(1):
        report = write_array(ours, cupy.asarray(data), encoder=GPU_ENCODER)
    assert report.backend == "gpu"
    write_array(cpu, data)
    back = zarr.open_array(str(tmp_path / "g.zarr"))[...]  # libzstd verifies checksums, crc32c
    np.testing.assert_array_equal(back, data)
    np.testing.assert_array_equal(back, zarr.open_array(str(tmp_path / "c.zarr"))[...])
    assert sorted(files(tmp_path / "g.zarr")) == sorted(files(tmp_path / "c.zarr"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,fill", [("float32", np.nan), ("uint8", 3), ("int16", 0)])
def test_gpu_small_groups_and_dtypes(tmp_path: Path, dtype: str, fill: float) -> None:
    import cupy

    data = sample(dtype, fill)
    array = create(tmp_path / "g.zarr", "sharded-crc32c", dtype, fill)
    # one shard per group: several groups, the host buffers taking turns
    with write_module.encode_min_bytes(1):
        report = write_array(
            array, cupy.asarray(data), settings={"scratch_bytes": 1}, encoder=GPU_ENCODER
        )
    assert report.backend == "gpu" and report.chunks_empty > 0
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "g.zarr"))[...], data)
    write_array(array, cupy.asarray(data[16:]), (slice(16, None),), encoder=GPU_ENCODER)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "g.zarr"))[...], data)


@pytest.mark.gpu
def test_small_device_writes_are_encoded_on_the_cpu(tmp_path: Path) -> None:
    import cupy

    data = sample()
    array = zarr.create_array(
        str(tmp_path / "s.zarr"), shape=data.shape, chunks=CHUNKS, dtype=data.dtype
    )
    with write_module.encode_min_bytes(1 << 30):
        small = write_array(array, cupy.asarray(data), encoder=GPU_ENCODER)
    assert small.backend == "cpu"
    np.testing.assert_array_equal(array[...], data)
    with write_module.encode_min_bytes(1):
        large = write_array(array, cupy.asarray(data + 1), encoder=GPU_ENCODER)
    assert large.backend == "gpu"
    np.testing.assert_array_equal(array[...], data + 1)
    # The engine imports nothing of the GPU layer: without an encoder, device data is encoded on
    # the host; store_block looks nvCOMP's encoder up for cupy blocks.
    with write_module.encode_min_bytes(1):
        assert write_array(array, cupy.asarray(data)).backend == "cpu"
    assert device_encoder(cupy.asarray(data)) is GPU_ENCODER


@pytest.mark.gpu
def test_gpu_save_omezarr_reads_back(tmp_path: Path) -> None:
    import cupy

    data = sample()
    save_omezarr(
        cupy.asarray(data),
        tmp_path / "a.ome.zarr",
        voxel_size=(1, 1, 1),
        chunks=CHUNKS,
        shards=SHARDS,
        n_levels=2,
    )
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a.ome.zarr" / "0"))[...], data)
    assert os.path.isdir(tmp_path / "a.ome.zarr" / "1")


def test_shard_index_without_crc32c_is_read_not_written(tmp_path: Path) -> None:
    def sharded(name: str, index: list) -> zarr.Array:
        codec = ShardingCodec(chunk_shape=(4,), codecs=[BytesCodec(), ZSTD], index_codecs=index)
        return zarr.create_array(
            tmp_path / name,
            shape=(8,),
            chunks=(8,),
            dtype="uint16",
            serializer=codec,
            compressors=None,
        )

    array = sharded("a.zarr", [BytesCodec()])
    array[:] = np.arange(8, dtype=np.uint16)
    assert parse_layout(array).shard_index_crc32c is False
    assert read_volume(array).tolist() == list(range(8))
    with pytest.raises(UnsupportedLayoutError, match="shard index codecs .* are not bytes"):
        plan_write(array)
    with pytest.raises(UnsupportedLayoutError, match="shard index codecs"):
        parse_layout(sharded("b.zarr", [BytesCodec(endian="big"), CRC]))
