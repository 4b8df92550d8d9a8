"""Channel metadata (``omero``: names, colours, windows) of an image written by ome-zarr-py, kept by
``linum-convert-to-omezarr`` and ``linum-rechunk`` in the output's NGFF version, valid for
ome-zarr-models.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr

pytest.importorskip("ome_zarr")

OMERO = {
    "channels": [
        {
            "label": "DAPI",
            "color": "0000FF",
            "active": True,
            "window": {"start": 0.0, "end": 200.0, "min": 0.0, "max": 255.0},
        },
        {
            "label": "GFP",
            "color": "00FF00",
            "active": True,
            "window": {"start": 10.0, "end": 100.0, "min": 0.0, "max": 255.0},
        },
    ]
}


def _write(path: Path, version: str) -> None:
    from ome_zarr.format import FormatV04, FormatV05
    from ome_zarr.writer import write_image

    fmt = FormatV04() if version == "0.4" else FormatV05()
    group = zarr.open_group(path, mode="w", zarr_format=2 if version == "0.4" else 3)
    data = np.arange(2 * 4 * 16 * 16, dtype=np.uint8).reshape(2, 4, 16, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_image(data, group, scale_factors=(2,), fmt=fmt, axes="czyx")
    attrs = group.attrs.asdict()
    if version == "0.5":
        attrs["ome"]["omero"] = OMERO
    else:
        attrs["omero"] = OMERO
    group.attrs.update(attrs)


@pytest.mark.parametrize("out_version", ["0.4", "0.5"])
@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize("script", ["convert", "rechunk"])
def test_channels_kept(tmp_path: Path, script: str, version: str, out_version: str) -> None:
    from ome_zarr_models import open_ome_zarr

    if script == "convert":
        from linumpy.scripts.linum_convert_to_omezarr import main
    else:
        from linumpy.scripts.linum_rechunk import main
    source = tmp_path / "input.ome.zarr"
    _write(source, version)
    output = tmp_path / "output.ome.zarr"
    main([str(source), str(output), "--ngff-version", out_version])
    group = zarr.open_group(output, mode="r")
    attrs = group.attrs.asdict()
    assert (attrs["ome"] if out_version == "0.5" else attrs)["omero"] == OMERO
    if out_version == "0.5":
        assert "omero" not in attrs
    open_ome_zarr(group)  # ome-zarr-models validates the image, omero included


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_channels_passed_to_napari(tmp_path: Path, version: str) -> None:
    from linumpy.io.labelled import napari_image

    source = tmp_path / "input.ome.zarr"
    _write(source, version)
    _, kwargs = napari_image(source)
    assert kwargs["channel_axis"] == 0
    assert kwargs["name"] == ["DAPI", "GFP"]
    assert kwargs["colormap"] == [["#000000", "#0000FF"], ["#000000", "#00FF00"]]
    assert kwargs["contrast_limits"] == [[0.0, 200.0], [10.0, 100.0]]
    assert kwargs["visible"] == [True, True]
