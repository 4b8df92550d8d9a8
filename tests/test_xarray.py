"""Images as xarray DataArrays (NGFF axes, scale, translation, units) and napari's arguments."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zarr

from linumpy.io import open_volume, read_volume, save_omezarr
from linumpy.io.labelled import napari_image, open_dataarray, placement
from tests.remote_server import serve_directory
from tests.zarr_layouts import sample_data

xr = pytest.importorskip("xarray")


def _with_translation(path: Path, level: list[float], shared: list[float]) -> None:
    """Give the image's level 0 and its multiscale a translation (save_omezarr writes none)."""
    meta_path = path / "zarr.json"
    meta = json.loads(meta_path.read_text())
    multiscale = meta["attributes"]["ome"]["multiscales"][0]
    multiscale["datasets"][0]["coordinateTransformations"].append(
        {"type": "translation", "translation": level}
    )
    multiscale["coordinateTransformations"] = [
        {"type": "scale", "scale": [2.0, 1.0, 1.0]},
        {"type": "translation", "translation": shared},
    ]
    meta_path.write_text(json.dumps(meta))


def test_dataarray_has_axes_scale_translation_units(tmp_path: Path) -> None:
    data = sample_data((6, 10, 12), "uint16")
    path = tmp_path / "image.ome.zarr"
    save_omezarr(data, path, voxel_size=(5.0, 0.5, 0.25), unit="nanometer")
    _with_translation(path, [1.0, 2.0, 3.0], [100.0, 0.0, -1.0])
    image = open_volume(path, xarray=True)
    assert isinstance(image, xr.DataArray)
    assert image.dims == ("z", "y", "x")
    np.testing.assert_array_equal(image.values, data)
    # global scale * (scale * i + translation) + global translation
    np.testing.assert_allclose(image.coords["z"].values, 2.0 * (5.0 * np.arange(6) + 1.0) + 100.0)
    np.testing.assert_allclose(image.coords["x"].values, 0.25 * np.arange(12) + 3.0 - 1.0)
    assert image.coords["y"].attrs["units"] == "nanometer"
    assert image.attrs["units"] == {"z": "nanometer", "y": "nanometer", "x": "nanometer"}
    assert image.attrs["scale"] == (10.0, 0.5, 0.25)
    assert image.attrs["translation"] == (102.0, 2.0, 2.0)
    # a label-based selection reads only what it needs and equals the data
    part = image.sel(x=slice(2.0, 2.6)).isel(z=slice(1, 3))
    np.testing.assert_array_equal(part.values, data[1:3, :, 0:3])


def test_dataarray_of_a_region_and_a_level(tmp_path: Path) -> None:
    data = sample_data((8, 16, 16), "float32")
    path = tmp_path / "image.ome.zarr"
    save_omezarr(data, path, voxel_size=(4, 1, 1), n_levels=2)
    region = (slice(2, 6), slice(4, 12))
    image = open_dataarray(path, region=region)
    np.testing.assert_array_equal(image.values, data[2:6, 4:12])
    np.testing.assert_allclose(image.coords["z"].values, 4.0 * np.arange(2, 6))
    level = open_volume(path, level=1, xarray=True)
    assert level.attrs["scale"] == (8.0, 2.0, 2.0)
    np.testing.assert_array_equal(level.values, read_volume(path, level=1))


def test_channel_axis_and_plain_arrays(tmp_path: Path) -> None:
    data = sample_data((3, 8, 8), "uint8")
    path = tmp_path / "rgb.ome.zarr"
    save_omezarr(data, path, voxel_size=(1, 0.5, 0.5), axes="cyx")
    image = open_volume(path, xarray=True)
    assert image.dims == ("c", "y", "x")
    assert image.coords["c"].values.tolist() == [0, 1, 2]
    assert image.attrs["axis_types"]["c"] == "channel"
    plain = zarr.create_array(tmp_path / "plain.zarr", shape=(4, 5), dtype="uint8")
    plain[...] = 7
    array = open_volume(tmp_path / "plain.zarr", xarray=True)
    assert array.dims == ("y", "x") and array.attrs["scale"] == (1.0, 1.0)
    assert int(array.sum()) == 7 * 20


def test_dataarray_over_http(tmp_path: Path) -> None:
    pytest.importorskip("obstore")
    data = sample_data((8, 16, 16), "uint16")
    save_omezarr(data, tmp_path / "image.ome.zarr", voxel_size=(3, 1, 1))
    with serve_directory(tmp_path) as url:
        image = open_volume(f"{url}/image.ome.zarr", xarray=True)
        np.testing.assert_array_equal(image.values, data)
        np.testing.assert_allclose(image.coords["z"].values, 3.0 * np.arange(8))
        assert image.name == "image.ome.zarr"


def test_napari_arguments(tmp_path: Path) -> None:
    data = sample_data((8, 32, 32), "uint16")
    path = tmp_path / "image.ome.zarr"
    save_omezarr(data, path, voxel_size=(5, 2, 2), n_levels=3)
    levels, kwargs = napari_image(path)
    assert [level.shape for level in levels] == [(8, 32, 32), (4, 16, 16), (2, 8, 8)]
    np.testing.assert_array_equal(levels[1].compute(), read_volume(path, level=1))
    assert kwargs == {
        "multiscale": True,
        "name": "image.ome.zarr",
        "scale": (5.0, 2.0, 2.0),
        "translate": (0.0, 0.0, 0.0),
        "axis_labels": ("z", "y", "x"),
        "units": ("micrometer", "micrometer", "micrometer"),
    }
    rgb = sample_data((3, 8, 8), "uint8")
    save_omezarr(rgb, tmp_path / "rgb.ome.zarr", voxel_size=(1, 0.5, 0.5), axes="cyx")
    single, kwargs = napari_image(tmp_path / "rgb.ome.zarr")
    assert single.shape == (3, 8, 8)
    assert kwargs["channel_axis"] == 0 and kwargs["scale"] == (0.5, 0.5)
    assert kwargs["multiscale"] is False
    assert placement(tmp_path / "rgb.ome.zarr")[1] == 1  # the number of levels


@pytest.mark.gpu
def test_dataarray_with_cupy_blocks(tmp_path: Path) -> None:
    import cupy

    data = sample_data((8, 16, 16), "uint16")
    save_omezarr(data, tmp_path / "image.ome.zarr", voxel_size=(1, 1, 1))
    image = open_volume(tmp_path / "image.ome.zarr", xarray=True, gpu=True)
    assert isinstance(image.data._meta, cupy.ndarray)
    computed = image.data.compute()
    assert isinstance(computed, cupy.ndarray)
    np.testing.assert_array_equal(computed.get(), data)
