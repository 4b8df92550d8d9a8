"""Durable writes: what a staged write flushes to stable storage, when, and the setting that turns
it off. A power loss cannot be simulated here; the tests watch the flushes themselves (the real
``fsync``/``syncfs`` calls are made and recorded) and their order against the commit's steps."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from linumpy import settings
from linumpy.io import OmeZarrWriter, durable, save_omezarr, staging
from linumpy.io.staging import StagedWrite


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every flush (the real calls, recorded as they are made) and commit step, in order."""
    seen: list[tuple[str, str]] = []
    real_tree, real_folder = durable.flush_tree, durable.flush_folder

    def tree(path: os.PathLike[str], **kwargs: object) -> str:
        seen.append(("flush tree", os.fspath(path)))
        return real_tree(path, **kwargs)  # type: ignore[arg-type]

    def folder(path: os.PathLike[str]) -> None:
        seen.append(("flush folder", os.fspath(path)))
        real_folder(path)

    for module in (staging, sys.modules["linumpy.io.writer"]):
        monkeypatch.setattr(module, "flush_tree", tree)
        monkeypatch.setattr(module, "flush_folder", folder)
    monkeypatch.setattr(staging, "step_hook", lambda step: seen.append(("step", step)))
    return seen


def test_a_replacement_is_flushed_before_the_swap_and_its_folder_after(
    tmp_path: Path, events: list[tuple[str, str]]
) -> None:
    target = tmp_path / "image.ome.zarr"
    save_omezarr(np.ones((8, 8, 8), np.uint8), target, voxel_size=(1, 1, 1))
    events.clear()
    save_omezarr(np.full((8, 8, 8), 2, np.uint8), target, voxel_size=(1, 1, 1), overwrite=True)
    order = [what if kind == "step" else kind for kind, what in events]
    flushed = [what for kind, what in events if kind == "flush tree"]
    assert len(flushed) == 1 and Path(flushed[0]).name.endswith(staging.STAGING_SUFFIX)
    assert order.index("flush tree") < order.index("ready") < order.index("swap")
    assert ("flush folder", str(tmp_path)) in events
    assert order.index("swapped") < len(order) - 1 - order[::-1].index("flush folder")


def test_durable_off_flushes_nothing(
    tmp_path: Path, events: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LINUMPY_DURABLE", "0")
    assert settings.get().durable is False
    save_omezarr(np.ones((8, 8, 8), np.uint8), tmp_path / "a.ome.zarr", voxel_size=(1, 1, 1))
    with settings.set(durable=True):
        write = StagedWrite(tmp_path / "b")
        assert write.durable is True
        write.abort()
    assert [e for e in events if e[0] != "step"] == []


def test_a_new_image_written_in_place_is_flushed_at_commit(
    tmp_path: Path, events: list[tuple[str, str]]
) -> None:
    target = tmp_path / "new.ome.zarr"
    with OmeZarrWriter(target, (8, 8, 8), np.uint8, voxel_size=(1, 1, 1)) as writer:
        writer[...] = np.ones((8, 8, 8), np.uint8)
        assert writer.path == target and events == []
    assert events == [("flush tree", str(target)), ("flush folder", str(tmp_path))]


def test_flush_tree_fsyncs_every_file_and_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-file method (where there is no syncfs) reaches every file and folder."""
    for i in range(3):
        (tmp_path / "a" / str(i)).mkdir(parents=True)
        (tmp_path / "a" / str(i) / "c").write_bytes(b"x" * i)
    flushed: set[int] = set()
    real = os.fsync

    def fsync(fd: int) -> None:
        flushed.add(os.fstat(fd).st_ino)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(durable, "_syncfs", lambda path: False)  # a system without syncfs
    assert durable.flush_tree(tmp_path) == "fsync"
    everything = {os.stat(root).st_ino for root, _, _ in os.walk(tmp_path)}
    everything |= {os.stat(os.path.join(r, f)).st_ino for r, _, fs in os.walk(tmp_path) for f in fs}
    assert flushed == everything


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="syncfs is Linux's")
def test_flush_tree_uses_one_syncfs_on_linux(tmp_path: Path) -> None:
    (tmp_path / "c").write_bytes(b"chunk")
    assert durable.flush_tree(tmp_path) == "syncfs"
