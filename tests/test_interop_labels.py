"""Labels of other tools' images: read, and copied by ``linum-rechunk`` and
``linum-convert-to-omezarr`` as valid metadata of the output's NGFF version.

Inputs: images with labels written by ome-zarr-py (NGFF 0.4 and 0.5: its 0.5 labels group states
no version) and by hand as the 0.5 specification writes them; each copied to NGFF 0.4 and 0.5.
The output's labels group and label image are validated by ome-zarr-models, the label values
compared, the label image's ``image-label`` metadata kept. ``napari_layers`` gives each input's
image as an ``image`` layer and its label image as a ``labels`` layer with its colours and
properties, from a folder and over HTTP.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr

from linumpy.errors import LinumpyError
from linumpy.io import read_omezarr, read_volume, save_omezarr
from linumpy.io.labelled import napari_image, napari_layers
from tests.remote_server import serve_directory

pytest.importorskip("ome_zarr_models")

SHAPE = (4, 32, 32)
COLORS = [{"label-value": 1, "rgba": [255, 0, 0, 255]}, {"label-value": 2, "rgba": [0, 0, 255, 51]}]
PROPERTIES = [{"label-value": 1, "class": "nucleus", "area": 112}, {"label-value": 2, "class": "x"}]


def _labels() -> np.ndarray:
    labels = np.zeros(SHAPE, np.uint8)
    labels[:, 4:12, 6:20] = 1
    return labels


def _ome_zarr_py(path: Path, version: str) -> None:
    pytest.importorskip("ome_zarr")
    from ome_zarr.format import FormatV04, FormatV05
    from ome_zarr.writer import write_image, write_labels

    fmt = FormatV04() if version == "0.4" else FormatV05()
    group = zarr.open_group(path, mode="w", zarr_format=2 if version == "0.4" else 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_image(np.ones(SHAPE, np.uint16), group, scale_factors=(2,), fmt=fmt, axes="zyx")
        write_labels(_labels(), group, name="cells", scale_factors=(2,), fmt=fmt, axes="zyx",
                     label_metadata={"colors": COLORS, "properties": PROPERTIES})  # fmt: skip


def _by_hand(path: Path, version: str) -> None:
    """The specification's 0.5 layout: ``ome`` with its version in every group."""
    save_omezarr(np.ones(SHAPE, np.uint16), path, voxel_size=(1, 1, 1))
    save_omezarr(_labels(), path / "labels" / "cells", voxel_size=(1, 1, 1))
    label = zarr.open_group(path / "labels" / "cells")
    meta = {"colors": COLORS, "properties": PROPERTIES}
    label.attrs["ome"] = {**label.attrs["ome"], "image-label": meta}
    zarr.open_group(path / "labels").attrs["ome"] = {"version": "0.5", "labels": ["cells"]}


INPUTS = [
    pytest.param(_ome_zarr_py, "0.4", id="ome-zarr-py-0.4"),
    pytest.param(_ome_zarr_py, "0.5", id="ome-zarr-py-0.5"),
    pytest.param(_by_hand, "0.5", id="spec-0.5"),
]


def _validate(path: Path) -> None:
    """The image, its labels group and its label image, each by ome-zarr-models."""
    from ome_zarr_models import open_ome_zarr
    from ome_zarr_models.v04.image_label import ImageLabel as ImageLabel04
    from ome_zarr_models.v04.labels import Labels as Labels04
    from ome_zarr_models.v05.image_label import ImageLabel as ImageLabel05
    from ome_zarr_models.v05.labels import Labels as Labels05

    root = zarr.open_group(path, mode="r")
    open_ome_zarr(root)
    v3 = root.metadata.zarr_format == 3
    (Labels05 if v3 else Labels04).from_zarr(zarr.open_group(path / "labels", mode="r"))
    label = zarr.open_group(path / "labels" / "cells", mode="r")
    (ImageLabel05 if v3 else ImageLabel04).from_zarr(label)


@pytest.mark.parametrize("out_version", ["0.4", "0.5"])
@pytest.mark.parametrize("script", ["rechunk", "convert"])
@pytest.mark.parametrize(("write", "version"), INPUTS)
def test_labels_copied_as_valid_metadata(
    tmp_path: Path, write, version: str, script: str, out_version: str
) -> None:
    source = tmp_path / "input.ome.zarr"
    write(source, version)
    # read: the label image is an image
    assert read_omezarr(source / "labels" / "cells")[0].shape == SHAPE
    output = tmp_path / "output.ome.zarr"
    if script == "rechunk":
        from linumpy.scripts.linum_rechunk import main
    else:
        from linumpy.scripts.linum_convert_to_omezarr import main
    main([str(source), str(output), "--ngff-version", out_version])
    _validate(output)
    np.testing.assert_array_equal(read_volume(output / "labels" / "cells"), _labels())
    attrs = zarr.open_group(output / "labels" / "cells", mode="r").attrs.asdict()
    meta = attrs["ome"] if out_version == "0.5" else attrs
    assert meta["image-label"]["colors"] == COLORS
    labels = zarr.open_group(output / "labels", mode="r").attrs.asdict()
    assert (labels["ome"] if out_version == "0.5" else labels)["labels"] == ["cells"]
    if out_version == "0.4":
        assert "ome" not in json.dumps(labels)


@pytest.mark.parametrize("remote", [False, True], ids=["folder", "http"])
@pytest.mark.parametrize(("write", "version"), INPUTS)
def test_labels_are_napari_labels_layers(tmp_path: Path, write, version: str, remote: bool) -> None:
    """The image is an 'image' layer, its label image a 'labels' layer with its colours and
    properties, both at their scale; a label image alone is a 'labels' layer, and
    napari_image refuses it."""
    source = tmp_path / "input.ome.zarr"
    write(source, version)
    with contextlib.ExitStack() as stack:
        path = str(source)
        if remote:
            path = stack.enter_context(serve_directory(tmp_path)) + "/input.ome.zarr"
        layers = napari_layers(path)
        assert [kind for _, _, kind in layers] == ["image", "labels"]
        (image, image_kwargs, _), (labels, kwargs, _) = layers
        assert "colormap" not in image_kwargs and image_kwargs["axis_labels"] == ("z", "y", "x")
        assert kwargs["name"] == "cells"
        assert kwargs["colormap"] == {1: (1.0, 0.0, 0.0, 1.0), 2: (0.0, 0.0, 1.0, 0.2)}
        assert kwargs["features"] == {
            "index": [1, 2],
            "area": [112, None],
            "class": ["nucleus", "x"],
        }
        assert kwargs["scale"] == image_kwargs["scale"] and kwargs["axis_labels"] == ("z", "y", "x")
        level0 = labels[0] if isinstance(labels, list) else labels
        np.testing.assert_array_equal(level0.compute(), _labels())
        alone = napari_layers(path + "/labels/cells")
        assert [(kw["name"], kind) for _, kw, kind in alone] == [("cells", "labels")]
        assert alone[0][1]["colormap"] == kwargs["colormap"]
        with pytest.raises(LinumpyError, match="is a label image"):
            napari_image(path + "/labels/cells")
