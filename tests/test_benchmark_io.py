"""linum-benchmark-io (CPU rows on a tiny volume, GPU rows with a GPU) and linum-gpu-info."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import gpu_missing_reason
from zarr_layouts import make_array, sample_data

from linumpy.cli import linum_benchmark_io, linum_gpu_info

TINY = ["--shape", "32", "96", "64", "--chunks", "16", "--shard", "16", "48", "64"]
TINY += ["--shard-chunk", "16", "--warmup", "0", "--repeats", "2"]


def test_cpu_rows_table_json_and_chart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench"
    linum_benchmark_io.main([str(out), *TINY, "--cpu-only", "--cold"])
    table = capsys.readouterr().out
    payload = json.loads((out / "benchmark_io.json").read_text())
    rows = payload["rows"]
    layouts = {row["layout"] for row in rows}
    assert layouts == {"16^3", "sharded 16x48x64 of 16^3"}
    for layout in layouts:
        names = {row["name"] for row in rows if row["layout"] == layout}
        assert {
            linum_benchmark_io.ZARR_CPU,
            "linumpy read_volume (CPU)",
            "zarr CPU write (libzstd encode)",
            "linumpy read_volume (CPU), cold",
        } <= names
    reads = [row for row in rows if row["matches"] is not None]
    assert reads and all(row["matches"] for row in reads)
    assert all(row["gbps"] > 0 and 1 <= row["runs"] <= 2 for row in rows)
    assert all(row["kind"] != "gpu" for row in rows)
    assert "cold cache (posix_fadvise DONTNEED)" in table
    assert table.count("\n| ") == len(rows) + 2  # header, separator, one row per measurement
    assert table.startswith((out / "benchmark_io.md").read_text())
    assert (out / "benchmark_io.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.glob("volumes-*"))  # written volumes are removed


def test_refuses_to_overwrite_without_f(tmp_path: Path) -> None:
    (tmp_path / "taken.txt").write_text("x")
    with pytest.raises(SystemExit):
        linum_benchmark_io.main([str(tmp_path), *TINY, "--cpu-only"])


@pytest.mark.gpu
def test_gpu_rows_match_the_volume(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    linum_benchmark_io.main([str(out), *TINY, "--no-shard"])
    rows = json.loads((out / "benchmark_io.json").read_text())["rows"]
    names = {row["name"] for row in rows}
    assert "linumpy fast path (read_zarr_to_gpu, pread)" in names
    assert linum_benchmark_io.ENABLE_GPU in names
    assert not [row for row in rows if row["note"].startswith("failed")]
    assert all(row["matches"] for row in rows if row["matches"] is not None)


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
    reason = gpu_missing_reason()
    if reason is None:
        assert "fast path: batched reads" in out
    else:
        assert f"because: {reason}; with a GPU: the fast path" in out
    with pytest.raises(SystemExit, match="not a zarr array"):
        linum_gpu_info.main([str(tmp_path)])
