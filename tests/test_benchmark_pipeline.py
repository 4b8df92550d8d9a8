"""linum-benchmark-pipeline on a tiny mosaic, CPU only: every command runs in its own process,
its -v phases are read back, the table is printed and the JSON written."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from linumpy.bench.pipeline import (
    CommandRun,
    PipelineConfig,
    PipelineResult,
    mosaic_spec,
    pipeline_rows,
    pipeline_table,
    run_pipeline_benchmark,
    write_pipeline_json,
)
from linumpy.errors import LinumpyError
from linumpy.parallel import parse_size

ROOT = Path(__file__).resolve().parents[1]
TINY = {"mosaics": ("1mib",), "tile": (8, 32, 32), "gpu": False}


def test_the_commands_run_as_processes_beside_their_ceiling(tmp_path: Path) -> None:
    lines: list[str] = []
    result = run_pipeline_benchmark(PipelineConfig(**TINY), tmp_path, log=lines.append)
    assert [(r.command, r.device) for r in result.runs] == [
        ("estimate", "cpu"),
        ("stitch", "cpu"),
        ("aip", "cpu"),
        ("job", "cpu"),
        ("rechunk", "cpu"),
    ]
    assert len(lines) == 6 and lines[0].startswith("making 8x8 of 8x32x32")
    spec = mosaic_spec("1mib", (8, 32, 32))
    for run in result.runs:
        assert run.ok, run.error
        assert run.phases["start-up and imports"] > 0
        assert sum(run.phases.values()) <= run.seconds + 0.05  # the table's total is inside the run
        assert Path(run.log).is_file()
        assert run.nbytes == spec.nbytes and run.mosaic == spec.label
        # the steady state: the mosaic's bytes over the run's time after its start-up
        steady = run.seconds - run.phases["start-up and imports"]
        assert run.gbps == pytest.approx(spec.nbytes / steady / 1e9)
    stitch, ceiling = result.runs[1], result.runs[-1]
    assert {"metadata", "level 0", "pyramid", "final swap", "other"} <= set(stitch.phases)
    assert "registration" in result.runs[0].phases
    assert {"registration", "level 0", "pyramid"} <= set(result.runs[3].phases)
    assert "level 0" in ceiling.phases
    # the ceiling rewrote the mosaic in the stitch's level-0 layout
    argv = Path(ceiling.log).read_text().splitlines()[0]
    assert "linum_rechunk" in argv and "--chunks" in argv
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]  # mosaics removed
    rows = pipeline_rows(result)
    assert [row["command"] for row in rows][-1] == "linum-rechunk (ceiling)"
    assert rows[1]["x ceiling"] == pytest.approx(stitch.gbps / ceiling.gbps, abs=0.01)
    table = pipeline_table(result)
    assert "| linum-stitch-3d | 8x8 of 8x32x32 |" in table
    assert "level 0 GB/s" in table and "start-up s" in table
    write_pipeline_json(result, tmp_path / "run.json")
    saved = json.loads((tmp_path / "run.json").read_text())
    assert saved["runs"][1]["phases"]["level 0"] == stitch.phases["level 0"]
    assert saved["rows"][1]["GB/s"] == rows[1]["GB/s"] > 0
    assert saved["machine"]["date"] and saved["settings"]["tile"] == [8, 32, 32]


@pytest.mark.parametrize("size", ["4gib", "32gib"])
@pytest.mark.parametrize("tile", [(96, 512, 512), (256, 256, 256), (512, 256, 256)])
def test_mosaics_by_size_hold_about_that_size(size: str, tile: tuple[int, int, int]) -> None:
    spec = mosaic_spec(size, tile)
    assert spec.tile == tile
    rows, cols = spec.grid
    assert rows <= cols <= rows + 3
    assert abs(spec.nbytes - parse_size(size)) <= 0.05 * parse_size(size)


def test_sizes_and_bad_options_are_refused(tmp_path: Path) -> None:
    assert mosaic_spec("4gib", (512, 256, 256)).grid == (8, 8)
    assert parse_size("512mib") == 2**29 and parse_size("2GB") == 2 * 10**9
    for bad in ("4 apples", "-1gib", "0"):
        with pytest.raises(LinumpyError, match="is not a size"):
            parse_size(bad)
    script = [sys.executable, "-m", "linumpy.scripts.linum_benchmark_pipeline", str(tmp_path)]
    for option, value in (("--mosaic", "4apples"), ("--tile", "8x8")):
        done = subprocess.run([*script, option, value], capture_output=True, text=True)
        assert done.returncode == 2 and option in done.stderr, done.stderr
        assert not list(tmp_path.iterdir())


def test_the_command_skips_the_gpu_half_without_a_gpu(tmp_path: Path) -> None:
    from linumpy.cli.parser import gpu_reason

    if gpu_reason() is None:
        pytest.skip("a GPU is usable here: the GPU half runs")
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "linumpy.scripts.linum_benchmark_pipeline", str(out)]
    argv += ["--mosaic", "1mib", "--tile", "8x32x32", "--command", "aip"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=True)
    assert "GPU half skipped: no usable GPU" in done.stdout
    assert "| linum-aip | 8x8 of 8x32x32 | cpu |" in done.stdout
    saved = json.loads((out / "benchmark_pipeline.json").read_text())
    assert saved["gpu_skipped"] and {r["device"] for r in saved["runs"]} == {"cpu"}
    assert saved["benchmark"] == "linum-benchmark-pipeline" and saved["machine"]["command"]
    again = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert again.returncode == 2 and "use -f" in again.stderr


def test_a_command_prints_its_threads_stacks_on_sigusr1() -> None:
    """A ``linum-*`` command (its arguments parsed by :func:`linumpy.cli.parse_args`) prints
    every thread's stack on SIGUSR1 and goes on: where a long benchmark run waits."""
    child = (
        "import sys, threading, time\n"
        "from linumpy.cli import build_parser, parse_args\n"
        "sys.argv = ['linum-demo']\n"
        "parse_args(build_parser('Demo.', prog='linum-demo'), None)\n"
        "def waiting_in_a_thread():\n"
        "    time.sleep(60)\n"
        "threading.Thread(target=waiting_in_a_thread, daemon=True).start()\n"
        "print('started', flush=True)\n"
        "def waiting_here():\n"
        "    time.sleep(2)\n"
        "waiting_here()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        assert process.stdout is not None and process.stdout.readline() == "started\n"
        time.sleep(0.2)
        process.send_signal(signal.SIGUSR1)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0
    assert "waiting_here" in stderr and "waiting_in_a_thread" in stderr, stderr


def test_a_failed_run_shows_as_failed_beside_the_ceiling() -> None:
    result = PipelineResult(PipelineConfig(), {})
    phases = {"start-up and imports": 1.0}
    result.runs = [
        CommandRun("stitch", "6x6", "cpu", 11.0, phases, nbytes=8 * 10**9),
        CommandRun("aip", "6x6", "cpu", 60.0, {}, -9, "killed"),
        CommandRun("rechunk", "6x6", "cpu", 5.0, phases, nbytes=8 * 10**9),
    ]
    rows = pipeline_rows(result)
    assert [(row["command"], row["s"], row["GB/s"], row["x ceiling"]) for row in rows] == [
        ("linum-stitch-3d", 11.0, 0.8, 0.4),
        ("linum-aip", "failed", None, None),
        ("linum-rechunk (ceiling)", 5.0, 2.0, 1.0),
    ]
    assert "| linum-aip | 6x6 | cpu | failed | - | - | - | 2.00 | - |" in pipeline_table(result)


def test_a_failing_command_keeps_its_last_error_line(tmp_path: Path) -> None:
    from linumpy.bench.pipeline import _timed

    argv = [sys.executable, "-c", "import sys; sys.exit('no such mosaic')"]
    run = _timed(argv, CommandRun("aip", "6x6", "cpu"), tmp_path / "aip.log")
    assert not run.ok and run.error == "no such mosaic" and run.phases == {}
    assert "no such mosaic" in (tmp_path / "aip.log").read_text()


@pytest.mark.gpu
def test_the_gpu_half_runs_the_stitch_and_its_ceiling_on_the_gpu(tmp_path: Path) -> None:
    config = PipelineConfig(mosaics=("4mib",), tile=(16, 64, 64), commands=("stitch",))
    result = run_pipeline_benchmark(config, tmp_path, log=lambda line: None)
    assert [(r.command, r.device) for r in result.runs] == [
        ("stitch", "cpu"),
        ("stitch", "gpu"),
        ("rechunk", "cpu"),
        ("rechunk", "gpu"),
    ]
    assert all(run.ok for run in result.runs), [run.error for run in result.runs]
    assert "--use-gpu" in Path(result.runs[-1].log).read_text().splitlines()[0]
    gpu_row = next(row for row in pipeline_rows(result) if row["device"] == "gpu")
    assert gpu_row["ceiling GB/s"] and gpu_row["x ceiling"]
