"""The tile-stitching notebook runs top to bottom (on the CPU) and is committed with outputs."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "notebooks" / "tile_stitching.ipynb"


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
    assert _images(notebook) >= 4
