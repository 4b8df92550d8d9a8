"""OME-Zarr writing and reading: metadata, pyramid, round trips, NGFF 0.4 and 0.5."""

from __future__ import annotations

import json
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import zarr
from ome_zarr.io import parse_url
from ome_zarr.reader import Reader
from zarr_layouts import sample_data

from linumpy.errors import LinumpyError
from linumpy.io import OmeZarrWriter, read_omezarr, read_volume, save_omezarr

VOXEL = (0.1 + 0.2, 1 / 3, 2.5e-3)  # values whose float repr must survive JSON exactly


@pytest.mark.parametrize("ngff_version", ["0.4", "0.5"])
def test_round_trip_and_metadata(tmp_path: Path, ngff_version: str) -> None:
    data = sample_data((9, 20, 31), "uint16")
    path = tmp_path / "img.ome.zarr"
    save_omezarr(
        data, path, voxel_size=VOXEL, chunks=(4, 8, 8), n_levels=3, ngff_version=ngff_version
    )
    array, voxel_size = read_omezarr(path)
    assert voxel_size == VOXEL
    np.testing.assert_array_equal(array[...], data)
    assert array.metadata.zarr_format == (3 if ngff_version == "0.5" else 2)
    compressor = array.compressors[0] if ngff_version == "0.5" else array.metadata.compressor
    assert "zstd" in type(compressor).__name__.lower()
    level1, voxel1 = read_omezarr(path, level=1)
    assert level1.shape == (5, 10, 16)
    assert voxel1 == tuple(v * 2 for v in VOXEL)
    level2, voxel2 = read_omezarr(path, level=2)
    assert level2.shape == (3, 5, 8)
    assert voxel2 == tuple(v * 4 for v in VOXEL)
    # 2x mean of the first full block, rounded back to the dtype
    expected = np.round(data[:2, :2, :2].astype(float).mean())
    assert level1[0, 0, 0] == expected
    # the ome-zarr reference reader understands the image
    nodes = list(Reader(parse_url(str(path)))())
    assert len(nodes[0].data) == 3
    assert [a["name"] for a in nodes[0].metadata["axes"]] == ["z", "y", "x"]
    assert nodes[0].metadata["axes"][2]["unit"] == "micrometer"


def test_ngff_05_layout_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "img.ome.zarr"
    save_omezarr(np.ones((4, 6), np.float32), path, voxel_size=(2, 3), unit="millimeter")
    attrs = json.loads((path / "zarr.json").read_text())["attributes"]["ome"]
    assert attrs["version"] == "0.5"
    multiscale = attrs["multiscales"][0]
    assert multiscale["axes"] == [
        {"name": "y", "type": "space", "unit": "millimeter"},
        {"name": "x", "type": "space", "unit": "millimeter"},
    ]
    assert multiscale["datasets"][0]["coordinateTransformations"] == [
        {"type": "scale", "scale": [2.0, 3.0]}
    ]


def test_sharded_and_dask_input(tmp_path: Path) -> None:
    data = sample_data((16, 32, 32), "float32")
    path = tmp_path / "img.ome.zarr"
    save_omezarr(
        da.from_array(data, chunks=(5, 7, 9)),
        path,
        voxel_size=(1, 1, 1),
        chunks=(4, 8, 8),
        shards=(8, 16, 16),
        n_levels=2,
    )
    array, _ = read_omezarr(path)
    assert array.shards == (8, 16, 16)
    np.testing.assert_array_equal(read_volume(path), data)
    assert read_omezarr(path, level=1)[0].shards is not None


def test_writer_tile_by_tile(tmp_path: Path) -> None:
    data = sample_data((8, 24, 24), "uint8")
    path = tmp_path / "tiles.ome.zarr"
    with OmeZarrWriter(
        path, data.shape, data.dtype, voxel_size=(1, 1, 1), chunks=(8, 8, 8), n_levels=2
    ) as writer:
        for y in range(0, 24, 8):
            for x in range(0, 24, 8):
                writer[:, y : y + 8, x : x + 8] = data[:, y : y + 8, x : x + 8]
    np.testing.assert_array_equal(read_volume(path), data)
    assert read_volume(path, level=1).shape == (4, 12, 12)
    assert read_volume(path, level=1).any()


def test_overwrite_and_bad_arguments(tmp_path: Path) -> None:
    path = tmp_path / "img.ome.zarr"
    save_omezarr(np.zeros((4, 4), np.uint8), path, voxel_size=(1, 1))
    with pytest.raises(LinumpyError, match="exists; pass overwrite=True"):
        save_omezarr(np.zeros((4, 4), np.uint8), path, voxel_size=(1, 1))
    save_omezarr(np.ones((4, 4), np.uint8), path, voxel_size=(1, 1), overwrite=True)
    assert read_volume(path).sum() == 16
    with pytest.raises(ValueError, match="voxel_size must hold 2 positive"):
        save_omezarr(np.zeros((4, 4)), tmp_path / "b", voxel_size=(1, 0))
    with pytest.raises(ValueError, match="multiples of chunks"):
        save_omezarr(
            np.zeros((4, 4)), tmp_path / "b", voxel_size=(1, 1), chunks=(2, 2), shards=(3, 4)
        )
    with pytest.raises(ValueError, match="ngff_version"):
        save_omezarr(np.zeros((4, 4)), tmp_path / "b", voxel_size=(1, 1), ngff_version="0.3")


def test_read_omezarr_rejects_plain_arrays(tmp_path: Path) -> None:
    zarr.create_array(tmp_path / "a.zarr", shape=(2, 2), dtype="u1")
    with pytest.raises(LinumpyError, match="a.zarr: a plain zarr array"):
        read_omezarr(tmp_path / "a.zarr")
