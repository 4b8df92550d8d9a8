"""Sphinx extension: document each re-exported object once, under its public name.

``linumpy.io`` re-exports :func:`~linumpy.io.read_volume` from ``linumpy.io.reader`` (and so on).
sphinx-autoapi, asked for imported members, documents such an object twice, which makes every
short cross-reference to it ambiguous. Here the subpackage's public name wins
(``linumpy.io.read_volume``) and the defining module's copy is skipped; the root package's
convenience re-exports (``linumpy.LinumpyError``) are skipped in favour of the defining module
(``linumpy.errors``). The re-exports are found statically, from the ``__init__.py`` files, as
autoapi itself works: nothing is imported.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx


def _dunder_all(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    return set()


def find_reexports(package_dir: Path) -> tuple[set[str], set[str]]:
    """Names to skip: (defining-module names re-exported by subpackages, root re-exports).

    Parameters
    ----------
    package_dir
        The top-level package's directory (``linumpy/``).
    """
    root = package_dir.name
    hidden_definitions: set[str] = set()
    hidden_root_names: set[str] = set()
    # os.walk, not Path.rglob: the tree conf.py gives autoapi links linumpy.scripts in.
    inits = [
        Path(folder) / "__init__.py"
        for folder, _, files in os.walk(package_dir, followlinks=True)
        if "__init__.py" in files
    ]
    for init in sorted(inits):
        parts = init.parent.relative_to(package_dir.parent).parts
        package = ".".join(parts)
        tree = ast.parse(init.read_text())
        exported = _dunder_all(tree)
        for node in tree.body:
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(root):
                continue
            for alias in node.names:
                name = alias.asname or alias.name
                if name not in exported:
                    continue
                if package == root:
                    hidden_root_names.add(f"{root}.{name}")
                else:
                    hidden_definitions.add(f"{node.module}.{alias.name}")
    return hidden_definitions, hidden_root_names


def setup(app: Sphinx) -> dict[str, Any]:
    def skip_member(
        app: Sphinx, what: str, name: str, obj: Any, skip: bool, options: Any
    ) -> bool | None:
        hidden = app.env.linumpy_hidden_reexports  # type: ignore[attr-defined]
        return True if name in hidden else None

    def collect(app: Sphinx) -> None:
        hidden = set()
        for directory in app.config.autoapi_dirs:
            definitions, root_names = find_reexports(Path(directory))
            hidden |= definitions | root_names
        app.env.linumpy_hidden_reexports = hidden  # type: ignore[attr-defined]

    # Before autoapi reads the sources (it does so on builder-inited, priority 500).
    app.connect("builder-inited", collect, priority=100)
    app.connect("autoapi-skip-member", skip_member)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
