"""linumpy.bench on tiny volumes: the volume, the stored files and frames, a CPU run's rows."""

from __future__ import annotations

from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr

from linumpy.bench.files import read_files, stored_files
from linumpy.bench.report import fractions, summary_table
from linumpy.bench.rows import Layout, cpu_read_rows, write_rows, write_volume
from linumpy.bench.run import BenchConfig, run_benchmark
from linumpy.bench.timing import Timer
from linumpy.bench.volume import oct_volume

SHAPE = (32, 96, 64)
LAYOUTS = (Layout.cubic(16), Layout.cubic(16, (16, 48, 64)))


def test_volume_has_no_zero_chunks_and_compresses_like_oct() -> None:
    volume = oct_volume((64, 128, 128))
    assert volume.dtype == np.uint16 and volume.shape == (64, 128, 128)
    blocks = volume.reshape(4, 16, 8, 16, 8, 16).max(axis=(1, 3, 5))
    assert blocks.min() > 0  # no all-zero 16^3 chunk
    profile = volume.mean(axis=(1, 2))
    assert profile[-8:].mean() < profile[32:40].mean()  # light decays below the surface
    stored = len(numcodecs.Zstd(level=3).encode(volume))
    assert 1.3 < volume.nbytes / stored < 2.2
    assert np.array_equal(volume, oct_volume((64, 128, 128), threads=3))  # same bytes
    assert not np.array_equal(volume, oct_volume((64, 128, 128), seed=7))
    assert oct_volume((4, 8, 8), "float32").dtype == np.float32


@pytest.mark.parametrize("layout", [*LAYOUTS, None], ids=["16^3", "sharded", "v2"])
def test_stored_frames_decode_to_the_chunks(tmp_path: Path, layout: Layout | None) -> None:
    volume = oct_volume(SHAPE)
    volume[16:, :16] = 0  # 4 chunks not stored, inside a shard that is
    volume[:16, 48:] = 0  # 12 chunks not stored, a whole shard
    path = tmp_path / "a.zarr"
    if layout is None:  # zarr v2 (OME-Zarr 0.4), "/" between chunk indices
        array = zarr.create_array(
            path,
            shape=SHAPE,
            chunks=(16,) * 3,
            dtype="u2",
            zarr_format=2,
            compressors=numcodecs.Zstd(level=3),
            fill_value=0,
            chunk_key_encoding={"name": "v2", "separator": "/"},
        )
        array[...] = volume
    else:
        write_volume(path, volume, layout, zarr.codecs.ZstdCodec(level=3))
    files = stored_files(zarr.open_array(path, mode="r"))
    buffer = np.empty(files.nbytes, np.uint8)
    read_files(files, buffer, threads=3)
    files = files.with_frames(buffer)
    n_chunks = 2 * 6 * 4 - 4 - 12
    assert len(files.frame_sizes) == n_chunks
    assert files.frame_nbytes == 16**3 * 2
    decoded = {
        bytes(numcodecs.Zstd().decode(buffer[o : o + s]))
        for o, s in zip(files.frame_offsets, files.frame_sizes, strict=True)
    }
    chunks = {
        np.ascontiguousarray(volume[z : z + 16, y : y + 16, x : x + 16]).tobytes()
        for z in range(0, 32, 16)
        for y in range(0, 96, 16)
        for x in range(0, 64, 16)
        if volume[z : z + 16, y : y + 16, x : x + 16].any()
    }
    assert decoded == chunks


def test_cpu_run_has_every_row_and_fractions(tmp_path: Path) -> None:
    config = BenchConfig(shape=SHAPE, layouts=LAYOUTS, gpu=False, repeats=2, workdir=tmp_path)
    result = run_benchmark(config)
    assert result.shape == SHAPE and set(result.ratios) == {layout.name for layout in LAYOUTS}
    assert all(1.2 < ratio < 3 for ratio in result.ratios.values())
    for layout in LAYOUTS:
        rows = {row.name: row for row in result.rows if row.layout == layout.name}
        measured = {
            "linumpy read_volume (CPU)",
            "zarr CPU read",
            "zarr CPU write",
            "linumpy CPU write (write engine)",
        }
        assert measured <= set(rows)
        assert {"tensorstore read", "zarr with the zarrs codec pipeline"} <= set(rows)
        ops = {row.op for row in rows.values() if row.kind == "ceiling" and row.runs}
        assert ops == {"file-read", "decode-cpu"}
        for name in measured:
            assert 1 <= rows[name].runs <= 2 and rows[name].gbps > 0, rows[name]
        for row in rows.values():
            assert row.runs or row.note.startswith("skipped:"), row
            if row.op == "read" and row.runs or row.name == "linumpy CPU write (write engine)":
                assert row.matches is True, row
    assert not [row for row in result.rows if row.kind == "gpu"]
    assert list(tmp_path.iterdir()) == []  # measured arrays are removed
    table = summary_table(result.rows).splitlines()
    row = next(line for line in table if "| 16^3 | linumpy read_volume (CPU) |" in line)
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    decode, read = float(cells[3]), float(cells[4])
    reader = next(r for r in result.rows if r.layout == "16^3" and r.name == cells[1])
    ceiling = next(r for r in result.rows if r.layout == "16^3" and r.op == "decode-cpu")
    assert decode == pytest.approx(reader.gbps / ceiling.gbps, abs=0.006)
    assert read > 0 and cells[5] == "" and cells[6] == "yes"
    assert set(fractions(result.rows)[result.rows.index(reader)]) == {"decode", "file read"}


def test_checksum_layout_writes_checksummed_frames(tmp_path: Path) -> None:
    layouts = (Layout.cubic(16), Layout.cubic(16, checksum=True))
    volume = oct_volume((16, 32, 32), "float32")
    for i, layout in enumerate(layouts):
        path = tmp_path / f"layout-{i}.zarr"
        timer = Timer(repeats=1)
        rows = write_rows(timer, layout, path, volume, zstd_level=3)
        assert [row.matches for row in rows] == [None, True]
        rows = cpu_read_rows(timer, layout.name, path, volume)
        assert all(row.matches for row in rows if row.runs)
        files = stored_files(zarr.open_array(path, mode="r"))
        frame = Path(files.paths[0]).read_bytes()
        assert frame[:4] == b"\x28\xb5\x2f\xfd"  # zstd magic
        assert bool(frame[4] & 0x04) is layout.checksum  # frame header: Content_Checksum_flag
        assert files.chunk_trailer == (4 if layout.checksum else 0)  # the crc32c after the frame


def test_input_without_zstd_is_read_and_its_ceilings_skipped(tmp_path: Path) -> None:
    path = tmp_path / "raw.zarr"
    volume = oct_volume((16, 32, 32))
    array = zarr.create_array(
        path, shape=volume.shape, chunks=(8, 16, 16), dtype="u2", compressors=None
    )
    array[...] = volume
    result = run_benchmark(BenchConfig(input=path, gpu=False, repeats=1))
    ceilings = [row for row in result.rows if row.kind == "ceiling"]
    assert len(ceilings) == 1 and "the ceilings need zstd chunks" in ceilings[0].note
    reads = [row for row in result.rows if row.op == "read" and row.runs]
    assert len(reads) >= 2 and all(row.matches for row in reads)
    assert result.ratios == {} and (path / "zarr.json").is_file()


def test_a_failing_row_is_recorded_with_its_error_and_the_run_goes_on() -> None:
    timer = Timer(repeats=2)
    row = timer.measure("8^3", "sum", "cpu", "read", lambda: sum(range(1000)), nbytes=8000)
    assert row.runs == 2 and row.gbps > 0 and row.matches is None
    broken = timer.measure("8^3", "broken", "cpu", "read", lambda: 1 / 0, nbytes=1)
    assert broken.note == "failed: ZeroDivisionError: division by zero" and broken.runs == 0
    assert timer.rows == [row, broken]
