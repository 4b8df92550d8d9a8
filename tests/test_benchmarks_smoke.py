"""The maintained benchmarks run, at tiny sizes and on the CPU; benchmarks/results/ holds the
current result of each kind and machine, which the benchmarks page renders at build time.

``benchmarks/out_of_core.py`` has its own test at a small size in ``tests/test_out_of_core.py``;
``linum-benchmark-io`` is tested in ``tests/test_benchmark_io.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from types import ModuleType

import pytest

from linumpy.bench.timing import Row

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"


def _module(path: Path) -> ModuleType:
    """A module of the repository that is not installed (docs/_ext, benchmarks/)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PAGES = _module(ROOT / "docs" / "_ext" / "benchmark_results.py")
STORE = _module(BENCHMARKS / "add_result.py")


def _run(*argv: str, env: dict[str, str] | None = None, timeout: int = 300) -> str:
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_cpu_read_benchmark_runs_at_a_tiny_size() -> None:
    out = _run(
        sys.executable,
        str(BENCHMARKS / "cpu_read.py"),
        *("--mib", "1", "--threads", "1", "--rounds", "1", "--layouts", "1,3"),
        *("--skip", "tstore,zarrs"),
    )
    lines = [line for line in out.splitlines() if "linumpy/ceiling" in line]
    assert [line.split(" (ratio")[0] for line in lines] == ["64^3", "sharded 64^3 in 128x512x512"]
    for line in lines:
        assert "linumpy " in line and "ceiling " in line and "files " in line


def test_dask_benchmark_runs_on_the_cpu(tmp_path: Path) -> None:
    rows_file = tmp_path / "rows.json"
    _run(
        sys.executable,
        str(BENCHMARKS / "dask_gpu.py"),
        *("--cpu", "--size-gib", "0.001", "--side", "128", "--repeats", "1"),
        *("--folder", str(tmp_path), "--json", str(rows_file)),
    )
    rows = json.loads(rows_file.read_text())
    assert rows[0]["what"] == "read_volume(gpu=False) + sum"
    blocks = [row for row in rows[1:] if row["what"].startswith("open_volume(gpu=False)")]
    assert len(blocks) == 8
    for row in blocks:
        assert "error" not in row, row
        assert row["sum ok"] is True and row["GB/s"] > 0


def test_gpu_suite_runs_each_file_and_summarises(tmp_path: Path) -> None:
    """Without a GPU every selected test skips; the summary still names the file and its line."""
    out = tmp_path / "suite"
    printed = _run(
        "bash",
        str(BENCHMARKS / "gpu_suite.sh"),
        str(out),
        "120",
        env={"GPU_TEST_FILES": "tests/test_crc32c.py", "PYTHON": sys.executable},
    )
    summary = (out / "summary.md").read_text().splitlines()
    assert summary[:2] == ["| file | result | seconds |", "| --- | --- | --- |"]
    assert len(summary) == 3 and summary[2].startswith("| test_crc32c | ")
    assert "error" not in summary[2] and ("passed" in summary[2] or "skipped" in summary[2])
    assert (out / "test_crc32c.log").is_file()
    assert printed.splitlines()[:3] == summary


def test_results_hold_one_file_per_kind_and_machine() -> None:
    kinds: dict[str, list[str]] = {}
    for path in sorted(RESULTS.glob("*.json")):
        match = PAGES.NAME.match(path.name)
        assert match, f"{path.name}: not KIND-YYYY-MM-DD-MACHINE.json"
        kinds.setdefault(match["kind"], []).append(match["rest"])
        about = PAGES.describe(json.loads(path.read_text()), path.name)
        assert about["machine"] and about["date"] == match["date"], path.name
        assert about.get("command") and about.get("commit"), path.name
    assert {"benchmark-io", "pipeline"} <= set(kinds)
    for kind, machines in kinds.items():
        assert len(machines) == len(set(machines)), f"{kind}: older results kept: {machines}"


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda path: path.stem)
def test_every_result_renders_as_a_table(path: Path) -> None:
    kind = PAGES.NAME.match(path.name)["kind"]
    assert path in PAGES.result_files(RESULTS, kind)
    text = PAGES.render(path, kind)
    head, table = text.split("\n\n", 1)
    assert f"(`benchmarks/results/{path.name}`)" in head
    lines = table.strip().splitlines()
    assert len(lines) >= 3 and lines[1].startswith("| ---")
    assert all(line.count("|") == lines[0].count("|") for line in lines)


def _run_json(gbps: float) -> dict:
    rows = [
        Row("8^3", "linumpy read_volume (CPU)", "cpu", "read", gbps, 0.1, 3, True),
        Row("8^3", "ceiling: numcodecs", "ceiling", "decode-cpu", 2 * gbps, 0.1, 3),
        Row("16^3", "linumpy read_volume (CPU)", "cpu", "read", 3 * gbps, 0.1, 0, False),
    ]
    return {
        "benchmark": "linum-benchmark-io",
        "machine": {"date": "2026-11-30 10:00 UTC", "command": "linum-benchmark-io OUT"},
        "volume": {"shape": [8, 8, 8], "dtype": "uint16"},
        "rows": [asdict(row) for row in rows],
    }


def test_a_newer_result_replaces_the_older_and_renders(tmp_path: Path) -> None:
    for day, gbps in (("2026-11-30", 1.25), ("2026-12-01", 2.5)):
        run = tmp_path / f"run-{day}.json"
        run.write_text(json.dumps(_run_json(gbps)))
        argv = [str(run), "--machine", "Two cores", "--results", str(tmp_path / "results")]
        assert STORE.main([*argv, "--commit", "abc1234", "--date", day]) == 0
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"rows": [{"mode": "CPU", "best_s": 0.5, "runs": [1, 2]}]}))
    argv = [str(other), "--machine", "Two cores", "--kind", "registration"]
    assert STORE.main([*argv, "--results", str(tmp_path / "results"), "--commit", "c"]) == 0
    results = tmp_path / "results"
    (newest,) = PAGES.result_files(results, "benchmark-io")
    assert newest.name == "benchmark-io-2026-12-01-two-cores.json"
    saved = json.loads(newest.read_text())
    assert saved["commit"] == "abc1234" and saved["command"] == "linum-benchmark-io OUT"
    text = PAGES.render(newest, "benchmark-io")
    assert text.startswith(
        "**Two cores**, 2026-12-01: `linum-benchmark-io OUT` at commit `abc1234`"
    )
    lines = text.splitlines()
    assert lines[2] == "| path | kind | 8³ | 16³ |"
    assert "| linumpy read_volume (CPU) | cpu | 2.50 | - |" in lines  # a failed row: -
    assert lines[-1] == "| ceiling: numcodecs | ceiling | 5.00 |  |"
    (registration,) = PAGES.result_files(results, "registration")
    rows = PAGES.render(registration, "registration").splitlines()[2:]
    assert rows == ["| mode | best_s |", "| --- | ---: |", "| CPU | 0.5 |"]  # lists left out


def test_a_result_of_unknown_kind_or_bad_date_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"rows": []}))
    argv = [str(run), "--machine", "m", "--results", str(tmp_path / "results")]
    assert STORE.main(argv) == 2
    assert STORE.main([*argv, "--kind", "pipeline", "--date", "30/11"]) == 2
    run.write_text("[]")
    assert STORE.main([*argv, "--kind", "pipeline"]) == 2
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())


def test_durable_writes_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    out = _run(
        sys.executable,
        str(BENCHMARKS / "durable_writes.py"),
        str(tmp_path),
        *("--size-mib", "1", "--repeats", "1"),
    )
    rows = [line for line in out.splitlines() if line.startswith("| ") and "GB/s" in line]
    assert rows and all(line.count("|") == 7 for line in rows)


def test_layout_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    figures = tmp_path / "layout.json"
    _run(
        sys.executable,
        str(BENCHMARKS / "layout_cpu.py"),
        *("--grid", "2", "--tile-shape", "16", "64", "64", "--rounds", "1"),
        *("--json", str(figures), "--dir", str(tmp_path / "work")),
    )
    assert json.loads(figures.read_text())


def test_registration_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    figures = tmp_path / "registration.json"
    _run(
        sys.executable,
        str(BENCHMARKS / "registration.py"),
        *("--grid", "3x3:64", "--threads", "1", "2", "--repeats", "1", "--cpu"),
        *("--json", str(figures)),
    )
    rows = json.loads(figures.read_text())
    assert [row["mode"] for row in rows] == ["CPU, 1 threads", "CPU, 2 threads"]
    assert all(row["pairs"] == 12 and row["max_difference_px"] <= 0.011 for row in rows)


@pytest.mark.gpu
def test_small_writes_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    figures = tmp_path / "small_writes.json"
    _run(
        sys.executable,
        str(BENCHMARKS / "gpu_small_writes.py"),
        str(tmp_path / "work"),
        *("--mib", "1", "--writers", "1", "2", "--repeats", "1", "--json", str(figures)),
    )
    rows = json.loads(figures.read_text())["rows"]
    assert [(row["writers"], row["path"]) for row in rows] == [
        (1, "GPU (nvCOMP)"),
        (1, "host (libzstd)"),
        (2, "GPU (nvCOMP)"),
        (2, "host (libzstd)"),
    ]
    assert all(row["seconds"] > 0 for row in rows)
