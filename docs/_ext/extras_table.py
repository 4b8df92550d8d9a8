"""Sphinx extension: the ``extras-table`` directive, pyproject.toml's pip extras as a table.

The directive's content gives one line per extra, ``name: what it is for``; the requirements come
from ``pyproject.toml`` itself, so the table cannot drift from what pip installs. An extra that
``pyproject.toml`` has and the directive does not describe, or the reverse, is a warning.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


class ExtrasTable(SphinxDirective):
    """Render ``[project.optional-dependencies]`` with a description of each extra."""

    has_content = True

    def run(self) -> list[nodes.Node]:
        pyproject = Path(self.config.linumpy_root) / "pyproject.toml"
        self.env.note_dependency(str(pyproject))
        extras = tomllib.loads(pyproject.read_text())["project"].get("optional-dependencies", {})
        described = {}
        for line in self.content:
            if line.strip():
                name, _, text = line.partition(":")
                described[name.strip()] = text.strip()
        for name in sorted(set(extras) - set(described)):
            self.reporter.warning(
                f"extras-table: extra {name!r} of pyproject.toml is not described"
            )
        for name in sorted(set(described) - set(extras)):
            self.reporter.warning(f"extras-table: {name!r} is not an extra of pyproject.toml")
        rows = [
            (nodes.literal(text=name), _literals(extras[name]), self._inline(text))
            for name, text in described.items()
            if name in extras
        ]
        return [_table(("extra", "installs", "for"), rows)]

    def _inline(self, text: str) -> nodes.Node:
        """``text`` parsed as inline markup of the page's own language (Markdown or reST)."""
        parsed, messages = self.parse_inline(text)
        return nodes.inline("", "", *parsed, *messages)


def _literals(requirements: list[str]) -> nodes.Node:
    paragraph = nodes.inline()
    for k, requirement in enumerate(requirements):
        if k:
            paragraph += nodes.Text(", ")
        paragraph += nodes.literal(text=requirement)
    return paragraph


def _table(header: tuple[str, ...], rows: list[tuple[nodes.Node, ...]]) -> nodes.table:
    """A docutils table (built directly: the directive may sit in a Markdown page)."""
    group = nodes.tgroup(cols=len(header))
    group += [nodes.colspec(colwidth=1) for _ in header]

    def row(cells: tuple[nodes.Node, ...]) -> nodes.row:
        line = nodes.row()
        for cell in cells:
            line += nodes.entry("", nodes.paragraph("", "", cell))
        return line

    group += nodes.thead("", row(tuple(nodes.Text(h) for h in header)))
    group += nodes.tbody("", *(row(cells) for cells in rows))
    return nodes.table("", group)


def setup(app: Sphinx) -> dict[str, Any]:
    if "linumpy_root" not in app.config:
        app.add_config_value("linumpy_root", "", "env")
    app.add_directive("extras-table", ExtrasTable)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
