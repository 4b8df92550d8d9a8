"""The maintained benchmarks run, at tiny sizes and on the CPU, and the benchmarks page matches
the dated results it renders.

``benchmarks/out_of_core.py`` has its own test at a small size in ``tests/test_out_of_core.py``;
``linum-benchmark-io`` is tested in ``tests/test_benchmark_io.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from linumpy.bench import Row
from linumpy.bench.result_files import (
    BENCHMARK,
    current_records,
    load_records,
    parse_record,
    record_from_run,
)
from linumpy.bench.result_page import check_docs, record_table, render_docs
from linumpy.bench.results import main
from linumpy.errors import BenchInputError

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"


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


def test_benchmarks_page_matches_the_results() -> None:
    pytest.importorskip("matplotlib")
    records = load_records(RESULTS)
    assert records, "no result files under benchmarks/results"
    problems = check_docs(RESULTS, ROOT / "docs" / "benchmarks.md", ROOT / "docs" / "images")
    assert not problems, "\n".join(problems) + "\nrun: python -m linumpy.bench.results render"


def test_every_result_says_when_where_and_how() -> None:
    for record in load_records(RESULTS):
        assert record.machine and record.commit and record.versions, record.source
        assert record.command.startswith("linum-benchmark-io"), record.source
        assert record.rows and all(row.runs >= 0 for row in record.rows), record.source
        assert Path(record.source).name == f"benchmark-io-{record.date}-{record.slug}.json"


def _run_json(gbps: float) -> dict:
    rows = [
        Row("8^3", "linumpy read_volume (CPU)", "cpu", "read", gbps, 0.1, 3, True),
        Row("8^3", "ceiling: numcodecs", "ceiling", "decode-cpu", 2 * gbps, 0.1, 3),
    ]
    return {
        "machine": {"date": "2026-11-30 10:00 UTC", "host": "h", "cpus": "2", "zarr": "3.4.2"},
        "volume": {"shape": [8, 8, 8], "dtype": "uint16", "ratios": {"8^3": 1.5}},
        "rows": [asdict(row) for row in rows],
    }


def test_add_render_check_round_trip(tmp_path: Path) -> None:
    """A run's JSON becomes a result file; rendering makes the page current, a newer result of
    the same machine replaces its table, and a stale page or chart is reported."""
    pytest.importorskip("matplotlib")
    (tmp_path / "docs" / "images").mkdir(parents=True)
    page = tmp_path / "docs" / "benchmarks.md"
    from linumpy.bench.result_page import BEGIN, END

    page.write_text(f"# Benchmarks\n\n{BEGIN}\n{END}\n\nAfter.\n")
    for day, gbps in (("2026-11-30", 1.25), ("2026-12-01", 2.5)):
        run = tmp_path / f"run-{day}.json"
        run.write_text(json.dumps(_run_json(gbps)))
        argv = ["--root", str(tmp_path), "add", str(run), "--machine", "Two cores"]
        argv += ["--command", "linum-benchmark-io OUT --cpu-only", "--commit", "abc1234"]
        assert main([*argv, "--date", day]) == 0
    results = tmp_path / "benchmarks" / "results"
    names = sorted(p.name for p in results.iterdir())
    assert names == [
        "benchmark-io-2026-11-30-two-cores.json",
        "benchmark-io-2026-12-01-two-cores.json",
    ]
    images = tmp_path / "docs" / "images"
    assert check_docs(results, page, images)  # not rendered yet
    assert main(["--root", str(tmp_path), "check"]) == 1
    render_docs(results, page, images)
    assert check_docs(results, page, images) == []
    text = page.read_text()
    assert text.startswith("# Benchmarks\n") and text.endswith("After.\n")
    assert "### Two cores, 2026-12-01" in text and "2026-11-30" not in text
    assert "| linumpy read_volume (CPU) | cpu | 2.50 |" in text
    assert "](images/benchmark-io-two-cores.png)" in text
    from PIL import Image

    with Image.open(images / "benchmark-io-two-cores.png") as image:
        assert image.size[0] > 600
    # Editing the JSON makes both the page and the chart stale.
    newest = results / names[-1]
    payload = json.loads(newest.read_text())
    payload["rows"][0]["gbps"] = 3.0
    newest.write_text(json.dumps(payload))
    problems = check_docs(results, page, images)
    assert len(problems) == 2 and "generated section" in problems[0] and ".png" in problems[1]


def test_record_table_and_newest_per_machine() -> None:
    record = parse_record(
        record_from_run(_run_json(1.0), machine="m", command="linum-benchmark-io o", commit="c"),
        "r.json",
    )
    assert record.date == "2026-11-30" and record.versions == {"zarr": "3.4.2"}
    assert record_table(record).splitlines()[2] == "| linumpy read_volume (CPU) | cpu | 1.00 |"
    other = parse_record(
        record_from_run(_run_json(1.0), machine="n", command="x", commit="c", date="2026-01-02"),
        "s.json",
    )
    assert [r.machine for r in current_records([other, record])] == ["m", "n"]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([], "holds a JSON object"),
        ({"benchmark": BENCHMARK, "date": "2026-11-30"}, "missing machine"),
        (
            record_from_run({}, machine="m", command="c", commit="x") | {"benchmark": "other"},
            "not 'linum-benchmark-io'",
        ),
        (record_from_run({}, machine="m", command="c", commit="x", date="30/11"), "YYYY-MM-DD"),
        (
            record_from_run({"rows": [{"layout": "8^3"}]}, machine="m", command="c", commit="x")
            | {"date": "2026-11-30"},
            "rows[0] lacks",
        ),
    ],
)
def test_malformed_result_files_are_named(payload: object, message: str) -> None:
    with pytest.raises(BenchInputError, match=r"bad\.json: .*") as caught:
        parse_record(payload, "bad.json")
    assert message in str(caught.value)


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
