"""The documentation builds without warnings, documents every public object and script, and its
examples run.

The site is built once per test run from a copy of ``docs/`` in a temporary directory (the build
generates pages into its source tree, and several builds may run at once in one checkout).
"""

from __future__ import annotations

import ast
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


def _all_modules() -> list[str]:
    """Every module of the package, internal ones included, and the scripts."""
    names = ["linumpy"]
    names += [info.name for info in pkgutil.walk_packages(linumpy.__path__, "linumpy.")]
    # The scripts install as linumpy.scripts from the top-level scripts/ folder.
    names.append("linumpy.scripts")
    names += [f"linumpy.scripts.{path.stem}" for path in (ROOT / "scripts").glob("linum_*.py")]
    return sorted(names)


def _api_patterns() -> tuple[str, ...]:
    """docs/conf.py's ``api_modules``: the public API, written there once (read statically, as
    conf.py builds files when it runs)."""
    tree = ast.parse((DOCS / "conf.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "api_modules" for target in node.targets
        ):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError("docs/conf.py defines no api_modules")


def _in_api(module: str, patterns: tuple[str, ...]) -> bool:
    """Whether ``module`` is one of ``patterns`` (``pkg.*``: a package and all its modules)."""
    return any(
        module == name or (name.endswith(".*") and (module + ".").startswith(name[:-1]))
        for name in patterns
    )


def _public_modules() -> list[str]:
    """The modules of the public API (docs/conf.py's ``api_modules``), existing ones only."""
    patterns = _api_patterns()
    return [name for name in _all_modules() if _in_api(name, patterns)]


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


def _without_examples(modules: list[ModuleType]) -> list[str]:
    """The functions and classes ``modules`` export without an Examples section, where they are
    defined or re-exported (``linumpy.io`` re-exports what its modules define)."""
    missing = []
    for module in modules:
        for name in _public_names(module):
            value = getattr(module, name)
            home = getattr(value, "__module__", None) or ""
            exported_here = home == module.__name__ or home.startswith(module.__name__ + ".")
            if (
                exported_here
                and (inspect.isfunction(value) or inspect.isclass(value))
                and "Examples" not in (inspect.getdoc(value) or "")
            ):
                missing.append(f"{module.__name__}.{name}")
    return missing


def test_every_public_function_and_class_has_an_example() -> None:
    modules = [importlib.import_module(name) for name in _public_modules()]
    missing = _without_examples(modules)
    assert not missing, f"public objects without an Examples section: {missing}"


def test_the_examples_rule_finds_a_missing_example() -> None:
    module = ModuleType("linumpy_probe")

    def documented() -> None:
        """Documented.

        Examples
        --------
        >>> documented()
        """

    def bare() -> None:
        """No example."""

    for function in (documented, bare):
        function.__module__ = module.__name__
        setattr(module, function.__name__, function)
    module.__all__ = ["bare", "documented"]  # type: ignore[attr-defined]
    assert _without_examples([module]) == ["linumpy_probe.bare"]


def test_the_public_api_is_the_listed_modules() -> None:
    public = set(_public_modules())
    for name in ("linumpy.io", "linumpy.settings", "linumpy.errors", "linumpy.gpu.zarr_io"):
        assert name in public
    assert "linumpy.gpu.nvcomp_zstd" in public and "linumpy.mosaic" in public
    # Every listed name is a module that exists: a renamed module cannot drop out silently.
    for pattern in _api_patterns():
        assert pattern.removesuffix(".*") in public, pattern
    for internal in ("linumpy.io.engine.read", "linumpy.gpu.backend", "linumpy.cli"):
        assert internal not in public


def _dunder_all(path: Path) -> list[str]:
    """A module's ``__all__``, read statically (GPU modules are not imported), or []."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Assign):
            targets = node.targets
        else:
            continue
        if node.value is not None and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in targets
        ):
            return list(ast.literal_eval(node.value))
    return []


#: Internal packages whose modules export nothing, but for a compressor package's interface.
INTERNAL_PACKAGES = ("linumpy/io/engine", "linumpy/gpu")
COMPRESSOR_PACKAGES = ("linumpy/io/engine/codecs/zstd/__init__.py",)


def test_internal_modules_export_nothing() -> None:
    """Engine and GPU-layer internals are not public by accident: an empty ``__all__``."""
    patterns = _api_patterns()
    exporting = []
    for folder in INTERNAL_PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            module = relative.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            if _in_api(module, patterns) or relative in COMPRESSOR_PACKAGES:
                continue
            if _dunder_all(path):
                exporting.append(module)
    assert not exporting, f"internal modules with a non-empty __all__: {exporting}"


def test_the_api_reference_shows_only_the_public_api(built_docs: Path) -> None:
    pages = {
        ".".join(page.relative_to(built_docs / "api" / "python").parent.parts)
        for page in (built_docs / "api" / "python").rglob("index.html")
    }
    public = set(_public_modules())
    assert "linumpy.io" in pages and "linumpy.gpu.zarr_io" in pages
    assert not pages - public, f"internal modules in the API reference: {sorted(pages - public)}"


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
    # Every module's examples run, internal ones too: there they are tests of behaviour.
    for name in _all_modules():
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
