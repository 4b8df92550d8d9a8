"""Imports run one way (docs/architecture.md, "Import direction"): no circles, each layer imports
only the layers below it, and the GPU libraries only inside functions, each through its one module.

Every module under ``linumpy/`` and ``scripts/`` (the ``linumpy.scripts`` package) is parsed with
``ast``, nothing imported: imports at module level and inside functions alike, and
``importlib.import_module`` calls with a literal name. Imports under ``if TYPE_CHECKING:`` never
run and are left out of the layer rules, but not of the circles: a type-only circle still ties two
modules together.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Bottom to top: a module imports from its own layer and the layers below, never above.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("errors", ("linumpy.errors",)),
    ("settings", ("linumpy.settings", "linumpy._compat", "linumpy")),
    ("shared helpers", ("linumpy._numpy_or_cupy", "linumpy.phases", "linumpy.parallel")),
    ("I/O and GPU", ("linumpy.io", "linumpy.gpu")),
    ("mosaic", ("linumpy.mosaic",)),
    ("benchmarks and script helpers", ("linumpy.bench", "linumpy.cli")),
    ("scripts", ("linumpy.scripts",)),
]
#: Libraries that need a GPU (or its driver): never imported when a module is imported.
GPU_LIBRARIES = ("cupy", "cupyx", "nvidia", "kvikio", "cucim", "dask_cuda", "rmm")
#: The modules that load nvCOMP and kvikio: the nvCOMP layer and the fetch stage, plus the
#: probe that says whether the GPU path can run and the report of the versions in use.
LIBRARY_HOMES = {
    "nvidia": {"linumpy.gpu.nvcomp", "linumpy.gpu.availability", "linumpy.gpu.zarr_context"},
    "kvikio": {"linumpy.io.engine.fetch_kvikio", "linumpy.gpu.zarr_context"},
}
#: What linumpy.gpu uses of linumpy.io: the engine's stages, open_array, and the read's one
#: descent (read_zarr_to_gpu is read_volume's GPU destination).
GPU_USES_OF_IO = ("linumpy.io.engine", "linumpy.io.omezarr", "linumpy.io.reader")


@dataclass(frozen=True)
class Import:
    """One import statement's target, resolved to a module name."""

    source: str  # the importing module
    target: str  # the imported module (a linumpy module, or a library's top-level name)
    lazy: bool  # inside a function: run when the function is called
    where: str  # file:line
    type_only: bool = False  # under ``if TYPE_CHECKING:``: never runs

    def __str__(self) -> str:
        kind = " (type only)" if self.type_only else " (lazy)" if self.lazy else ""
        return f"{self.where}: {self.source} -> {self.target}{kind}"


def find_modules(root: Path) -> dict[str, Path]:
    """Module name to file for the linumpy package and the scripts folder under ``root``."""
    modules = {}
    for folder, package in ((root / "linumpy", "linumpy"), (root / "scripts", "linumpy.scripts")):
        for path in sorted(folder.rglob("*.py")):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def _import_call(node: ast.AST) -> str | None:
    """The literal name of an ``importlib.import_module("...")`` or ``__import__("...")``."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    function = ast.unparse(node.func)
    name = node.args[0]
    named = function.endswith("import_module") or function == "__import__"
    if named and isinstance(name, ast.Constant) and isinstance(name.value, str):
        return name.value
    return None


def parse_imports(modules: dict[str, Path], root: Path) -> list[Import]:
    """Every import of every module: linumpy modules resolved to the longest module name that
    exists (``from linumpy.io import lazy``: the submodule; ``from linumpy.io import
    read_volume``: the package), libraries to their top-level name."""
    found: list[Import] = []

    def resolve(name: str) -> str:
        return name if name.startswith("linumpy") else name.split(".")[0]

    def targets(node: ast.AST, module: str, is_package: bool) -> list[str]:
        if isinstance(node, ast.Import):
            return [resolve(alias.name) for alias in node.names]
        if isinstance(node, ast.ImportFrom):
            stem = node.module or ""
            if node.level:  # relative: from the module's package
                base = module.split(".")
                base = base[: len(base) - node.level + is_package]
                stem = ".".join(base + ([stem] if stem else []))
            if not stem.startswith("linumpy"):
                return [resolve(stem)]
            names = [f"{stem}.{alias.name}" for alias in node.names]
            submodules = [name for name in names if name in modules]
            return submodules + ([resolve(stem)] if len(submodules) < len(names) else [])
        called = _import_call(node)
        return [resolve(called)] if called else []

    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        where_of = path.relative_to(root)

        def visit(
            node: ast.AST,
            lazy: bool,
            type_only: bool = False,
            module: str = module,
            is_package: bool = is_package,
            where_of: Path = where_of,
        ) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and _is_type_checking(child.test):
                    for other in child.body:  # the branch type checkers read
                        visit(ast.Module(body=[other], type_ignores=[]), lazy, True)
                    for other in child.orelse:  # the branch that runs
                        visit(ast.Module(body=[other], type_ignores=[]), lazy, type_only)
                    continue
                for target in targets(child, module, is_package):
                    if target != module:
                        where = f"{where_of}:{child.lineno}"
                        found.append(Import(module, target, lazy, where, type_only))
                inner = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                visit(child, lazy or inner, type_only)

        visit(tree, False)
    return found


def circles(imports: list[Import]) -> list[list[str]]:
    """The groups of modules that import one another (strongly connected, more than one)."""
    graph: dict[str, set[str]] = {}
    for edge in imports:
        if edge.target.startswith("linumpy"):  # a missing module is a rule's to name
            graph.setdefault(edge.source, set()).add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return groups


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the longest prefix naming ``module``."""
    best, length = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = i, len(prefix)
    if best < 0:
        raise AssertionError(f"{module} is in no layer of docs/architecture.md")
    return best


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def rule_breaks(imports: list[Import], modules: dict[str, Path]) -> list[str]:
    """Every import that breaks a rule of docs/architecture.md, with its reason."""
    packages = {name for name, path in modules.items() if path.name == "__init__.py"}
    broken = []
    for edge in imports:
        source, target = edge.source, edge.target
        if edge.type_only:  # never runs: only the circles look at it
            continue
        if target.startswith("linumpy") and target not in modules:
            broken.append(f"{edge}: no such module")
            continue
        if not target.startswith("linumpy"):
            if target in GPU_LIBRARIES and not edge.lazy:
                broken.append(f"{edge}: a GPU library imported with the module")
            home = LIBRARY_HOMES.get(target)
            if home is not None and source not in home:
                broken.append(f"{edge}: {target} is loaded by {sorted(home)} only")
            continue
        if layer_of(target) > layer_of(source):
            up = LAYERS[layer_of(target)][0]
            broken.append(f"{edge}: upward, from {LAYERS[layer_of(source)][0]} to {up}")
        if _within(source, "linumpy.io") and _within(target, "linumpy.gpu"):
            if not edge.lazy:
                broken.append(f"{edge}: linumpy.io reaches linumpy.gpu inside functions only")
            if _within(source, "linumpy.io.engine"):
                broken.append(f"{edge}: the engine never imports linumpy.gpu")
        gpu_to_io = _within(source, "linumpy.gpu") and _within(target, "linumpy.io")
        if gpu_to_io and not any(_within(target, allowed) for allowed in GPU_USES_OF_IO):
            broken.append(f"{edge}: linumpy.gpu uses only {GPU_USES_OF_IO} of linumpy.io")
        if target in packages and target != "linumpy" and _within(source, target):
            broken.append(f"{edge}: a module of a package imports its modules, not its facade")
    return broken


MODULES = find_modules(ROOT)


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return parse_imports(MODULES, ROOT)


def test_the_parse_sees_lazy_and_module_level_imports(imports: list[Import]) -> None:
    edges = {(e.source, e.target, e.lazy) for e in imports}
    assert ("linumpy.io.block_write", "linumpy.gpu.encode", True) in edges
    assert ("linumpy.gpu.encode", "linumpy.io.engine.write_files", False) in edges
    assert ("linumpy.gpu.nvcomp", "nvidia", True) in edges  # importlib.import_module
    assert ("linumpy.io", "linumpy.io.reader", False) in edges
    assert len({e.source for e in imports}) > 100


def test_no_import_circles(imports: list[Import]) -> None:
    groups = circles(imports)
    detail = [str(e) for g in groups for e in imports if e.source in g and e.target in g]
    assert not groups, "import circles:\n" + "\n".join(detail)


def test_imports_follow_the_layers(imports: list[Import]) -> None:
    broken = rule_breaks(imports, MODULES)
    assert not broken, "\n".join(broken)


def test_the_checks_find_a_lazy_circle_and_an_upward_import(tmp_path: Path) -> None:
    """The checks on a tree of their own: a circle closed inside a function, one closed by a
    type-only import, an engine stage importing the GPU, the I/O layer importing the mosaic
    code, cupy with its module."""
    files = {
        "linumpy/__init__.py": "",
        "linumpy/errors.py": "",
        "linumpy/io/__init__.py": "from linumpy.io.a import f\n",
        "linumpy/io/a.py": "def f():\n    from linumpy.io.b import g\n",
        "linumpy/io/b.py": "from linumpy.io import a\nimport linumpy.mosaic.m\n",
        "linumpy/io/c.py": "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from linumpy.io.d import D\n",
        "linumpy/io/d.py": "from linumpy.io.c import C\n",
        "linumpy/io/engine/__init__.py": "",
        "linumpy/io/engine/plan.py": "def p():\n    import linumpy.gpu.k, linumpy.gone\n",
        "linumpy/gpu/__init__.py": "",
        "linumpy/gpu/k.py": "import cupy\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from linumpy.mosaic import m\n",
        "linumpy/mosaic/__init__.py": "",
        "linumpy/mosaic/m.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "scripts").mkdir()
    modules = find_modules(tmp_path)
    found = parse_imports(modules, tmp_path)
    assert circles(found) == [["linumpy.io.a", "linumpy.io.b"], ["linumpy.io.c", "linumpy.io.d"]]
    broken = "\n".join(rule_breaks(found, modules))
    assert "linumpy.io.b -> linumpy.mosaic.m: upward, from I/O and GPU to mosaic" in broken
    assert "linumpy.io.engine.plan -> linumpy.gpu.k (lazy): the engine never imports" in broken
    assert "linumpy.gpu.k -> cupy: a GPU library imported with the module" in broken
    assert "linumpy.io.engine.plan -> linumpy.gone (lazy): no such module" in broken
    assert "linumpy.gpu.k -> linumpy.mosaic" not in broken  # under TYPE_CHECKING
