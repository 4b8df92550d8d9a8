"""Arrays opened once per path (linumpy.io.open_cache): reused while the metadata is unchanged."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import zarr

from linumpy.errors import LinumpyError
from linumpy.io import read_volume, save_omezarr
from linumpy.io.omezarr import open_array
from linumpy.io.open_cache import clear, open_once


@pytest.fixture(autouse=True)
def _forget() -> None:
    clear()


def _counting(path: Path) -> tuple[list[int], object]:
    calls: list[int] = []

    def fresh() -> tuple[zarr.Array, list[Path]]:
        calls.append(1)
        return zarr.open_array(path, mode="r"), [path]

    return calls, fresh


def test_an_array_is_reused_from_its_second_opening_until_its_metadata_changes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.zarr"
    zarr.create_array(path, shape=(4,), dtype="uint8")
    calls, fresh = _counting(path)
    arrays = [open_once(path, 0, fresh) for _ in range(4)]
    assert len(calls) == 2 and arrays[1] is arrays[2] is arrays[3]
    zarr.create_array(path, shape=(8,), dtype="uint8", overwrite=True)
    assert open_once(path, 0, fresh).shape == (8,) and len(calls) == 3


@pytest.mark.parametrize("change", ["shape", "fill_value", "attributes"])
def test_reads_see_metadata_rewritten_at_the_same_path(tmp_path: Path, change: str) -> None:
    """Rewritten metadata of the same length (a shape of as many digits, another fill value,
    attributes) is seen at the next read."""
    path = tmp_path / "a.zarr"
    array = zarr.create_array(path, shape=(10, 10), chunks=(5, 5), dtype="uint16", fill_value=1)
    array[:5] = 7
    for _ in range(3):
        np.testing.assert_array_equal(read_volume(path), zarr.open_array(path, mode="r")[...])
    size = os.path.getsize(path / "zarr.json")
    if change == "shape":
        array.resize((20, 10))
    elif change == "fill_value":
        zarr.create_array(path, shape=(10, 10), chunks=(5, 5), dtype="uint16", fill_value=2,
                          overwrite=True)  # fmt: skip
    else:
        array.attrs["note"] = "x"
    assert change != "shape" or os.path.getsize(path / "zarr.json") == size
    np.testing.assert_array_equal(read_volume(path), zarr.open_array(path, mode="r")[...])


def test_an_image_level_is_reopened_when_the_level_changes(tmp_path: Path) -> None:
    path = tmp_path / "image.ome.zarr"
    save_omezarr(np.ones((8, 8, 8), np.uint8), path, voxel_size=(1, 1, 1), n_levels=2)
    for _ in range(3):
        assert open_array(path, level=1).shape == (4, 4, 4)
    save_omezarr(np.ones((16, 8, 8), np.uint8), path, voxel_size=(1, 1, 1), n_levels=2,
                 overwrite=True)  # fmt: skip
    assert open_array(path, level=1).shape == (8, 4, 4)
    assert open_array(path, level=0).shape == (16, 8, 8)


def test_a_link_moved_to_another_array_reads_that_array(tmp_path: Path) -> None:
    """Same metadata behind a retargeted link: the reused array reads the link's new target."""
    first, second, link = tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "current.zarr"
    for target, value in ((first, 1), (second, 2)):
        zarr.create_array(target, shape=(4, 4), chunks=(2, 2), dtype="uint8")[:] = value
    link.symlink_to(first)
    for _ in range(3):
        assert int(read_volume(link).max()) == 1
    link.unlink()
    link.symlink_to(second)
    np.testing.assert_array_equal(read_volume(link), np.full((4, 4), 2, np.uint8))


def test_a_removed_array_raises_again(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    zarr.create_array(path, shape=(4,), dtype="uint8")
    for _ in range(3):
        open_array(path)
    for file in path.iterdir():
        file.unlink()
    path.rmdir()
    with pytest.raises(LinumpyError, match="no such file"):
        open_array(path)
