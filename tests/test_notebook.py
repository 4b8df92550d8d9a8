"""The tile-stitching notebook runs top to bottom (on the CPU) and is committed with outputs;
benchmarks/notebook_gpu.py is its export as a plain script (for GPU hosts without Jupyter).

After editing the notebook, rewrite the export with ``python tests/test_notebook.py``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "notebooks" / "tile_stitching.ipynb"
SCRIPT = ROOT / "benchmarks" / "notebook_gpu.py"

_SCRIPT_HEADER = '''"""The tile-stitching notebook as a plain script (cells as ``# %%`` blocks).

Exported from docs/notebooks/tile_stitching.ipynb for GPU hosts without Jupyter:
``MPLBACKEND=Agg python benchmarks/notebook_gpu.py`` from the
repository root runs the notebook top to bottom and prints its outputs (figures are not shown).
Do not edit: ``python tests/test_notebook.py`` rewrites it from the notebook.
"""

# ruff: noqa: E402, E501
'''


def export_script(notebook: nbformat.NotebookNode) -> str:
    """The notebook as a percent-format script: markdown cells as comments, code cells as code."""
    blocks = [_SCRIPT_HEADER]
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            lines = [f"# {line}".rstrip() for line in cell.source.splitlines()]
            blocks.append("# %% [markdown]\n" + "\n".join(lines) + "\n")
        elif cell.cell_type == "code":
            blocks.append("# %%\n" + cell.source + "\n")
    return "\n".join(blocks)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _images(notebook: nbformat.NotebookNode) -> int:
    return sum(
        "image/png" in output.get("data", {})
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )


def test_notebook_is_committed_with_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code), "run the notebook before committing it"
    assert _images(notebook) >= 4
    assert not any(output.output_type == "error" for cell in code for output in cell.outputs)


def test_notebook_executes(tmp_path) -> None:
    from nbclient import NotebookClient

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=300,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    try:
        client.execute()
    except Exception as exc:  # nbclient raises CellExecutionError with the failing cell's trace
        pytest.fail(f"{NOTEBOOK.name} failed: {exc}")
    text = "".join(
        output.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )
    error = float(text.split("largest tile position error:")[1].split("px")[0])
    assert error < 0.5
    # the timing section is the pipeline benchmark's table: each command, with its phases
    for command in ("linum-estimate-transform", "linum-stitch-3d", "linum-aip"):
        assert f"| {command} | 6x6 of " in text
    assert "start-up " in text and "level 0 " in text
    assert _images(notebook) >= 4


def test_gpu_script_is_the_notebook_exported() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert _lines(SCRIPT.read_text()) == _lines(export_script(notebook)), (
        f"{SCRIPT.name} is stale: rewrite it with `python tests/test_notebook.py`"
    )


if __name__ == "__main__":
    SCRIPT.parent.mkdir(exist_ok=True)
    SCRIPT.write_text(export_script(nbformat.read(NOTEBOOK, as_version=4)))
    subprocess.run([sys.executable, "-m", "ruff", "format", "-q", str(SCRIPT)], check=True)
    print(f"wrote {SCRIPT}")
