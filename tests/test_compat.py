"""zarr's private names linumpy uses live in linumpy._compat alone, and still exist."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import linumpy._compat as compat

ROOT = Path(__file__).resolve().parent.parent


#: Every private zarr name linumpy._compat uses, as ``module:name``.
PRIVATE_ZARR_NAMES = (
    "zarr.core.array_spec:ArraySpec",
    "zarr.core.sync:loop",
    "zarr.core.sync:iothread",
)


def test_private_zarr_names_still_exist() -> None:
    source = (ROOT / "linumpy" / "_compat.py").read_text()
    for entry in PRIVATE_ZARR_NAMES:
        module, name = entry.split(":")
        assert f"{module.rpartition('.')[2]}.{name}" in source or f"import {name}" in source
    for entry in PRIVATE_ZARR_NAMES:
        module, name = entry.split(":")
        assert hasattr(importlib.import_module(module), name), entry


def test_no_module_but_compat_names_zarr_core() -> None:
    pattern = re.compile(r"zarr\.core\b")
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("linumpy", "scripts")
        for path in (ROOT / folder).rglob("*.py")
        if path.name != "_compat.py" and pattern.search(path.read_text())
    ]
    assert offenders == []


def test_waiting_for_zarr_io_returns_once_nothing_runs_there(tmp_path: Path) -> None:
    import zarr
    from zarr.core.sync import sync

    zarr.create_array(tmp_path / "a.zarr", shape=(4,), dtype="uint8")[...] = 1
    assert compat.wait_for_zarr_io(timeout=5.0)  # the loop runs, its writes are done

    async def on_the_loop() -> bool:
        return compat.wait_for_zarr_io()  # zarr's own thread: at once, not waiting on itself

    assert sync(on_the_loop())
