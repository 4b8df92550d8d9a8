"""linum-benchmark-io (CPU rows on a tiny volume, GPU rows with a GPU, bad inputs) and
linum-gpu-info."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import gpu_missing_reason
from zarr_layouts import make_array, sample_data

from linumpy.bench.volume import oct_volume
from linumpy.io import save_omezarr
from linumpy.scripts import linum_benchmark_io, linum_gpu_info

TINY = ["--shape", "32", "96", "64", "--chunks", "16", "--repeats", "2"]


def _exit_2(argv: list[str], capsys: pytest.CaptureFixture[str], main=linum_benchmark_io.main):
    """Run ``main`` expecting exit status 2; return its one-line error."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_cpu_run_prints_the_table_and_writes_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench"
    linum_benchmark_io.main([str(out), *TINY, "--cpu-only"])
    printed = capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["benchmark_io.json"]  # volumes removed
    payload = json.loads((out / "benchmark_io.json").read_text())
    assert payload["benchmark"] == "linum-benchmark-io" and payload["machine"]["command"]
    rows = payload["rows"]
    layouts = {row["layout"] for row in rows}
    plain = {"16^3", "sharded 16^3 in 128x512x512"}
    assert layouts == plain | {f"{name}, checksums" for name in plain}  # --checksum both
    for layout in layouts:
        names = {row["name"] for row in rows if row["layout"] == layout}
        assert {"linumpy read_volume (CPU)", "zarr CPU read", "zarr CPU write"} <= names
        assert any(name.startswith("ceiling: numcodecs") for name in names)
        assert any("os.preadv of the files" in name for name in names)
    assert all(row["matches"] for row in rows if row["op"] == "read" and row["runs"])
    assert not [row for row in rows if row["kind"] == "gpu"]
    for row in rows:
        if row["name"] == "linumpy read_volume (CPU)":
            assert set(row["fractions"]) == {"decode", "file read"}
        elif row["op"] == "write":
            assert row["fractions"] == {}
    # The table printed last gives fractions of the ceilings, one line per row.
    last = printed[printed.rindex("| layout | path | GB/s | x decode") :]
    assert last.count("\n| ") == len(rows) + 1
    assert "| 16^3 | linumpy read_volume (CPU) |" in last
    assert "| 16^3, checksums | linumpy read_volume (CPU) |" in last


def test_ome_zarr_input_is_read_at_level_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    image = tmp_path / "mosaic.ome.zarr"
    save_omezarr(oct_volume((16, 48, 32)), image, voxel_size=(1, 1, 1), chunks=(8, 16, 16))
    out = tmp_path / "bench"
    linum_benchmark_io.main([str(out), "--input", str(image), "--cpu-only", "--repeats", "1"])
    capsys.readouterr()
    payload = json.loads((out / "benchmark_io.json").read_text())
    assert payload["volume"]["shape"] == [16, 48, 32]
    rows = payload["rows"]
    assert {row["layout"] for row in rows} == {"input mosaic.ome.zarr"}
    reads = [row for row in rows if row["op"] == "read" and row["runs"]]
    assert len(reads) >= 2 and all(row["matches"] for row in reads)
    assert not [row for row in rows if row["op"] == "write"]
    assert any(row["op"] == "decode-cpu" and row["runs"] for row in rows)
    assert (image / "0" / "zarr.json").is_file()  # the input is left alone


def _corrupt(tmp_path: Path) -> Path:
    path = tmp_path / "corrupt.zarr"
    make_array(path, "v3", sample_data((16, 16, 16), "uint16"), chunks=(8, 8, 8))
    chunk = next(p for p in sorted(path.rglob("*")) if p.is_file() and p.name != "zarr.json")
    chunk.write_bytes(b"not a zstd frame at all")
    return path


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("missing", "'/nope/volume.zarr' does not exist"),
        ("folder", "notzarr"),
        ("file", "notzarr.txt"),
        ("corrupt", "corrupt.zarr"),
        ("size", "argument --shape: must be more than 0, got 0"),
        ("huge", "argument --shape: a volume of 976.6 GiB needs about"),
        ("taken", "benchmark_io.json' exists; use -f"),
        ("read-only", "read-only"),
    ],
)
def test_user_mistakes_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, expected: str
) -> None:
    out = tmp_path / "out"
    argv = [str(out), "--cpu-only", *TINY]
    if case == "missing":
        argv += ["--input", "/nope/volume.zarr"]
    elif case == "folder":
        (tmp_path / "notzarr").mkdir()
        (tmp_path / "notzarr" / "readme.txt").write_text("hello")
        argv += ["--input", str(tmp_path / "notzarr")]
    elif case == "file":
        (tmp_path / "notzarr.txt").write_text("hello")
        argv += ["--input", str(tmp_path / "notzarr.txt")]
    elif case == "corrupt":
        argv += ["--input", str(_corrupt(tmp_path))]
    elif case == "size":
        argv += ["--shape", "0", "8", "8"]
    elif case == "huge":
        argv += ["--shape", "500000", "1024", "1024"]
    elif case == "taken":
        out.mkdir()
        (out / "benchmark_io.json").write_text("{}")
    elif case == "read-only":
        if os.geteuid() == 0:  # root writes through file modes: use a read-only file system
            argv, expected = ["/sys/kernel", "-f", *argv[1:]], "'/sys/kernel/"
        else:
            out.mkdir(mode=0o555)
    err = _exit_2(argv, capsys)
    assert err.startswith("linum-benchmark-io: error: ") and expected in err, err
    if case == "corrupt":
        assert "c/0/0/0" in err or "chunk" in err, err


@pytest.mark.gpu
def test_gpu_rows_and_ceilings_match_the_volume(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    linum_benchmark_io.main([str(out), *TINY])
    rows = json.loads((out / "benchmark_io.json").read_text())["rows"]
    plain = ("16^3", "sharded 16^3 in 128x512x512")
    for layout in (*plain, *(f"{name}, checksums" for name in plain)):
        mine = {row["name"]: row for row in rows if row["layout"] == layout}
        names = [
            "read_volume(gpu=True)",
            "gpu_zarr_context (nvCOMP codec in zarr)",
            "zarr enable_gpu() (CPU decode, copy per chunk)",
            "GPU write (nvCOMP encode in gpu_zarr_context)",
        ]
        for name in names:
            assert mine[name]["runs"] >= 1 and mine[name]["matches"] is True, mine[name]
        assert set(mine["read_volume(gpu=True)"]["fractions"]) == {
            "decode",
            "file read",
            "H2D copy",
        }
        ops = {row["op"] for row in mine.values() if row["kind"] == "ceiling" and row["runs"]}
        assert {"copy", "decode-gpu", "decode-cpu", "file-read"} <= ops
    assert not [row for row in rows if row["note"].startswith("failed")]
    assert all(row["matches"] for row in rows if row["op"] == "read" and row["runs"])


def test_gpu_info_prints_versions_and_route(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_array(
        tmp_path / "a.zarr", "v3-sharded", sample_data((20, 20, 20), "uint16"), chunks=(8,) * 3
    )
    linum_gpu_info.main([str(tmp_path / "a.zarr")])
    out = capsys.readouterr().out
    for key in ("device", "driver", "cupy", "nvcomp", "kvikio", "gds", "settings"):
        assert f"{key}:" in out
    assert "gpu=True) takes:" in out
    if gpu_missing_reason() is None:
        assert "fast path: batched reads" in out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["{tmp}"], "not a zarr"),
        (["{tmp}/nope"], "does not exist"),
        (["{arr}", "--level", "2"], "level"),
    ],
)
def test_gpu_info_user_mistakes_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    array = tmp_path / "a.zarr"
    make_array(array, "v3", np.ones((8, 8, 8), np.uint16), chunks=(8,) * 3)
    argv = [a.format(tmp=tmp_path, arr=array) for a in args]
    err = _exit_2(argv, capsys, main=linum_gpu_info.main)
    assert err.startswith("linum-gpu-info: error: ") and expected in err, err
