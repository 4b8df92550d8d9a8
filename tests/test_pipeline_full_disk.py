"""``linum-mosaic-pipeline`` on an output that does not fit: exit 2 with one line naming the output.

The write fails at the OS level, in a process of its own: on a tmpfs too small for the stitched
image (mounted in a mount namespace of the process's own, where ``unshare`` may; skipped where it
may not), and under a file size limit (``ulimit -f``: the write fails with EFBIG).
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from linumpy.mosaic.demo import make_demo_data

MODULE = "linumpy.scripts.linum_mosaic_pipeline"
#: Outputs in the order the pipeline writes them.
NAMES = ("transform.json", "stitched.ome.zarr", "stitched_aip.ome.zarr")


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("grid") / "grid.ome.zarr"
    make_demo_data(path, grid_shape=(2, 3), tile_shape=(8, 64, 64))
    return path


def _unshare() -> list[str]:
    """The ``unshare`` command giving a process a mount namespace of its own (as root, or in a
    user namespace of its own); skips the test where there is none."""
    if sys.platform != "linux" or shutil.which("unshare") is None:
        pytest.skip("unshare(1) is needed to mount a small tmpfs")
    command = ["unshare", "--mount"]
    if os.geteuid() != 0:
        command[1:1] = ["--user", "--map-root-user"]
    probe = subprocess.run(
        [*command, "mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", "/tmp"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"no tmpfs can be mounted here: {probe.stderr.decode().strip()}")
    return command


def _run(
    argv: list[str], prefix: list[str] | None = None, **kwargs: object
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*(prefix or []), sys.executable, "-m", MODULE, *argv],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )


def _assert_named(
    run: subprocess.CompletedProcess, out: Path, reason: str, written: list[str]
) -> None:
    """Exit 2, one error line (after the progress bars) naming an output after transform.json,
    and in ``out`` only the outputs written before it (no staging left)."""
    assert run.returncode == 2, run.stderr
    errors = [line for line in run.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and run.stderr.strip().endswith(errors[0]), run.stderr
    named = [name for name in NAMES if f"cannot write {str(out / name)!r}: {reason}" in errors[0]]
    assert named and named[0] != "transform.json", errors[0]
    assert sorted(written) == sorted(NAMES[: NAMES.index(named[0])]), written


def test_full_disk_names_the_output(grid: Path, tmp_path: Path) -> None:
    """The stitched image (or its projection) fills a 240 KiB tmpfs: exit 2 naming it. The
    tmpfs holds more than a quarter of the stitched image's bytes, so that the check of free
    space before the stitch lets it start."""
    command = _unshare()
    mount, left = tmp_path / "full", tmp_path / "left.txt"
    mount.mkdir()
    out = mount / "job"
    script = (
        f'mount -t tmpfs -o size=240k tmpfs "{mount}" || exit 99; "$@"; status=$?; '
        f'ls -A "{out}" > "{left}"; exit $status'
    )
    run = _run([str(grid), str(out), "--no-use-gpu"], [*command, "sh", "-c", script, "sh"])
    _assert_named(run, out, "No space left on device", left.read_text().split())
    assert not any(mount.iterdir())  # the tmpfs went with its namespace


def _limited(limit: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_file_size_limit_names_the_output(grid: Path, tmp_path: Path) -> None:
    """Under a 16 KiB file size limit, transform.json is written and the stitched image's
    first shard is not: exit 2 naming the stitched image, transform.json kept."""
    out = tmp_path / "job"
    run = _run([str(grid), str(out), "--no-use-gpu"], preexec_fn=_limited(16 * 1024))
    _assert_named(run, out, "File too large", [p.name for p in out.iterdir()])
    assert (out / "transform.json").stat().st_size > 0
