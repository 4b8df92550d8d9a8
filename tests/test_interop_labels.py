"""Labels of other tools' images: read, and copied by ``linum-rechunk`` and
``linum-convert-to-omezarr`` as valid metadata of the output's NGFF version.

Inputs: images with labels written by ome-zarr-py (NGFF 0.4 and 0.5: its 0.5 labels group states
no version) and by hand as the 0.5 specification writes them; each copied to NGFF 0.4 and 0.5.
The output's labels group and label image are validated by ome-zarr-models, the label values
compared, the label image's ``image-label`` metadata kept.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr

from linumpy.io import read_omezarr, read_volume, save_omezarr

pytest.importorskip("ome_zarr_models")

SHAPE = (4, 32, 32)
COLORS = [{"label-value": 1, "rgba": [255, 0, 0, 255]}]


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
                     label_metadata={"colors": COLORS})  # fmt: skip


def _by_hand(path: Path, version: str) -> None:
    """The specification's 0.5 layout: ``ome`` with its version in every group."""
    save_omezarr(np.ones(SHAPE, np.uint16), path, voxel_size=(1, 1, 1))
    save_omezarr(_labels(), path / "labels" / "cells", voxel_size=(1, 1, 1))
    label = zarr.open_group(path / "labels" / "cells")
    label.attrs["ome"] = {**label.attrs["ome"], "image-label": {"colors": COLORS}}
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
