"""What a benchmark's results say about the run: linumpy's version and commit, the command line,
the versions of the pipeline's other packages (the machine: :func:`linumpy.bench.run.machine_info`).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import shlex
import subprocess
import sys
from pathlib import Path

__all__ = ["run_info"]


def run_info() -> dict[str, str]:
    """linumpy's version and commit, the command line, and the pipeline's other versions.

    Examples
    --------
    >>> from linumpy.bench.provenance import run_info
    >>> info = run_info()
    >>> "linumpy" in info and "command" in info
    True
    """
    from linumpy import __version__

    program = Path(sys.argv[0]).stem.replace("_", "-")  # linum-benchmark-pipeline, run with -m too
    info = {"linumpy": __version__, "command": shlex.join([program, *sys.argv[1:]])}
    for name in ("dask", "scipy"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            info[name] = importlib.metadata.version(name)
    root = Path(__file__).resolve().parents[2]
    git = ["git", "-C", str(root)]
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        commit = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if commit.returncode == 0:
            dirty = subprocess.run(
                [*git, "status", "--porcelain", "-uno"], capture_output=True, text=True, timeout=10
            )
            info["commit"] = commit.stdout.strip() + (" (with changes)" if dirty.stdout else "")
    return info
