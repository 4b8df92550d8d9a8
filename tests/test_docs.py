"""The documentation builds without warnings, documents every public object and script, and its
examples run.

The site is built once per test run from a copy of ``docs/`` in a temporary directory (the build
generates pages into its source tree, and several builds may run at once in one checkout).
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

import linumpy

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# Modules whose examples need a GPU: their doctests run only where one is present.
GPU_PACKAGE = "linumpy.gpu"


def _public_modules() -> list[str]:
    """Every module of the package whose dotted name has no private part."""
    names = ["linumpy"]
    for info in pkgutil.walk_packages(linumpy.__path__, "linumpy."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    # The scripts install as linumpy.scripts from the top-level scripts/ folder.
    names.append("linumpy.scripts")
    names += [f"linumpy.scripts.{path.stem}" for path in (ROOT / "scripts").glob("linum_*.py")]
    return sorted(names)


def _public_names(module: ModuleType) -> list[str]:
    """``__all__`` less dunders (``__version__``), or the public names the module defines."""
    if hasattr(module, "__all__"):
        return [name for name in module.__all__ if not name.startswith("__")]
    return [
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
    ]


def _script_commands() -> dict[str, str]:
    """Console command of every ``scripts/linum_*.py``, by module stem."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    by_module = {target.split(":")[0]: name for name, target in project["scripts"].items()}
    return {
        path.stem: by_module.get(f"linumpy.scripts.{path.stem}", path.stem.replace("_", "-"))
        for path in sorted((ROOT / "scripts").glob("linum_*.py"))
    }


@pytest.fixture(scope="session")
def built_docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the HTML site with warnings as errors; return the output directory."""
    pytest.importorskip("sphinx", reason="sphinx is not installed (the docs extra)")
    work = tmp_path_factory.mktemp("docs")
    source = work / "src"
    shutil.copytree(DOCS, source, ignore=shutil.ignore_patterns("_build", "api", "dev"))
    html = work / "html"
    env = {**os.environ, "LINUMPY_DOCS_ROOT": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
        + ["-d", str(work / "doctrees"), str(source), str(html)],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
    )
    assert result.returncode == 0, (
        f"sphinx-build failed (exit {result.returncode}):\n{result.stderr[-20000:]}"
    )
    return html


def _inventory(html: Path) -> set[str]:
    from sphinx.util.inventory import InventoryFile

    with open(html / "objects.inv", "rb") as stream:
        inventory = InventoryFile.load(stream, "", os.path.join)
    return {
        name for kind, entries in inventory.items() if kind.startswith("py:") for name in entries
    }


def test_docs_build_without_warnings(built_docs: Path) -> None:
    for page in ("index", "install", "quickstart", "gpu_guide", "scripts", "benchmarks", "api"):
        assert (built_docs / f"{page}.html").is_file(), page
    notebook = built_docs / "notebooks" / "tile_stitching.html"
    assert notebook.is_file()
    # Rendered from the committed outputs: the notebook's figures are on the page.
    assert "<img" in notebook.read_text()


def test_every_public_object_has_a_page(built_docs: Path) -> None:
    documented = _inventory(built_docs)
    missing = []
    for module_name in _public_modules():
        module = importlib.import_module(module_name)
        for name in _public_names(module):
            value = getattr(module, name)
            # A re-exported object is documented once: under the package that exports it, or,
            # for the root package's conveniences, where it is defined.
            candidates = {f"{module_name}.{name}"}
            home = getattr(value, "__module__", None)
            if home and home.startswith("linumpy") and not inspect.ismodule(value):
                parts = home.split(".")
                candidates |= {".".join(parts[:i] + [name]) for i in range(2, len(parts) + 1)}
            if not candidates & documented:
                missing.append(f"{module_name}.{name}")
    assert not missing, f"public objects without an API entry: {missing}"
    for module_name in ("linumpy.io", "linumpy.gpu.nvcomp_zstd", "linumpy.gpu.zarr_io"):
        assert module_name in documented


def test_every_public_function_and_class_has_an_example() -> None:
    missing = []
    for module_name in _public_modules():
        module = importlib.import_module(module_name)
        for name in _public_names(module):
            value = getattr(module, name)
            documented_here = getattr(value, "__module__", None) == module_name and (
                inspect.isfunction(value) or inspect.isclass(value)
            )
            if documented_here and "Examples" not in (inspect.getdoc(value) or ""):
                missing.append(f"{module_name}.{name}")
    assert not missing, f"public objects without an Examples section: {missing}"


def test_every_script_has_a_page_with_an_example(built_docs: Path) -> None:
    commands = _script_commands()
    assert commands, "no scripts/linum_*.py found"
    for stem, command in commands.items():
        page = built_docs / "api" / "scripts" / f"{command}.html"
        assert page.is_file(), f"{stem}: no page {page.name}"
        text = page.read_text()
        examples = text.split('id="examples"', 1)
        assert len(examples) == 2 and "highlight-bash" in examples[1], f"{command}: no example"
        assert command in examples[1], f"{command}: the example does not run {command}"


def _docstring_tests(module_name: str) -> list[doctest.DocTest]:
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    # Examples marked "+SKIP" are not run (and not counted): keep docstrings with others.
    return [
        test
        for test in finder.find(module)
        if any(not example.options.get(doctest.SKIP) for example in test.examples)
    ]


def _modules_with_examples() -> list[pytest.param]:
    params = []
    for name in _public_modules() + ["linumpy.gpu._coalesce", "linumpy.gpu._xxhash"]:
        if not _docstring_tests(name):
            continue
        marks = [pytest.mark.gpu] if name.startswith(GPU_PACKAGE) else []
        params.append(pytest.param(name, id=name, marks=marks))
    return params


def _run(tests: list[doctest.DocTest]) -> doctest.TestResults:
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test)
    return doctest.TestResults(runner.failures, runner.tries)


@pytest.fixture
def scratch_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Examples write files: into a temporary working directory and temporary-file root."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("module_name", _modules_with_examples())
def test_docstring_examples(module_name: str, scratch_dir: Path) -> None:
    failed, attempted = _run(_docstring_tests(module_name))
    assert attempted > 0
    assert failed == 0, f"{failed} of {attempted} examples in {module_name} failed (output above)"


def _page_tests(path: Path) -> doctest.DocTest:
    # Code fences are not part of an example's expected output.
    text = re.sub(r"(?m)^\s*```.*$", "", path.read_text())
    return doctest.DocTestParser().get_doctest(text, {}, path.name, str(path), 0)


@pytest.mark.parametrize(
    "page", sorted(p.name for p in DOCS.glob("*.md") if ">>> " in p.read_text())
)
def test_page_examples(page: str, scratch_dir: Path) -> None:
    failed, attempted = _run([_page_tests(DOCS / page)])
    assert attempted > 0
    assert failed == 0, f"{failed} of {attempted} examples in docs/{page} failed (output above)"
