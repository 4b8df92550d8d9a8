"""Compiling the GPU kernels of the pipeline ahead of the first job (--prepare-kernels)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import gpu_missing_reason


def _prepare() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "linumpy.scripts.linum_gpu_info", "--prepare-kernels"],
        capture_output=True,
        text=True,
    )


def test_without_a_gpu_the_command_says_what_is_missing() -> None:
    if gpu_missing_reason() is None:
        pytest.skip("a GPU is usable here")
    done = _prepare()
    assert done.returncode == 2
    assert "prepare_gpu_kernels needs an NVIDIA GPU" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.gpu
def test_a_second_preparation_compiles_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home"))  # linumpy's cubins, empty
    first = _prepare()
    assert first.returncode == 0, first.stderr
    assert "kernels:" in first.stdout
    assert int(first.stdout.split("kernels: ")[1].split()[0]) > 0
    second = _prepare()
    assert second.returncode == 0, second.stderr
    assert "kernels: 0 compiled" in second.stdout
