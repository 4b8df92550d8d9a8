"""Sphinx extension: one reference page per ``scripts/linum_*.py`` pipeline script.

Each page is generated at build time from the script's own argparse parser (``_build_arg_parser()``,
rendered by sphinx-argparse's ``argparse`` directive) and carries the example commands listed for
it in ``script_examples.toml``. Every example is parsed by the script's parser during the build, so
an example that no longer matches the script's options is a warning, which ``-W`` turns into a
failed build. A script without a console entry point in ``pyproject.toml`` or without an example is
a warning too.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import shlex
import shutil
import tomllib
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

EXAMPLES_FILE = "script_examples.toml"


@dataclass(frozen=True)
class Script:
    """A pipeline script: its module, its console command and what it says about itself."""

    module: str
    prog: str
    summary: str


def find_scripts(root: Path) -> list[Script]:
    """Every ``scripts/linum_*.py`` under ``root``, named by its console entry point."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    commands = {target.split(":")[0]: name for name, target in project.get("scripts", {}).items()}
    scripts = []
    for path in sorted((root / "scripts").glob("linum_*.py")):
        module = f"linumpy.scripts.{path.stem}"
        prog = commands.get(module)
        if prog is None:
            logger.warning(
                "%s has no console entry point in pyproject.toml [project.scripts]", path.name
            )
            prog = path.stem.replace("_", "-")
        scripts.append(Script(module, prog, _summary(module)))
    return scripts


def _summary(module: str) -> str:
    doc = (importlib.import_module(module).__doc__ or "").strip()
    return doc.splitlines()[0].rstrip(".") if doc else ""


def _check_example(script: Script, command: str) -> None:
    """Warn when ``command`` is not a call of ``script`` that its parser accepts."""
    argv = shlex.split(command)
    if not argv or argv[0] != script.prog:
        logger.warning(
            "example for %s does not start with %s: %r", script.prog, script.prog, command
        )
        return
    parser = importlib.import_module(script.module)._build_arg_parser()
    messages = io.StringIO()
    try:
        with redirect_stderr(messages), redirect_stdout(messages):
            parser.parse_args(argv[1:])
    except SystemExit:
        logger.warning(
            "example for %s is rejected by its parser: %r: %s",
            script.prog,
            command,
            messages.getvalue().strip().splitlines()[-1:],
        )


def _page(script: Script, examples: list[dict[str, Any]]) -> str:
    title = f"{script.prog}: {script.summary}" if script.summary else script.prog
    lines = [
        f".. _script-{script.prog}:",
        "",
        title,
        "=" * len(title),
        "",
        ".. argparse::",
        f"   :module: {script.module}",
        "   :func: _build_arg_parser",
        f"   :prog: {script.prog}",
        "",
        "Examples",
        "--------",
        "",
    ]
    for example in examples:
        lines += [example.get("text", ""), "", ".. code-block:: bash", ""]
        lines += [f"   {line}" for line in example["command"].strip().splitlines()]
        lines.append("")
    return "\n".join(lines)


def generate_script_pages(app: Sphinx) -> None:
    """Write one page per script into ``script_pages_dir`` (replacing what was there)."""
    srcdir = Path(app.srcdir)
    target = srcdir / app.config.script_pages_dir
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    examples = tomllib.loads((srcdir / EXAMPLES_FILE).read_text())
    scripts = find_scripts(Path(app.config.linumpy_root))
    for script in scripts:
        entries = examples.get(script.prog, [])
        if not entries:
            logger.warning("%s has no example in docs/%s", script.prog, EXAMPLES_FILE)
        for entry in entries:
            _check_example(script, entry["command"])
        (target / f"{script.prog}.rst").write_text(_page(script, entries))
    known = {script.prog for script in scripts}
    for prog in sorted(set(examples) - known):
        logger.warning("docs/%s has examples for %s, which is not a script", EXAMPLES_FILE, prog)


def remove_script_pages(app: Sphinx, exception: Exception | None) -> None:
    """Remove the generated pages from the source tree after the build."""
    target = Path(app.srcdir) / app.config.script_pages_dir
    shutil.rmtree(target, ignore_errors=True)
    # autoapi has removed its own pages by now: leave no empty folder behind either.
    with contextlib.suppress(OSError):
        target.parent.rmdir()


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("script_pages_dir", "api/scripts", "env")
    if "linumpy_root" not in app.config:
        app.add_config_value("linumpy_root", "", "env")
    app.connect("builder-inited", generate_script_pages)
    app.connect("build-finished", remove_script_pages)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
