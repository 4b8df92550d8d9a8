"""Phases of a run: the recorder's accounting, the scripts' -v table, and reading it back."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from linumpy import phases
from linumpy.phases import OTHER, STARTUP, PhaseRecorder, Phases, format_table, parse_table

ROOT = Path(__file__).resolve().parents[1]


def test_rows_add_up_to_the_wall_time_and_inner_phases_win() -> None:
    with PhaseRecorder(startup=0.0) as recorder:
        time.sleep(0.02)  # before the first phase: start-up (a command's lazy imports)
        with recorder.phase("metadata"):
            time.sleep(0.02)
            with recorder.phase("level 0"):
                time.sleep(0.05)
            time.sleep(0.02)
        time.sleep(0.02)  # other
    result = recorder.result()
    assert list(result.seconds) == [STARTUP, "metadata", "level 0", OTHER]
    assert 0.02 <= result.seconds[STARTUP] < 0.06
    assert 0.05 <= result.seconds["level 0"] < 0.09
    assert 0.04 <= result.seconds["metadata"] < 0.08
    assert result.seconds[OTHER] >= 0.02
    assert sum(result.seconds.values()) == pytest.approx(result.total, abs=1e-6)


def test_unless_within_keeps_the_enclosing_phase() -> None:
    @phases.recorded("level 0", unless_within=("pyramid",))
    def store() -> None:
        time.sleep(0.02)

    with PhaseRecorder(startup=0.0) as recorder:
        store()
        with recorder.phase("pyramid"):
            store()
    seconds = recorder.result().seconds
    assert 0.02 <= seconds["level 0"] < 0.04
    assert seconds["pyramid"] >= 0.02


def test_marks_from_other_threads_are_ignored_and_nothing_is_recorded_without_a_recorder() -> None:
    @phases.recorded("from a task")
    def worker() -> int:
        time.sleep(0.01)
        return 7

    assert worker() == 7  # without a recorder, the function alone runs
    with PhaseRecorder(startup=0.0) as recorder:
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    assert "from a task" not in recorder.result().seconds
    assert phases.active() is None


def test_start_up_is_the_time_before_the_recorder_and_imports_are_not_hooked() -> None:
    import builtins

    original = builtins.__import__
    with PhaseRecorder(startup=1.5) as recorder, recorder.phase("metadata"):
        assert builtins.__import__ is original  # import timing is python -X importtime's job
        time.sleep(0.02)
    result = recorder.result()
    assert 1.5 <= result.seconds[STARTUP] < 1.52  # and the moments before the first phase
    assert result.seconds["metadata"] >= 0.02
    assert result.total == pytest.approx(sum(result.seconds.values()), abs=1e-6)


def test_a_second_recorder_is_refused() -> None:
    with PhaseRecorder(startup=0.0), pytest.raises(RuntimeError, match="already running"):
        PhaseRecorder(startup=0.0).start()


def test_the_table_reads_back() -> None:
    measured = Phases({STARTUP: 1.25, "metadata": 0.4, "level 0": 2.0, OTHER: 0.1}, 3.75)
    text = "bar 10%|##  |\r bar 100%\n" + format_table(measured, "linum-stitch-3d") + "\ndone\n"
    assert parse_table(text) == measured


def test_process_age_counts_from_the_process_start() -> None:
    if not Path("/proc/self/stat").exists():
        pytest.skip("no /proc: the process start time is not known here")
    code = (
        "import time; time.sleep(0.3); from linumpy.phases import process_age; print(process_age())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert 0.3 <= float(done.stdout) < 10


def test_scripts_print_the_table_with_v(tmp_path: Path) -> None:
    """linum-stitch-3d -v as a command: each step of its run has a row, and they add up."""
    from linumpy.mosaic.demo import make_demo_data, read_demo_truth

    grid, transform = tmp_path / "grid.ome.zarr", tmp_path / "transform.json"
    make_demo_data(grid, grid_shape=(2, 2), tile_shape=(8, 32, 32))
    read_demo_truth(grid).save(transform)
    command = [sys.executable, "-m", "linumpy.scripts.linum_stitch_3d", str(grid), str(transform)]
    out = tmp_path / "stitched.ome.zarr"
    done = subprocess.run(
        [*command, str(out), "-v"], capture_output=True, text=True, cwd=ROOT, check=True
    )
    table = parse_table(done.stderr)
    assert table is not None, done.stderr
    assert {STARTUP, "metadata", "level 0", "pyramid", "final swap", OTHER} <= set(table.seconds)
    assert table.seconds[STARTUP] > 0.1  # the interpreter and numpy, zarr, dask at least
    assert sum(table.seconds.values()) == pytest.approx(table.total, abs=0.05)
    quiet = subprocess.run(
        [*command, str(tmp_path / "again.ome.zarr")], capture_output=True, text=True, cwd=ROOT
    )
    assert quiet.returncode == 0 and parse_table(quiet.stderr) is None


def test_main_called_from_python_leaves_the_start_up_out(tmp_path: Path, capsys) -> None:
    from linumpy.mosaic.demo import make_demo_data
    from linumpy.scripts.linum_aip import main

    make_demo_data(tmp_path / "grid.ome.zarr", grid_shape=(1, 2), tile_shape=(8, 16, 16))
    started = time.perf_counter()
    main([str(tmp_path / "grid.ome.zarr"), str(tmp_path / "aip.ome.zarr"), "-v"])
    elapsed = time.perf_counter() - started
    table = parse_table(capsys.readouterr().err)
    # the call's own time (its lazy imports as start-up), not the process's age
    assert table is not None and table.total <= elapsed + 0.01
    assert "level 0" in table.seconds and phases.active() is None
