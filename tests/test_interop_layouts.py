"""Collections of images and other NGFF versions, as other tools write them.

A bioformats2raw root (series in ``0/``, ``1/``...) and an HCS plate (fields in ``A/1/0``...)
stand for their one image, with a note at level INFO (a script's ``-v``); with several images,
the error lists their paths in one line. Versions other than 0.4 and 0.5 are named in the error.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import zarr

from linumpy.errors import LinumpyError
from linumpy.io import open_array, read_axes, read_omezarr, save_omezarr
from linumpy.io.omezarr import read_coordinates

DATA = np.arange(4 * 8 * 8, dtype=np.uint16).reshape(4, 8, 8)


def _bioformats2raw(root: Path, version: str, n_series: int) -> None:
    group = zarr.open_group(root, mode="w", zarr_format=3 if version == "0.5" else 2)
    if version == "0.5":
        group.attrs["ome"] = {"version": "0.5", "bioformats2raw.layout": 3}
    else:
        group.attrs["bioformats2raw.layout"] = 3
    zarr.open_group(root / "OME", mode="w", zarr_format=group.metadata.zarr_format)
    for series in range(n_series):
        save_omezarr(DATA + series, root / str(series), voxel_size=(3, 1, 1), ngff_version=version)


def _plate(root: Path, version: str, fields: list[str]) -> None:
    zarr_format = 3 if version == "0.5" else 2
    group = zarr.open_group(root, mode="w", zarr_format=zarr_format)
    wells = sorted({field.rsplit("/", 1)[0] for field in fields})
    plate = {
        "columns": [{"name": "1"}, {"name": "2"}],
        "rows": [{"name": "A"}],
        "wells": [
            {"path": w, "rowIndex": 0, "columnIndex": int(w.split("/")[1]) - 1} for w in wells
        ],
    }
    attrs = {"ome": {"version": "0.5", "plate": plate}} if version == "0.5" else {"plate": plate}
    group.attrs.update(attrs)
    for well in wells:
        images = [{"path": f.rsplit("/", 1)[1]} for f in fields if f.startswith(well + "/")]
        well_group = zarr.open_group(root / well, mode="w", zarr_format=zarr_format)
        well_group.attrs.update(
            {"ome": {"version": "0.5", "well": {"images": images}}}
            if version == "0.5"
            else {"well": {"images": images}}
        )
    for index, field in enumerate(fields):
        save_omezarr(DATA + index, root / field, voxel_size=(3, 1, 1), ngff_version=version)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_bioformats2raw_series_0_opens_with_a_note(tmp_path: Path, version: str, caplog) -> None:
    root = tmp_path / "converted.zarr"
    _bioformats2raw(root, version, 1)
    with caplog.at_level(logging.INFO, logger="linumpy.io.series"):
        array, voxel_size = read_omezarr(root)
    np.testing.assert_array_equal(array[...], DATA)
    assert voxel_size == (3.0, 1.0, 1.0)
    assert f"opening its one image, {root / '0'}" in caplog.text
    assert open_array(root).shape == DATA.shape
    assert [a.name for a in read_axes(root)] == ["z", "y", "x"]
    assert read_coordinates(root).scale == (3.0, 1.0, 1.0)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_bioformats2raw_series_are_listed(tmp_path: Path, version: str) -> None:
    root = tmp_path / "converted.zarr"
    _bioformats2raw(root, version, 3)
    with pytest.raises(LinumpyError) as caught:
        read_omezarr(root)
    message = str(caught.value)
    assert "\n" not in message and "bioformats2raw layout of 3 images" in message
    for series in "012":
        assert str(root / series) in message


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_plate_field_opens_or_fields_are_listed(tmp_path: Path, version: str) -> None:
    one = tmp_path / "one.zarr"
    _plate(one, version, ["A/1/0"])
    np.testing.assert_array_equal(read_omezarr(one)[0][...], DATA)
    several = tmp_path / "several.zarr"
    _plate(several, version, ["A/1/0", "A/1/1", "A/2/0"])
    with pytest.raises(LinumpyError, match="plate of 3 images") as caught:
        open_array(several)
    for field in ("A/1/0", "A/1/1", "A/2/0"):
        assert str(several / field) in str(caught.value)
    np.testing.assert_array_equal(read_omezarr(several / "A" / "2" / "0")[0][...], DATA + 2)


def test_script_opens_a_bioformats2raw_root_with_a_note(tmp_path: Path, capsys) -> None:
    from linumpy.scripts.linum_aip import main

    root = tmp_path / "converted.zarr"
    _bioformats2raw(root, "0.5", 1)
    main([str(root), str(tmp_path / "aip.ome.zarr"), "-v"])
    assert "opening its one image" in capsys.readouterr().err
    np.testing.assert_allclose(read_omezarr(tmp_path / "aip.ome.zarr")[0][...], DATA.mean(0))


@pytest.mark.parametrize("version", ["0.6", "0.6.dev4", "1.0"])
def test_newer_versions_are_named(tmp_path: Path, version: str) -> None:
    path = tmp_path / "image.ome.zarr"
    save_omezarr(DATA, path, voxel_size=(1, 1, 1))
    meta = json.loads((path / "zarr.json").read_text())
    meta["attributes"]["ome"]["version"] = version
    (path / "zarr.json").write_text(json.dumps(meta))
    for read in (read_omezarr, open_array, read_axes):
        with pytest.raises(LinumpyError, match=f"an NGFF {version} image; linumpy reads NGFF 0.4"):
            read(path)


def test_older_version_without_scales_is_named(tmp_path: Path) -> None:
    path = tmp_path / "image.ome.zarr"
    save_omezarr(DATA, path, voxel_size=(1, 1, 1), ngff_version="0.4")
    attrs = json.loads((path / ".zattrs").read_text())
    multiscale = attrs["multiscales"][0]
    multiscale["version"], multiscale["axes"] = "0.3", ["z", "y", "x"]
    for dataset in multiscale["datasets"]:
        del dataset["coordinateTransformations"]
    (path / ".zattrs").write_text(json.dumps(attrs))
    with pytest.raises(LinumpyError, match=r"an NGFF 0\.3 image: linumpy reads NGFF 0\.4 and 0\.5"):
        read_omezarr(path)
