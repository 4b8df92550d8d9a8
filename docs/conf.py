"""Sphinx configuration of linumpy's documentation.

Built by ``make docs`` and by ``tests/test_docs.py``, both with warnings as errors. The API
reference is generated from the docstrings by sphinx-autoapi (static analysis: nothing GPU-related
is imported), the scripts reference from each script's argparse parser (``_ext/script_pages.py``),
and the notebook is rendered from its committed outputs, never executed here.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
# The repository root. tests/test_docs.py builds a copy of docs/ elsewhere (so that concurrent
# builds never share generated files) and points here with LINUMPY_DOCS_ROOT.
ROOT = Path(os.environ.get("LINUMPY_DOCS_ROOT", DOCS.parent)).resolve()
linumpy_root = str(ROOT)
# _ext holds this site's own Sphinx extensions (linumpy itself is imported from the install).
sys.path[:0] = [str(DOCS / "_ext")]

project = "linumpy"
author = "the linumpy developers"
copyright = "2026, the linumpy developers"
# The version is written once, in linumpy/__init__.py (pyproject.toml reads it from there).
release = re.search(
    r'^__version__ = "([^"]+)"', (ROOT / "linumpy" / "__init__.py").read_text(), re.M
).group(1)
version = release

extensions = [
    "sphinx.ext.napoleon",
    "autoapi.extension",
    "sphinxarg.ext",
    "myst_nb",
    "script_pages",
    "extras_table",
    "benchmark_results",
    "api_reexports",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
# Quotes and ellipses, but no dashes: "--use-gpu" must not become an en dash in prose.
smartquotes_action = "qe"
exclude_patterns = ["_build", "api/_src", "**.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]

# --- API reference (sphinx-autoapi) ------------------------------------------------------------
autoapi_type = "python"

#: The public API: the modules with pages in the API reference, each with every name it exports
#: (``__all__``) documented with an example; a name ending in ``.*`` stands for a package and
#: all its modules. The rest of the package (the I/O engine, the GPU layer's internals, the
#: cluster's internals, the command-line helpers) is internal. tests/test_docs.py reads this list.
api_modules = (
    "linumpy",
    "linumpy.errors",
    "linumpy.settings",
    "linumpy.io",
    "linumpy.gpu",
    "linumpy.gpu.zarr_io",
    "linumpy.gpu.nvcomp_zstd",
    "linumpy.mosaic",
    "linumpy.parallel",
)


def in_api(module: str) -> bool:
    """Whether a module (dotted name) is part of the public API (:data:`api_modules`)."""
    return any(
        module == name or (name.endswith(".*") and (module + ".").startswith(name[:-1]))
        for name in api_modules
    )


def _skip_internal_module(
    app: object, what: str, name: str, obj: object, skip: bool, options: object
) -> bool | None:
    """autoapi-skip-member: modules outside the public API get no page (nor their members)."""
    return True if what in ("package", "module") and not in_api(name) else None


def _package_tree() -> Path:
    """The package as it installs, for autoapi's static analysis: ``linumpy/`` with the
    top-level ``scripts/`` folder as ``linumpy.scripts`` (pyproject.toml's ``package-dir``).

    A folder of symbolic links under ``api/_src`` (generated, git-ignored): one to each entry
    of ``linumpy/`` and one named ``scripts`` to the scripts folder.
    """
    tree = DOCS / "api" / "_src" / "linumpy"
    if tree.is_symlink() or tree.is_file():
        tree.unlink()
    tree.mkdir(parents=True, exist_ok=True)
    wanted = {entry.name: entry for entry in (ROOT / "linumpy").iterdir()}
    wanted["scripts"] = ROOT / "scripts"
    for link in tree.iterdir():
        if link.name not in wanted or not link.is_symlink() or link.resolve() != wanted[link.name]:
            link.unlink() if link.is_symlink() or link.is_file() else None
    for name, entry in wanted.items():
        if not (tree / name).exists():
            (tree / name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
    return tree


autoapi_dirs = [str(_package_tree())]
autoapi_follow_symlinks = True
autoapi_root = "api/python"  # generated at build time, git-ignored, removed after the build
autoapi_add_toctree_entry = False  # api.md links the package page itself
autoapi_options = [
    "members",
    "undoc-members",
    "show-inheritance",
    "show-module-summary",
    "imported-members",
]
autoapi_member_order = "groupwise"
autoapi_python_class_content = "class"
autodoc_typehints = "signature"
suppress_warnings = [
    # autoapi's static analysis cannot follow some imports (names bound by tuple assignment, for
    # one); that says nothing about the documentation and the objects are still documented.
    "autoapi.python_import_resolution",
]

napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
# "Attributes" sections become field lists: as ``.. attribute::`` entries they would repeat the
# entries autoapi writes for the same (dataclass) attributes.
napoleon_use_ivar = True

# --- notebooks and Markdown (myst-nb) -----------------------------------------------------------
nb_execution_mode = "off"  # rendered from the outputs committed with the notebook
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# --- scripts reference (_ext/script_pages.py) --------------------------------------------------
script_pages_dir = "api/scripts"

# --- HTML ----------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"linumpy {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_sidebars = {"**": ["sidebar-nav-bs"]}
html_last_updated_fmt = None


def setup(app: object) -> None:
    app.connect("autoapi-skip-member", _skip_internal_module)  # type: ignore[attr-defined]
