"""NGFF metadata against ome-zarr-models: every image linumpy writes (0.4 and 0.5, all the axes it
supports) validates with the models; hand-broken metadata is refused on reading with an error
naming the file; what linumpy accepted before and the models would refuse is still read."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pydantic
import pytest
import zarr
from ome_zarr_models.v04.image import Image as ImageV04
from ome_zarr_models.v04.image import ImageAttrs as ImageAttrsV04
from ome_zarr_models.v05.image import Image as ImageV05
from ome_zarr_models.v05.image import ImageAttrs as ImageAttrsV05

from linumpy.errors import LinumpyError
from linumpy.io import open_array, read_axes, read_omezarr, save_omezarr
from linumpy.io.metadata import Axis, image_attrs, make_axes

AXES = {"zyx": (6, 8, 8), "cyx": (3, 8, 8), "tczyx": (2, 3, 4, 8, 8), "yx": (8, 8)}


def _attrs_file(image: Path, version: str) -> Path:
    return image / ("zarr.json" if version == "0.5" else ".zattrs")


def _edit_attrs(image: Path, version: str, edit: Callable[[dict], None]) -> None:
    """Apply ``edit`` to the first multiscale of the image's attributes, in its file."""
    file = _attrs_file(image, version)
    doc = json.loads(file.read_text())
    attrs = doc["attributes"]["ome"] if version == "0.5" else doc
    edit(attrs["multiscales"][0])
    file.write_text(json.dumps(doc))


def _save(path: Path, version: str, shape: tuple[int, ...] = (4, 8, 8), **kwargs) -> Path:
    voxel = (1.0,) * (len(shape) - 2) + (0.5, 0.5)
    save_omezarr(
        np.zeros(shape, np.uint8),
        path,
        voxel_size=voxel,
        n_levels=2,
        ngff_version=version,
        **kwargs,
    )
    return path


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize("unit", ["nanometer", "micrometer"])
@pytest.mark.parametrize("axes", AXES)
def test_written_images_validate(tmp_path: Path, axes: str, unit: str, version: str) -> None:
    image = _save(tmp_path / "a.ome.zarr", version, AXES[axes], axes=axes, unit=unit)
    group = zarr.open_group(image, mode="r")
    # the whole group (attributes and level arrays), as ome-zarr-models reads it
    model = (ImageV05 if version == "0.5" else ImageV04).from_zarr(group)
    attributes = model.attributes.ome if version == "0.5" else model.attributes
    multiscale = attributes.multiscales[0]
    assert [a.name for a in multiscale.axes] == list(axes)
    assert [a.unit for a in multiscale.axes if a.type == "space"] == [unit] * (2 + ("z" in axes))
    assert len(multiscale.datasets) == 2
    # and the attributes file itself, read as JSON
    doc = json.loads(_attrs_file(image, version).read_text())
    if version == "0.5":
        ImageAttrsV05.model_validate(doc["attributes"]["ome"])
    else:
        ImageAttrsV04.model_validate(doc)


def _attrs_through_models(name, axes, scales, version) -> dict:
    """The image attributes as ome-zarr-models builds and serialises them."""
    if version == "0.5":
        from ome_zarr_models.v05 import axes as axes_models
        from ome_zarr_models.v05 import multiscales as multiscale_models
    else:
        from ome_zarr_models.v04 import axes as axes_models
        from ome_zarr_models.v04 import multiscales as multiscale_models
    multiscale = multiscale_models.Multiscale(
        name=name,
        axes=[axes_models.Axis(**axis._asdict()) for axis in axes],
        datasets=[
            multiscale_models.Dataset.build(path=str(i), scale=scale, translation=None)
            for i, scale in enumerate(scales)
        ],
        **({"version": "0.4"} if version == "0.4" else {}),
    )
    if version == "0.5":
        model = ImageAttrsV05(multiscales=[multiscale], version="0.5")
        return {"ome": model.model_dump(mode="json", exclude_none=True, by_alias=True)}
    model = ImageAttrsV04(multiscales=[multiscale])
    return model.model_dump(mode="json", exclude_none=True, by_alias=True)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize("axes", [*AXES, "custom"])
def test_built_attributes_are_what_the_models_write(axes: str, version: str) -> None:
    if axes == "custom":
        parsed = (Axis("angle", "angle", "degree"), Axis("y", "space", None), Axis("x", "space"))
    else:
        parsed = make_axes(len(axes), axes, unit="nanometer")
    scales = [[1 + i + level for i in range(len(parsed))] for level in range(3)]
    built = image_attrs("image", parsed, scales, version)
    assert json.dumps(built) == json.dumps(_attrs_through_models("image", parsed, scales, version))


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_a_custom_axis_validates(tmp_path: Path, version: str) -> None:
    axes = [Axis("angle", "angle", "degree"), "y", "x"]
    image = _save(tmp_path / "a.ome.zarr", version, (2, 8, 8), axes=axes)
    model = (ImageV05 if version == "0.5" else ImageV04).from_zarr(zarr.open_group(image))
    assert model.ome_zarr_version == version
    assert read_axes(image)[0] == Axis("angle", "angle", "degree")


def test_two_custom_axes_are_refused_before_writing(tmp_path: Path) -> None:
    axes = [Axis("a", "angle"), Axis("p", "phase"), "y", "x"]
    with pytest.raises(ValueError, match="at most one axis of another type"):
        _save(tmp_path / "a.ome.zarr", "0.5", (2, 2, 8, 8), axes=axes)
    assert list(tmp_path.iterdir()) == []


def _wrong_axis_type(multiscale: dict) -> None:
    for axis in multiscale["axes"]:
        axis["type"] = "spatial"


def _no_transformations(multiscale: dict) -> None:
    del multiscale["datasets"][1]["coordinateTransformations"]


def _scale_too_long(multiscale: dict) -> None:
    for dataset in multiscale["datasets"]:
        dataset["coordinateTransformations"][0]["scale"].append(1.0)


def _level_scale_too_long(multiscale: dict) -> None:
    multiscale["datasets"][0]["coordinateTransformations"][0]["scale"].append(1.0)


BROKEN = {
    "wrong-axis-type": (_wrong_axis_type, "multiscales.0.axes: Length of space axes (0)"),
    "no-transformations": (_no_transformations, "coordinateTransformations: Field required"),
    "scale-too-long": (_scale_too_long, "the scale transform has dimensionality 4"),
    # one level's scale longer than the next: ome-zarr-models 1.8 fails with an IndexError
    "level-scale-too-long": (_level_scale_too_long, "IndexError"),
}


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize("case", BROKEN)
def test_broken_metadata_names_the_file(tmp_path: Path, case: str, version: str) -> None:
    image = _save(tmp_path / "a.ome.zarr", version)
    edit, message = BROKEN[case]
    _edit_attrs(image, version, edit)
    file = str(_attrs_file(image, version))
    for read in (read_omezarr, open_array, read_axes):
        with pytest.raises(LinumpyError) as error:
            read(image)
        text = str(error.value)
        assert text.startswith(f"{file}: invalid OME-NGFF {version} metadata"), text
        assert message in text, text


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_axes_without_types_are_still_read(tmp_path: Path, version: str) -> None:
    """The specification makes an axis ``type`` optional; the models' axis rules need it. Such
    images are read as before, the types implied by the names."""
    image = _save(tmp_path / "a.ome.zarr", version)

    def drop_types(multiscale: dict) -> None:
        for axis in multiscale["axes"]:
            del axis["type"]

    _edit_attrs(image, version, drop_types)
    array, voxel_size = read_omezarr(image, level=1)
    assert array.shape == (2, 4, 4) and voxel_size == (2.0, 1.0, 1.0)
    assert [a.type for a in read_axes(image)] == [None, None, None]


def test_ngff_03_is_still_read(tmp_path: Path) -> None:
    """ome-zarr-models has no model for NGFF 0.3 (axes as plain names): linumpy's own parser
    reads it, unvalidated."""
    image = _save(tmp_path / "a.ome.zarr", "0.4")

    def as_03(multiscale: dict) -> None:
        multiscale["version"] = "0.3"
        multiscale["axes"] = ["z", "y", "x"]

    _edit_attrs(image, "0.4", as_03)
    with pytest.raises(pydantic.ValidationError, match="valid dictionary"):
        ImageAttrsV04.model_validate(json.loads((image / ".zattrs").read_text()))
    assert open_array(image, level=1).shape == (2, 4, 4)
    assert [a.name for a in read_axes(image)] == ["z", "y", "x"]


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_a_repaired_image_reads_again(tmp_path: Path, version: str) -> None:
    """Validation results are cached by the attributes' content, never by the path."""
    image = _save(tmp_path / "a.ome.zarr", version)
    file = _attrs_file(image, version)
    good = file.read_text()
    _edit_attrs(image, version, _no_transformations)
    with pytest.raises(LinumpyError, match="Field required"):
        read_omezarr(image)
    file.write_text(good)
    assert read_omezarr(image, level=1)[1] == (2.0, 1.0, 1.0)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_images_that_differ_only_in_name_are_validated_once(tmp_path: Path, version: str) -> None:
    """Every output a pipeline writes has its own name: the verdict on one image's attributes
    covers another's that differ only there, but not one that differs elsewhere."""
    from linumpy.io import ngff_validation as metadata

    validated = metadata._model_error.cache_info
    metadata._model_error.cache_clear()
    read_omezarr(_save(tmp_path / "first.ome.zarr", version))
    assert validated().misses == 1
    read_omezarr(_save(tmp_path / "second-name.ome.zarr", version))
    assert validated().misses == 1, "the second image's attributes were validated again"
    third = _save(tmp_path / "third-name.ome.zarr", version)
    _edit_attrs(third, version, _wrong_axis_type)
    metadata._model_error.cache_clear()
    with pytest.raises(LinumpyError, match="invalid OME-NGFF"):
        read_omezarr(third)
    assert validated().misses == 1
    metadata._model_error.cache_clear()
