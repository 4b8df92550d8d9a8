"""The package as built: one top-level package, every subpackage listed, scripts installed."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import linumpy

ROOT = Path(__file__).resolve().parent.parent


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_subpackage_is_listed_for_the_wheel() -> None:
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    found = {
        ".".join(path.parent.relative_to(ROOT).parts)
        for path in (ROOT / "linumpy").rglob("__init__.py")
    }
    assert found | {"linumpy.scripts"} == listed


def test_version_is_written_once() -> None:
    project = _pyproject()["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    assert _pyproject()["tool"]["setuptools"]["dynamic"]["version"]["attr"] == "linumpy.__version__"
    assert linumpy.__version__.count(".") == 2


def test_every_script_prints_its_version() -> None:
    for name, target in _pyproject()["project"]["scripts"].items():
        module = target.split(":")[0]
        assert module.startswith("linumpy.scripts."), name
        out = subprocess.run(
            [sys.executable, "-m", module, "--version"], capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == f"{name} {linumpy.__version__}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = out.glob("linumpy-*.whl")
    return path


def test_the_wheel_holds_only_linumpy(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.startswith("linumpy-")}
    assert tops == {"linumpy"}
    assert "linumpy/scripts/linum_aip.py" in names
    assert "linumpy/py.typed" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "linum-aip = linumpy.scripts.linum_aip:main" in text
