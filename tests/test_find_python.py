"""The Makefile's interpreter discovery (.ci/find-python)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / ".ci" / "find-python"


def run(path: str, home: Path, python: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path, "HOME": str(home), "PYENV_ROOT": str(home / "pyenv")}
    if python:
        env["PYTHON"] = python
    return subprocess.run(
        ["/bin/bash", str(SCRIPT)], env=env, capture_output=True, text=True, check=False
    )


def fake_python(directory: Path, name: str, version: tuple[int, int]) -> Path:
    """A stand-in interpreter that reports ``version`` the way find-python asks."""
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / name
    exe.write_text(f"#!/bin/sh\nexit {0 if version >= (3, 12) else 1}\n")
    exe.chmod(0o755)
    return exe


def test_finds_this_interpreter_when_given() -> None:
    result = run("/usr/bin:/bin", Path("/nonexistent"), python=sys.executable)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == sys.executable


def test_skips_old_and_broken_candidates_then_uses_pyenv(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_python(bin_dir, "python3", (3, 11))
    shim = bin_dir / "python3.12"
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.12: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    good = fake_python(tmp_path / "pyenv" / "versions" / "3.12.1" / "bin", "python3", (3, 12))
    result = run(f"{bin_dir}:/usr/bin:/bin", tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(good)


def test_says_clearly_when_there_is_none(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_python(bin_dir, "python3", (3, 11))
    result = run(f"{bin_dir}:/bin", tmp_path)
    assert result.returncode == 1
    assert "no Python >= 3.12 found" in result.stderr
    assert "PYTHON=" in result.stderr
    assert os.fspath(bin_dir / "python3") in result.stderr
