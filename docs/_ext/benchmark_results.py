"""Sphinx extension: the ``benchmark-results`` directive, the result files of one benchmark as
tables, generated at build time from ``benchmarks/results/``.

In a page::

    ```{benchmark-results} benchmark-io
    ```

renders every file ``benchmarks/results/benchmark-io-*.json`` (one per machine: the newest; older
ones live in git history) as a line giving the machine, the date, the command and the commit,
and a table of its rows. A result file is named ``KIND-YYYY-MM-DD-MACHINE.json`` (see
``benchmarks/add_result.py``). ``linum-benchmark-io`` results become one column per layout;
other results one line per row of their ``rows`` list. A kind without a file is a warning,
which ``-W`` turns into a failed build.

The renderers are plain functions (:func:`render`), tested in ``tests/test_benchmarks_smoke.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

#: ``KIND-YYYY-MM-DD-...json``: the kind, then the date of the run.
NAME = re.compile(r"^(?P<kind>[a-z0-9-]+?)-(?P<date>\d{4}-\d{2}-\d{2})-(?P<rest>.+)\.json$")

# linum-benchmark-io rows in the order the table gives them: linumpy's reads first, then the
# other readers, the writes, and the ceilings last.
_IO_ORDER = (
    "read_volume(gpu=True)",
    "gpu_zarr_context",
    "zarr enable_gpu()",
    "linumpy read_volume (CPU)",
    "tensorstore read",
    "zarr with the zarrs codec pipeline",
    "zarr CPU read",
    "linumpy GPU write",
    "linumpy CPU write",
    "GPU write",
    "zarr CPU write",
)


def result_files(results: Path, kind: str) -> list[Path]:
    """The result files of ``kind`` in ``results``, sorted by name."""
    return sorted(
        path
        for path in results.glob(f"{kind}-*.json")
        if (match := NAME.match(path.name)) and match["kind"] == kind
    )


def describe(payload: dict[str, Any], name: str) -> dict[str, str]:
    """The date, machine, commit and command of a result, wherever its benchmark put them."""
    found: dict[str, str] = {}
    machine = payload.get("machine")
    for where in (payload, payload.get("info"), machine):
        if not isinstance(where, dict):
            continue
        for key in ("date", "machine", "commit", "command"):
            value = where.get(key)
            if isinstance(value, str | int | float) and key not in found:
                found[key] = str(value)
    if isinstance(machine, dict) and "name" in machine:
        found["machine"] = str(machine["name"])
    if match := NAME.match(name):
        found.setdefault("date", match["date"])
        found.setdefault("machine", match["rest"])
    found["date"] = found["date"][:10]  # the day; the time of day is in the file
    return found


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_cell(v)}" for k, v in value.items())
    return str(value).replace("|", "/").replace("\n", " ")


def _layout_label(layout: str) -> str:
    return layout.replace("^3", "³")


def _io_rank(row: dict[str, Any]) -> tuple[int, int, str]:
    name = str(row.get("name", ""))
    group = 2 if row.get("kind") == "ceiling" else 1 if row.get("op") == "write" else 0
    names = [i for i, prefix in enumerate(_IO_ORDER) if name.startswith(prefix)]
    return group, names[0] if names else len(_IO_ORDER), name


def io_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """``linum-benchmark-io`` rows: one line per path, one column per layout, GB/s of
    decompressed volume (``-`` where a row failed or was skipped)."""
    layouts = list(dict.fromkeys(str(r["layout"]) for r in rows))
    paths = list(dict.fromkeys((r["name"], r["kind"]) for r in sorted(rows, key=_io_rank)))
    cells = {(r["name"], r["kind"], str(r["layout"])): r for r in rows}
    lines = []
    for name, kind in paths:
        values = []
        for layout in layouts:
            row = cells.get((name, kind, layout))
            if row is None:
                values.append("")
            else:
                values.append(f"{row['gbps']:.2f}" if row.get("runs") else "-")
        lines.append([_cell(name), kind, *values])
    return ["path", "kind", *(_layout_label(layout) for layout in layouts)], lines


def rows_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """A list of rows (dicts) as a table: one column per key that holds a number, a string or
    a dict (lists, such as each run's times, are left out)."""
    columns: list[str] = []
    for row in rows:
        for key, value in row.items():
            if not isinstance(value, list) and key not in columns:
                columns.append(key)
    return columns, [[_cell(row.get(key, "")) for key in columns] for row in rows]


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table; columns whose cells are all numbers are right-aligned."""

    def numeric(column: int) -> bool:
        values = [row[column] for row in rows if row[column] not in ("", "-")]
        return bool(values) and all(re.fullmatch(r"-?[\d.]+(e-?\d+)?", v) for v in values)

    align = ["---:" if numeric(i) else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def render(path: Path, kind: str) -> str:
    """One result file as Markdown: a line naming the run, then its table."""
    payload = json.loads(path.read_text())
    about = describe(payload, path.name)
    rows = payload.get("rows") or []
    table = io_table(rows) if kind == "benchmark-io" else rows_table(rows)
    head = f"**{about.get('machine', '?')}**, {about.get('date', '?')}"
    if "command" in about:
        head += f": `{about['command']}`"
    if "commit" in about:
        head += f" at commit `{about['commit']}`"
    head += f" (`benchmarks/results/{path.name}`)."
    return f"{head}\n\n{markdown_table(*table)}\n"


def setup(app: Any) -> dict[str, Any]:
    from docutils import nodes
    from sphinx.util.docutils import SphinxDirective

    class BenchmarkResults(SphinxDirective):
        """Render the result files of the benchmark named by the argument."""

        required_arguments = 1

        def run(self) -> list[nodes.Node]:
            kind = self.arguments[0]
            results = Path(self.config.linumpy_root) / "benchmarks" / "results"
            files = result_files(results, kind)
            if not files:
                self.reporter.warning(f"benchmark-results: no {kind}-*.json in {results}")
                return []
            for path in files:
                self.env.note_dependency(str(path))
            text = "\n".join(render(path, kind) for path in files)
            return self.parse_text_to_nodes(text)

    if "linumpy_root" not in app.config:
        app.add_config_value("linumpy_root", "", "env")
    app.add_directive("benchmark-results", BenchmarkResults)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
