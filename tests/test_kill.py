"""Kill tests: SIGKILL at random points of writes over an existing output.

Each target (``save_omezarr``, ``OmeZarrWriter``, and the scripts ``linum-stitch-3d``,
``linum-aip``, ``linum-convert-to-omezarr``) runs as a real process with the venv's python. It
alternately writes one of two different outputs over the other; it is killed with SIGKILL after
a random delay once its staging directory exists (children start ahead and wait for their turn,
so that interpreter starts overlap). After each kill the output must read back
exactly as one complete version, the old one unless the kill came after the swap (every level
and the axes compared), and a rerun (in the test's process, to save the interpreter's start) must
succeed, write the new version and leave no staging behind.

``LINUMPY_KILL_N`` sets the kills per target (default 10), spread over two outputs written side
by side.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from linumpy.io import read_volume, save_omezarr
from linumpy.io.omezarr import read_axes, read_omezarr
from linumpy.io.recovery import (
    HOST,
    PREFIX_CHARS,
    STAGING_SUFFIX,
    clean_staging,
    read_json,
    recover_staging,
    started,
)
from linumpy.mosaic.demo import make_demo_data, read_demo_truth

N_KILLS = int(os.environ.get("LINUMPY_KILL_N", "10"))
LANES = 2  # outputs killed side by side, each N_KILLS / LANES times

# Library writes: ``write(output, variant)``, run in a child as ``python -c CODE OUTPUT VARIANT``.
SAVE_CODE = textwrap.dedent(
    """
    import sys
    import numpy as np
    from linumpy.io import save_omezarr

    def write(out, variant):
        data = np.random.default_rng(variant).integers(0, 4000, (32, 96, 96), dtype=np.uint16)
        save_omezarr(data, out, voxel_size=(2, 1, 1), chunks=(8, 32, 32), n_levels=3,
                     unit="nanometer", overwrite=True)
    """
)
WRITER_CODE = textwrap.dedent(
    """
    import sys
    import numpy as np
    from linumpy.io import OmeZarrWriter

    def write(out, variant):
        rng = np.random.default_rng(variant)
        with OmeZarrWriter(out, (32, 96, 96), np.float32, voxel_size=(1, 1, 1), chunks=(8, 32, 32),
                           shards=(16, 64, 64), n_levels=2, overwrite=True) as writer:
            for z in range(0, 32, 4):
                writer[z : z + 4] = rng.normal(size=(4, 96, 96)).astype(np.float32)
    """
)
# A child imports what it needs, then waits for a line on stdin before it writes: its
# interpreter start (most of its time) overlaps the previous kill's checks.
MAIN = (
    "\nif __name__ == '__main__':\n"
    "    sys.stdin.readline()\n"
    "    write(sys.argv[1], int(sys.argv[2]))\n"
)
# A script runs as ``python -m`` runs it (runpy, as __main__), once its imports are done.
SCRIPT = (
    "import runpy, sys\n"
    "import linumpy.io, linumpy.mosaic.pipeline, linumpy.scripts.{name}\n"
    "sys.stdin.readline()\n"
    "runpy.run_module('linumpy.scripts.{name}', run_name='__main__', alter_sys=True)\n"
)


def _python(*args: object) -> list[str]:
    return [sys.executable, *map(str, args)]


class Library:
    """A library write: in a child process, or (reruns) in this one."""

    def __init__(self, code: str) -> None:
        self.code = code
        namespace: dict[str, object] = {}
        exec(code, namespace)
        self.write = namespace["write"]

    def argv(self, inputs: Path, variant: int, out: Path) -> list[str]:
        return _python("-c", self.code + MAIN, out, variant)

    def rerun(self, inputs: Path, variant: int, out: Path) -> None:
        self.write(str(out), variant)  # type: ignore[operator]


class Script:
    """A script run as ``python -m linumpy.scripts.NAME`` would run it (reruns call its ``main``
    here)."""

    def __init__(self, name: str, args: Callable[[Path, int, Path], list[object]]) -> None:
        self.name, self.args = name, args

    def argv(self, inputs: Path, variant: int, out: Path) -> list[str]:
        code = SCRIPT.format(name=self.name)
        return _python("-c", code, *self.args(inputs, variant, out))

    def rerun(self, inputs: Path, variant: int, out: Path) -> None:
        main = importlib.import_module(f"linumpy.scripts.{self.name}").main
        main([str(a) for a in self.args(inputs, variant, out)])


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two demo mosaic grids, their transform, and two .npy volumes."""
    folder = tmp_path_factory.mktemp("kill-inputs")
    for seed in (0, 1):
        make_demo_data(
            folder / f"mosaic{seed}.ome.zarr", grid_shape=(2, 3), tile_shape=(16, 64, 64), seed=seed
        )
        rng = np.random.default_rng(seed)
        np.save(folder / f"volume{seed}.npy", rng.integers(0, 4000, (32, 96, 96), dtype=np.uint16))
    read_demo_truth(folder / "mosaic0.ome.zarr").save(folder / "transform.json")
    return folder


TARGETS: dict[str, Library | Script] = {
    "save_omezarr": Library(SAVE_CODE),
    "OmeZarrWriter": Library(WRITER_CODE),
    "linum-stitch-3d": Script(
        "linum_stitch_3d",
        lambda d, v, out: (
            [d / "mosaic0.ome.zarr", d / "transform.json", out, "-f"]
            + ["--blending", ("none", "linear")[v], "--n-levels", "2"]
        ),
    ),
    "linum-aip": Script(
        "linum_aip", lambda d, v, out: [d / f"mosaic{v}.ome.zarr", out, "-f", "--n-levels", "2"]
    ),
    "linum-convert-to-omezarr": Script(
        "linum_convert_to_omezarr",
        lambda d, v, out: (
            [d / f"volume{v}.npy", out, "-f", "--chunks", "16", "32", "32"] + ["--n-levels", "2"]
        ),
    ),
}


def snapshot(path: Path) -> tuple[list[np.ndarray], tuple, list[tuple[float, ...]]]:
    """Every level's data, the axes and the voxel sizes of an OME-Zarr image."""
    levels, voxel_sizes, level = [], [], 0
    while True:
        try:
            _, voxel_size = read_omezarr(path, level)
        except Exception:
            break
        levels.append(read_volume(path, level=level))
        voxel_sizes.append(voxel_size)
        level += 1
    return levels, read_axes(path), voxel_sizes


def same(a: tuple, b: tuple) -> bool:
    return (
        len(a[0]) == len(b[0])
        and all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a[0], b[0]))
        and a[1:] == b[1:]
    )


def staging_of(folder: Path, name: str, pid: int | None = None) -> list[str]:
    """The staging folders of ``name`` in ``folder`` (of the writer ``pid`` only, if given)."""
    prefix = f".{name[:PREFIX_CHARS]}."
    entries = [e for e in os.listdir(folder) if e.startswith(prefix) and e.endswith(STAGING_SUFFIX)]
    if pid is None:
        return entries
    return [e for e in entries if (read_json(folder / e / "owner") or {}).get("pid") == pid]


def spawn(argv: list[str]) -> subprocess.Popen:
    """Start a child; it waits for :func:`go_and_kill` before writing."""
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True
    )
    proc.log = log  # type: ignore[attr-defined]
    return proc


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    proc.log.close()  # type: ignore[attr-defined]


def go_and_kill(
    proc: subprocess.Popen, folder: Path, name: str, delay: float
) -> tuple[str, float | None]:
    """Let ``proc`` write; once its staging directory exists, wait ``delay`` s and SIGKILL it.

    Returns "killed" or "finished", and how long the staging directory existed (the write until
    its commit), None if it still did at the kill.
    """
    try:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # a child that failed: its error follows
            proc.stdin.write(b"go\n")
            proc.stdin.close()
        while not staging_of(folder, name, proc.pid) and proc.poll() is None:
            time.sleep(0.001)
        staged = time.perf_counter()
        committed = None
        while proc.poll() is None:
            now = time.perf_counter()
            if now - staged >= delay:
                stop(proc)
                return "killed", committed
            if committed is None and not staging_of(folder, name, proc.pid):
                committed = now - staged
            time.sleep(0.001)
        if proc.returncode:
            proc.log.seek(0)  # type: ignore[attr-defined]
            raise AssertionError(proc.log.read().decode()[-2000:])  # type: ignore[attr-defined]
        # a run too fast to see its staging go (or a starved poll): the whole run bounds it
        return "finished", committed or time.perf_counter() - staged
    finally:
        stop(proc)


def _age_ownerless_staging(folder: Path) -> None:
    """A kill between a staging folder's creation and its owner file leaves a folder that
    recovery leaves alone while it is young (its writer may be creating it): aged past that, it
    must be removed."""
    young = [
        folder / e
        for e in os.listdir(folder)
        if e.endswith(STAGING_SUFFIX) and not (folder / e / "owner").exists()
    ]
    if young:
        old = time.time() - 3600
        for path in young:
            os.utime(path, (old, old))
        clean_staging(folder)


def kill_loop(
    writer: Library | Script,
    inputs: Path,
    versions: list[tuple],
    output: Path,
    kills: int,
    seed: int,
    window: list[float],
) -> Counter[str]:
    """``kills`` times: a write of the other version over ``output``, killed at a random time
    within 1.25 ``window[0]`` of its staging's creation (shortened when a child finishes first);
    the output must be one whole version; a rerun must finish cleanly."""
    rng = np.random.default_rng(seed)
    outcomes: Counter[str] = Counter()
    # all children start at once, and wait: their interpreters start while the others run
    children = [spawn(writer.argv(inputs, k % 2, output)) for k in range(kills)]
    try:
        for k, child in enumerate(children):
            new, current = k % 2, 1 - k % 2
            # Mostly inside the write (the point of the test), sometimes just after its commit;
            # writes run slower beside the other children.
            delay = rng.uniform(0, 1.25 * window[0])
            how, committed = go_and_kill(child, output.parent, output.name, delay)
            if how == "finished" and committed is not None:  # writes got faster: aim shorter
                window[0] = min(window[0], committed)
            if not output.exists():  # killed between two renames: what the next write recovers
                recover_staging(output)  # (a reader only names the staging folder)
            after = snapshot(output)
            if same(after, versions[current]):
                outcomes[f"{how}: old version"] += 1
            elif same(after, versions[new]):
                outcomes[f"{how}: new version"] += 1
            else:
                raise AssertionError(f"after a kill the output is neither version ({outcomes})")
            assert how == "killed" or same(after, versions[new])
            # a rerun succeeds, writes the new version and removes what the kill left
            writer.rerun(inputs, new, output)
            assert same(snapshot(output), versions[new])
            _age_ownerless_staging(output.parent)
            assert [e for e in os.listdir(output.parent) if e.startswith(".")] == []
    finally:
        for child in children:
            stop(child)
    return outcomes


@pytest.mark.parametrize("target", TARGETS)
def test_sigkill_during_a_write_never_loses_the_output(
    tmp_path: Path, inputs: Path, target: str
) -> None:
    writer = TARGETS[target]
    versions = []
    for variant in (0, 1):
        reference = tmp_path / f"reference{variant}.ome.zarr"
        writer.rerun(inputs, variant, reference)
        versions.append(snapshot(reference))
    assert not same(versions[0], versions[1])
    outputs = [tmp_path / f"lane{lane}" / "image.ome.zarr" for lane in range(LANES)]
    for output in outputs:
        shutil.copytree(tmp_path / "reference1.ome.zarr", output)
    # how long a write's staging exists (until the commit), in a write over an existing output
    _, window = go_and_kill(
        spawn(writer.argv(inputs, 0, outputs[0])), outputs[0].parent, outputs[0].name, 600
    )
    assert window is not None
    assert same(snapshot(outputs[0]), versions[0]), "the calibration write did not finish well"
    writer.rerun(inputs, 1, outputs[0])
    seed, aim = sum(map(ord, target)), [window]
    with ThreadPoolExecutor(LANES) as pool:
        lanes = [
            pool.submit(
                kill_loop, writer, inputs, versions, output, -(-N_KILLS // LANES), seed + i, aim
            )
            for i, output in enumerate(outputs)
        ]
        outcomes = sum((lane.result() for lane in lanes), Counter())
    killed = sum(n for key, n in outcomes.items() if key.startswith("killed"))
    assert sum(outcomes.values()) >= N_KILLS
    # Kills that land after a write committed test less; a quarter must land inside (with the
    # aim above about four in five do, but a loaded machine makes writes shorter or longer).
    assert killed >= N_KILLS // 4, dict(outcomes)
    print(
        f"{target}: {dict(outcomes)} (staging existed {window:.2f} s, "
        f"kills within {2 * aim[0]:.2f} s)"
    )


# -- kills at each step of the commit -----------------------------------------------------------

# A driver forks one child per case; the child stops itself with SIGKILL at the case's commit step
# (linumpy.io.staging.step_hook) while it writes the new version over the old one. The driver
# itself never writes: a fork after zarr's I/O thread started could hang.
STEP_DRIVER = textwrap.dedent(
    """
    import json, os, signal, sys
    import numpy as np
    from linumpy.io import save_omezarr, staging

    def write(kind, target):
        if kind == "image":
            save_omezarr(np.full((8, 32, 32), 2, np.uint16), target, voxel_size=(1, 1, 1),
                         chunks=(4, 16, 16), n_levels=2, overwrite=True)
        else:
            with staging.staged(target) as path:
                path.write_text("new")

    for case in json.loads(sys.argv[1]):
        pid = os.fork()
        if pid == 0:
            staging._exchange_supported = case["exchange"]
            def stop(step, wanted=case["step"]):
                if step == wanted:
                    os.kill(os.getpid(), signal.SIGKILL)
            staging.step_hook = stop
            write(case["kind"], case["target"])
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"target": case["target"], "killed": os.WIFSIGNALED(status)}))
    """
)
BEFORE_SWAP = ("flush", "ready", "swap")
AFTER_SWAP = ("exchanged", "swapped", "trash", "remove")


def _version(kind: str, path: Path) -> str | None:
    """``"old"``, ``"new"`` or ``"absent"``; anything else fails the test."""
    if not path.exists():
        return "absent"
    if kind == "file":
        text = path.read_text()
        assert text in ("old", "new"), text
        return text
    levels, axes, voxel_sizes = snapshot(path)
    assert len(levels) == 2 and axes and voxel_sizes, path
    values = {int(v) for level in levels for v in np.unique(level)}
    assert values in ({1}, {2}), values  # a whole version: every level of one of them
    return "old" if values == {1} else "new"


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
@pytest.mark.parametrize("kind", ["image", "file"])
def test_sigkill_at_each_commit_step(tmp_path: Path, kind: str, exchange: bool) -> None:
    """Killed at every step of the commit, a replacement leaves the whole old or the whole new
    version; when the target is then moved away, recovery brings back only a complete new
    version, never the old one (perhaps half deleted) that the staging folder held."""
    steps = [*BEFORE_SWAP, *(["swap-half"] if exchange is False and kind == "image" else [])]
    steps += AFTER_SWAP
    cases = []
    for step in steps:
        for moved in (False, True):
            target = tmp_path / f"{step}-{'moved' if moved else 'stay'}" / "out.ome.zarr"
            target.parent.mkdir()
            if kind == "image":
                save_omezarr(
                    np.full((8, 32, 32), 1, np.uint16),
                    target,
                    voxel_size=(1, 1, 1),
                    chunks=(4, 16, 16),
                    n_levels=2,
                )
            else:
                target.write_text("old")
            cases.append({"kind": kind, "target": str(target), "step": step, "exchange": exchange})
    run = subprocess.run(
        _python("-c", STEP_DRIVER, json.dumps(cases)), capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    reports = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(reports) == len(cases) and all(r["killed"] for r in reports), run.stderr[-3000:]
    for case in cases:
        target, step = Path(case["target"]), case["step"]
        moved = target.parent.name.endswith("-moved")
        assert staging_of(target.parent, target.name), f"{step}: the kill left no staging"
        if moved and target.exists():
            os.rename(target, target.parent / "moved")
        recover_staging(target)  # what the next write, clean_staging, or -f do
        found = _version(kind, target)
        if step == "swap-half":
            expected = "new"  # killed between the two renames: the complete new version wins
        elif moved:
            expected = "new" if step in ("ready", "swap") else "absent"
        else:
            expected = "old" if step in BEFORE_SWAP else "new"
        assert found == expected, f"killed at {step}{' then moved' if moved else ''}: {found}"
        assert staging_of(target.parent, target.name) == [], step
        if moved and step not in ("swap-half",):
            swapped = step in AFTER_SWAP
            assert _version(kind, target.parent / "moved") == ("new" if swapped else "old")


# -- liveness of a staging folder's writer -------------------------------------------------------

STAGE_AND_DIE = textwrap.dedent(
    """
    import os, signal, sys
    from linumpy.io.staging import StagedWrite
    write = StagedWrite(sys.argv[1])
    write.path.write_text("half")
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` is a zombie whose threads have all exited (its files are closed then)."""
    state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    return state == "Z" and os.listdir(f"/proc/{pid}/task") == [str(pid)]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_killed_writer_left_a_zombie_counts_as_gone(tmp_path: Path) -> None:
    """A writer killed but not yet reaped by its parent (a zombie) still has its pid; its
    staging folder is cleaned all the same (its lock went with it)."""
    target = tmp_path / "out.txt"
    target.write_text("old")
    child = subprocess.Popen(_python("-c", STAGE_AND_DIE, target))
    try:
        deadline = time.monotonic() + 60
        while not _zombie(child.pid):  # not child.poll(): it would reap the zombie
            assert time.monotonic() < deadline, "the child did not die"
            time.sleep(0.01)
        assert staging_of(tmp_path, target.name, child.pid)
        actions = recover_staging(target)
        assert staging_of(tmp_path, target.name) == [] and target.read_text() == "old", actions
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("locks", [True, False], ids=["locks", "no-locks"])
def test_a_pid_reused_by_another_process_is_not_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, locks: bool
) -> None:
    """A staging folder whose recorded pid now runs an unrelated program (no lock held) is
    cleaned, not left forever; without locks, the pid's start time tells."""
    if not locks:
        import fcntl

        def no_locks(fd: int, operation: int) -> None:
            raise OSError(errno.ENOLCK, "no locks available")

        monkeypatch.setattr(fcntl, "flock", no_locks)
    target = tmp_path / "out.ome.zarr"
    sleeper = subprocess.Popen(_python("-c", "import time; time.sleep(60)"))
    try:
        stale = tmp_path / f".{target.name}.0badf00d{STAGING_SUFFIX}"
        (stale / "new" / target.name).mkdir(parents=True)
        owner = {"target": target.name, "pid": sleeper.pid, "host": HOST, "started": 1}
        (stale / "owner").write_text(json.dumps(owner))
        if not locks:  # the pid's own start time: a live writer, left alone
            (stale / "owner").write_text(json.dumps({**owner, "started": started(sleeper.pid)}))
            assert recover_staging(target) == [] and stale.exists()
            (stale / "owner").write_text(json.dumps({**owner, "host": "another-host"}))
            assert recover_staging(target) == [
                f"{stale}: left alone: its writer runs on another-host"
            ]
            (stale / "owner").write_text(json.dumps(owner))
        assert recover_staging(target) == [f"{stale}: removed"]
    finally:
        sleeper.kill()
        sleeper.wait()
    if not locks:  # a pid that no longer runs
        (stale / "new").mkdir(parents=True)
        (stale / "owner").write_text(json.dumps(owner))
        assert recover_staging(target) == [f"{stale}: removed"]


@pytest.mark.parametrize("name", ["a@b.ome.zarr", "x.1@host-2.ome.zarr", "é @#.txt"])
def test_names_with_at_signs_are_recovered(tmp_path: Path, name: str) -> None:
    """A new output killed after it was complete (state "ready") is restored by clean_staging of
    its folder, whatever its name holds (the target's name is read from the staging folder)."""
    target = tmp_path / name
    code = (
        "import os, signal, sys\n"
        "from linumpy.io import staging\n"
        "def stop(step):\n"
        "    if step == 'ready':\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "staging.step_hook = stop\n"
        "with staging.staged(sys.argv[1]) as path:\n"
        "    path.write_text('new')\n"
    )
    run = subprocess.run(_python("-c", code, target), capture_output=True, timeout=120)
    assert run.returncode == -signal.SIGKILL, run.stderr
    assert not target.exists()
    actions = clean_staging(tmp_path)
    assert target.read_text() == "new", actions
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
