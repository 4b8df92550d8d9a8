"""A durable write is flushed once: by the staged swap of a script's output, not also by the
writer working inside it; a writer of its own (no staging around it) flushes itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from linumpy import settings
from linumpy.io import save_omezarr, staging, writer
from linumpy.io.staging import StagedWrite


@pytest.fixture
def flushed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    for module in (staging, writer):
        real = module.flush_tree

        def counting(path, *args, _real=real, **kwargs):  # noqa: ANN001, ANN202
            calls.append(Path(path).name)
            return _real(path, *args, **kwargs)

        monkeypatch.setattr(module, "flush_tree", counting)
    return calls


def test_an_image_in_a_staged_output_is_flushed_by_the_swap_alone(
    tmp_path: Path, flushed: list[str]
) -> None:
    data = np.arange(4 * 16 * 16, dtype=np.uint16).reshape(4, 16, 16)
    with settings.set(durable=True):
        write = StagedWrite(tmp_path / "out.ome.zarr")
        save_omezarr(data, write.path, voxel_size=(1, 1, 1))
        assert flushed == []  # the image's own writer left it to the swap around it
        write.commit()
    assert len(flushed) == 1 and flushed[0].startswith(".out.ome.zarr.")
    assert (tmp_path / "out.ome.zarr" / "zarr.json").is_file()


def test_an_image_of_its_own_is_flushed_by_its_writer(tmp_path: Path, flushed: list[str]) -> None:
    data = np.ones((4, 16, 16), dtype=np.uint16)
    with settings.set(durable=True):
        save_omezarr(data, tmp_path / "alone.ome.zarr", voxel_size=(1, 1, 1))
    assert len(flushed) == 1 and flushed[0].startswith(".alone.ome.zarr.")
    with settings.set(durable=False):
        save_omezarr(data, tmp_path / "scratch.ome.zarr", voxel_size=(1, 1, 1))
    assert len(flushed) == 1
