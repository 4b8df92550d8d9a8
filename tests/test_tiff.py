"""TIFF input of ``linum-convert-to-omezarr``: axes, voxel sizes and units from tifffile's
metadata (ImageJ, OME-XML), ``--series``, and the inputs it refuses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tifffile

from linumpy.io import read_axes, read_omezarr, read_volume, save_omezarr
from linumpy.mosaic.convert import convert_to_omezarr
from linumpy.scripts import linum_convert_to_omezarr

RNG = np.random.default_rng(13)


def _data(shape: tuple[int, ...], dtype: str = "uint16") -> np.ndarray:
    return RNG.integers(0, 1000, shape).astype(dtype)


def _convert(capsys, source: Path, target: Path, *options: object) -> str:
    """Run the script; return its last output line."""
    capsys.readouterr()
    linum_convert_to_omezarr.main([str(source), str(target), *(str(o) for o in options)])
    return capsys.readouterr().out.strip().splitlines()[-1]


def _refused(capsys, *args: object) -> str:
    """Run the script, which must stop with exit status 2; return its one error line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        linum_convert_to_omezarr.main([str(a) for a in args])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if ": error: " in line]
    assert len(errors) == 1 and err[-1] == errors[0], err
    return errors[0]


def _axes(path: Path) -> list[tuple[str, str | None, str | None]]:
    return [tuple(axis) for axis in read_axes(path)]


UM, NM = "micrometer", "nanometer"


def _imagej(path: Path, data: np.ndarray, pixel: float, **metadata: object) -> None:
    """An ImageJ TIFF with a pixel size (resolution tags) and ``metadata`` (axes, unit...)."""
    tifffile.imwrite(path, data, imagej=True, resolution=(1 / pixel, 1 / pixel), metadata=metadata)


def test_imagej_stack_keeps_its_voxel_size_and_unit(tmp_path, capsys) -> None:
    data = _data((10, 20, 30))
    source = tmp_path / "stack.tif"
    _imagej(source, data, 0.5, spacing=2.0, unit="um", axes="ZYX")
    line = _convert(capsys, source, tmp_path / "out.ome.zarr", "--chunks", 4, 8, 8)
    assert "axes zyx" in line and "from ImageJ metadata" in line, line
    array, voxel_size = read_omezarr(tmp_path / "out.ome.zarr")
    assert voxel_size == (2.0, 0.5, 0.5)
    assert _axes(tmp_path / "out.ome.zarr") == [(n, "space", UM) for n in "zyx"]
    np.testing.assert_array_equal(array[...], data)


def test_imagej_units_other_than_micrometers(tmp_path) -> None:
    source = tmp_path / "stack.tif"
    _imagej(source, _data((4, 8, 8)), 0.1, spacing=50.0, unit="nm", axes="ZYX")
    done = convert_to_omezarr(source, tmp_path / "out.ome.zarr")
    assert done.voxel_size_from == "ImageJ metadata"
    assert read_omezarr(tmp_path / "out.ome.zarr")[1] == (50.0, 0.1, 0.1)
    assert _axes(tmp_path / "out.ome.zarr") == [(n, "space", NM) for n in "zyx"]


def test_rgb_samples_become_a_channel_axis(tmp_path, capsys) -> None:
    data = _data((40, 50, 3), "uint8")
    source = tmp_path / "rgb.tif"
    tifffile.imwrite(source, data)
    target = tmp_path / "rgb.ome.zarr"
    # chunks smaller than the image: every block is read and transposed on its own
    line = _convert(capsys, source, target, "--chunks", 1, 16, 16, "--n-levels", 2)
    assert "axes cyx" in line and "none known" in line, line
    assert _axes(target) == [("c", "channel", None), ("y", "space", UM), ("x", "space", UM)]
    array, voxel_size = read_omezarr(target)
    np.testing.assert_array_equal(array[...], np.moveaxis(data, 2, 0))
    assert voxel_size == (1.0, 1.0, 1.0)
    assert read_omezarr(target, 1)[0].shape == (3, 20, 25)  # channels are not downsampled


def test_ome_tiff_physical_sizes_and_units(tmp_path, capsys) -> None:
    data = _data((2, 5, 20, 30))
    source = tmp_path / "cells.ome.tif"
    tifffile.imwrite(
        source,
        data,
        ome=True,
        metadata={
            "axes": "CZYX",
            "PhysicalSizeX": 0.25,
            "PhysicalSizeY": 0.25,
            "PhysicalSizeZ": 300.0,
            "PhysicalSizeZUnit": "nm",
        },
    )
    line = _convert(capsys, source, tmp_path / "out.ome.zarr")
    assert "axes czyx" in line and "z 300 nanometer" in line and "OME-XML" in line, line
    array, voxel_size = read_omezarr(tmp_path / "out.ome.zarr")
    assert voxel_size == (1.0, 300.0, 0.25, 0.25)
    assert _axes(tmp_path / "out.ome.zarr") == [
        ("c", "channel", None),
        ("z", "space", NM),
        ("y", "space", UM),
        ("x", "space", UM),
    ]
    np.testing.assert_array_equal(array[...], data)


def test_imagej_hyperstack_is_reordered_to_tczyx(tmp_path) -> None:
    data = _data((3, 4, 2, 20, 30))
    source = tmp_path / "hyper.tif"
    _imagej(source, data, 0.5, axes="TZCYX", unit="um", spacing=3.0, finterval=0.5)
    target = tmp_path / "out.ome.zarr"
    convert_to_omezarr(source, target, chunks=(1, 1, 2, 8, 8), n_levels=2)
    array, voxel_size = read_omezarr(target)
    np.testing.assert_array_equal(array[...], np.swapaxes(data, 1, 2))
    assert voxel_size == (0.5, 1.0, 3.0, 0.5, 0.5)
    assert [a.name for a in read_axes(target)] == list("tczyx")
    assert read_axes(target)[0].unit == "second"
    assert read_omezarr(target, 1)[0].shape == (3, 2, 2, 10, 15)


def test_a_stack_of_unnamed_pages_is_z(tmp_path) -> None:
    data = _data((6, 20, 30))
    tifffile.imwrite(tmp_path / "plain.tif", data)
    done = convert_to_omezarr(tmp_path / "plain.tif", tmp_path / "out.ome.zarr")
    assert tifffile.TiffFile(tmp_path / "plain.tif").series[0].axes == "QYX"
    assert [a.name for a in done.axes] == list("zyx") and done.voxel_size_from is None
    np.testing.assert_array_equal(read_omezarr(tmp_path / "out.ome.zarr")[0][...], data)


def test_series_option(tmp_path, capsys) -> None:
    first, second = _data((4, 20, 30), "uint8"), _data((8, 10), "float32")
    source = tmp_path / "multi.tif"
    with tifffile.TiffWriter(source) as tif:
        tif.write(first, photometric="minisblack")
        tif.write(second)
    _convert(capsys, source, tmp_path / "a.ome.zarr")
    _convert(capsys, source, tmp_path / "b.ome.zarr", "--series", 1)
    np.testing.assert_array_equal(read_omezarr(tmp_path / "a.ome.zarr")[0][...], first)
    np.testing.assert_array_equal(read_omezarr(tmp_path / "b.ome.zarr")[0][...], second)
    assert [a.name for a in read_axes(tmp_path / "b.ome.zarr")] == ["y", "x"]
    error = _refused(capsys, source, tmp_path / "c.ome.zarr", "--series", 2)
    assert "--series" in error and "multi.tif" in error and "2 series" in error, error
    assert "--series" in _refused(capsys, source, tmp_path / "c.ome.zarr", "--series", -1)
    np.save(tmp_path / "v.npy", first)
    error = _refused(capsys, tmp_path / "v.npy", tmp_path / "c.ome.zarr", "--series", 1)
    assert "--series" in error and "v.npy" in error, error
    assert not (tmp_path / "c.ome.zarr").exists()


def test_each_ome_series_has_its_own_sizes(tmp_path) -> None:
    source = tmp_path / "two.ome.tif"
    with tifffile.TiffWriter(source, ome=True) as tif:
        sizes = {"PhysicalSizeX": 0.5, "PhysicalSizeY": 0.5, "PhysicalSizeZ": 2.0}
        tif.write(_data((3, 20, 30)), metadata={"axes": "ZYX", **sizes})
        sizes = {"PhysicalSizeX": 4.0, "PhysicalSizeY": 4.0, "Name": "overview"}
        tif.write(_data((20, 30), "uint8"), metadata={"axes": "YX", **sizes})
    convert_to_omezarr(source, tmp_path / "a.ome.zarr")
    convert_to_omezarr(source, tmp_path / "b.ome.zarr", series=1)
    assert read_omezarr(tmp_path / "a.ome.zarr")[1] == (2.0, 0.5, 0.5)
    assert read_omezarr(tmp_path / "b.ome.zarr")[1] == (4.0, 4.0)


def test_voxel_size_option_overrides_the_metadata(tmp_path, capsys) -> None:
    source = tmp_path / "stack.tif"
    _imagej(source, _data((4, 8, 8)), 500.0, spacing=50.0, unit="nm", axes="ZYX")
    line = _convert(capsys, source, tmp_path / "a.ome.zarr", "--voxel-size", 3, 1, 1)
    assert "from --voxel-size" in line, line
    assert read_omezarr(tmp_path / "a.ome.zarr")[1] == (3.0, 1.0, 1.0)
    assert _axes(tmp_path / "a.ome.zarr") == [(n, "space", UM) for n in "zyx"]
    tifffile.imwrite(tmp_path / "rgb.tif", _data((40, 50, 3), "uint8"))
    # one value per space axis for an image with channels
    _convert(capsys, tmp_path / "rgb.tif", tmp_path / "b.ome.zarr", "--voxel-size", 2, 2)
    assert read_omezarr(tmp_path / "b.ome.zarr")[1] == (1.0, 2.0, 2.0)
    error = _refused(capsys, tmp_path / "rgb.tif", tmp_path / "c.ome.zarr", "--voxel-size", 2)
    assert "voxel_size" in error and "cyx" in error, error


def test_axes_without_an_ome_zarr_place_are_refused(tmp_path, capsys) -> None:
    source = tmp_path / "angles.tif"
    tifffile.imwrite(
        source, _data((3, 20, 30), "uint8"), photometric="minisblack", metadata={"axes": "AYX"}
    )
    error = _refused(capsys, source, tmp_path / "out.ome.zarr")
    assert "angles.tif" in error and "AYX" in error, error
    assert not (tmp_path / "out.ome.zarr").exists()


def test_data_that_are_not_numbers_are_refused(tmp_path, capsys) -> None:
    np.save(tmp_path / "words.npy", np.array([["a", "b"], ["c", "d"]]))
    error = _refused(capsys, tmp_path / "words.npy", tmp_path / "out.ome.zarr")
    assert "words.npy" in error and "not numbers" in error, error
    assert not (tmp_path / "out.ome.zarr").exists()


def test_bool_tiff_converts(tmp_path) -> None:
    """Booleans are data OME-Zarr holds (a mask): converted as they are."""
    data = RNG.random((20, 30)) > 0.5
    tifffile.imwrite(tmp_path / "mask.tif", data)
    convert_to_omezarr(tmp_path / "mask.tif", tmp_path / "mask.ome.zarr")
    array, _ = read_omezarr(tmp_path / "mask.ome.zarr")
    assert array.dtype == np.bool_
    np.testing.assert_array_equal(array[...], data)


def test_ome_zarr_input_keeps_its_axes(tmp_path) -> None:
    data = _data((3, 16, 16), "uint8")
    save_omezarr(data, tmp_path / "in.ome.zarr", voxel_size=(1, 0.5, 0.5), axes="cyx", unit=NM)
    done = convert_to_omezarr(tmp_path / "in.ome.zarr", tmp_path / "out.ome.zarr", n_levels=2)
    assert done.voxel_size_from == "the OME-Zarr input"
    assert _axes(tmp_path / "out.ome.zarr") == _axes(tmp_path / "in.ome.zarr")
    assert read_omezarr(tmp_path / "out.ome.zarr")[1] == (1.0, 0.5, 0.5)
    assert read_omezarr(tmp_path / "out.ome.zarr", 1)[0].shape == (3, 8, 8)


@pytest.mark.gpu
def test_gpu_encoding_of_a_reordered_tiff_matches_the_cpu(tmp_path) -> None:
    data = _data((3, 4, 2, 20, 30))
    _imagej(tmp_path / "hyper.tif", data, 0.5, axes="TZCYX", unit="um", spacing=3.0)
    for name, gpu in (("cpu", False), ("gpu", True)):
        target = tmp_path / f"{name}.ome.zarr"
        convert_to_omezarr(
            tmp_path / "hyper.tif", target, chunks=(1, 1, 2, 8, 8), n_levels=2, gpu=gpu
        )
    for level in (0, 1):
        cpu = read_omezarr(tmp_path / "cpu.ome.zarr", level)[0][...]
        np.testing.assert_array_equal(read_omezarr(tmp_path / "gpu.ome.zarr", level)[0][...], cpu)
    np.testing.assert_array_equal(read_volume(tmp_path / "gpu.ome.zarr"), np.swapaxes(data, 1, 2))
