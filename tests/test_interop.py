"""Other people's images through every script, and the outputs read back by other tools.

Inputs written by ome-zarr-py, ngff-zarr and tensorstore (NGFF 0.4 and 0.5; nanometer and
unitless axes; translated) go through ``linum-convert-to-omezarr``, ``linum-rechunk``,
``linum-aip`` and ``linum-stitch-3d``, and a plane of them (a 2D image written by the same tool)
through ``linum-stitch-2d``. Each output is checked:

- its axes, units, scale and translation against what the step implies (unchanged for a copy;
  the plane's for a projection; moved to the output's origin for a stitch), with no unit added;
- its metadata by ome-zarr-models;
- its level 0 read by zarr-python, tensorstore, ngff-zarr and ome-zarr-py, the same values,
  and those values against the input (a copy: equal; a projection: the mean along z).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr

from linumpy.io.omezarr import read_coordinates
from linumpy.mosaic.transform import TileTransform

SHAPE = (4, 32, 32)
SCALE = (4.0, 2.0, 2.0)
TRANSLATION = (10.0, -20.0, 30.0)
WRITERS = ("ome-zarr-py", "ngff-zarr", "tensorstore")
SCRIPTS = ("convert", "rechunk", "aip", "stitch-3d", "stitch-2d")
#: 2x2 tiles of 16x16 overlapping by 2, the lower row shifted left by 1: the stitched image
#: starts 1 voxel left of the first tile (the tiles of a 3D grid's planes, or of a 2D grid)
TRANSFORM = TileTransform([[14, 0], [-1, 14]], (0, 0), (16, 16), (2, 2))


def _data(ndim: int = 3) -> np.ndarray:
    """The 3D input, or its plane 1 for a 2D one."""
    data = (np.arange(np.prod(SHAPE)) % 251).astype("uint16").reshape(SHAPE)
    return data if ndim == 3 else data[1]


def _ngff_axes(unit: str | None, names: str = "zyx") -> list[dict[str, str]]:
    return [{"name": n, "type": "space", **({"unit": unit} if unit else {})} for n in names]


def _write_ome_zarr_py(path: Path, version: str, unit: str | None, ndim: int = 3) -> None:
    pytest.importorskip("ome_zarr")
    from ome_zarr.format import FormatV04, FormatV05
    from ome_zarr.writer import write_image

    fmt = FormatV04() if version == "0.4" else FormatV05()
    group = zarr.open_group(path, mode="w", zarr_format=2 if version == "0.4" else 3)
    names = "zyx"[-ndim:]
    units = {n: unit for n in names} if unit else None
    scale = dict(zip(names, SCALE[-ndim:]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_image(_data(ndim), group, scale_factors=(2,), fmt=fmt, axes=names, scale=scale,
                    axes_units=units)  # fmt: skip
    # ome-zarr-py writes translations of 0 at level 0 (its levels' half-voxel shifts on top):
    # the image moved as a whole to TRANSLATION
    attrs = group.attrs.asdict()
    multiscale = attrs.get("ome", attrs)["multiscales"][0]
    for dataset in multiscale["datasets"]:
        for transform in dataset["coordinateTransformations"]:
            if transform["type"] == "translation":
                transform["translation"] = [
                    t + o for t, o in zip(transform["translation"], TRANSLATION[-ndim:])
                ]
    group.attrs.update(attrs)


def _write_ngff_zarr(path: Path, version: str, unit: str | None, ndim: int = 3) -> None:
    nz = pytest.importorskip("ngff_zarr")
    names = "zyx"[-ndim:]
    image = nz.to_ngff_image(
        _data(ndim),
        dims=list(names),
        scale=dict(zip(names, SCALE[-ndim:])),
        translation=dict(zip(names, TRANSLATION[-ndim:])),
        axes_units={n: unit for n in names} if unit else None,
    )
    nz.to_ngff_zarr(str(path), nz.to_multiscales(image, scale_factors=[]), version=version)


def _write_tensorstore(path: Path, version: str, unit: str | None, ndim: int = 3) -> None:
    """tensorstore writes the array; the group's OME metadata is written beside it by hand."""
    ts = pytest.importorskip("tensorstore")
    spec = {
        "driver": "zarr" if version == "0.4" else "zarr3",
        "kvstore": {"driver": "file", "path": str(path / "0")},
    }
    data = _data(ndim)
    array = ts.open(spec, create=True, dtype="uint16", shape=data.shape).result()
    array.write(data).result()
    multiscale = {
        "axes": _ngff_axes(unit, "zyx"[-ndim:]),
        "datasets": [
            {
                "path": "0",
                "coordinateTransformations": [
                    {"type": "scale", "scale": list(SCALE[-ndim:])},
                    {"type": "translation", "translation": list(TRANSLATION[-ndim:])},
                ],
            }
        ],
    }
    if version == "0.4":
        (path / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
        (path / ".zattrs").write_text(
            json.dumps({"multiscales": [{**multiscale, "version": "0.4"}]})
        )
    else:
        attrs = {"ome": {"version": "0.5", "multiscales": [multiscale]}}
        group = {"zarr_format": 3, "node_type": "group", "attributes": attrs}
        (path / "zarr.json").write_text(json.dumps(group))


WRITE = {
    "ome-zarr-py": _write_ome_zarr_py,
    "ngff-zarr": _write_ngff_zarr,
    "tensorstore": _write_tensorstore,
}
INPUTS = [
    pytest.param(writer, version, unit, id=f"{writer}-{version}-{unit or 'unitless'}")
    for writer in WRITERS
    for version in ("0.4", "0.5")
    for unit in ("nanometer", None)
]


def _run(script: str, source: Path, output: Path, version: str, tmp_path: Path) -> None:
    if script == "convert":
        from linumpy.scripts.linum_convert_to_omezarr import main

        main([str(source), str(output), "--ngff-version", version])
    elif script == "rechunk":
        from linumpy.scripts.linum_rechunk import main

        main([str(source), str(output), "--ngff-version", version])
    elif script == "aip":
        from linumpy.scripts.linum_aip import main

        main([str(source), str(output)])
    else:
        if script == "stitch-3d":
            from linumpy.scripts.linum_stitch_3d import main
        else:
            from linumpy.scripts.linum_stitch_2d import main

        TRANSFORM.save(tmp_path / "transform.json")
        main([str(source), str(tmp_path / "transform.json"), str(output)])


def _expected(script: str, unit: str | None) -> tuple[str, list, tuple, tuple]:
    """Axis names, units, scale and translation the step implies."""
    if script == "aip":
        return "yx", [unit] * 2, SCALE[1:], TRANSLATION[1:]
    if script == "stitch-3d":
        return "zyx", [unit] * 3, SCALE, (TRANSLATION[0], TRANSLATION[1], TRANSLATION[2] - SCALE[2])
    if script == "stitch-2d":
        return "yx", [unit] * 2, SCALE[1:], (TRANSLATION[1], TRANSLATION[2] - SCALE[2])
    return "zyx", [unit] * 3, SCALE, TRANSLATION


def _level0(path: Path) -> tuple[str, int]:
    """Path of the output's level 0, and its zarr format."""
    group = zarr.open_group(path, mode="r")
    attrs = group.attrs.asdict()
    return attrs.get("ome", attrs)["multiscales"][0]["datasets"][0][
        "path"
    ], group.metadata.zarr_format


def _validate(path: Path, zarr_format: int) -> None:
    if zarr_format == 3:
        from ome_zarr_models.v05.image import Image
    else:
        from ome_zarr_models.v04.image import Image
    Image.from_zarr(zarr.open_group(path, mode="r"))


def _read_all(path: Path, level0: str, zarr_format: int) -> dict[str, np.ndarray]:
    """Level 0 as each reader installed reads it."""
    reads = {"zarr": zarr.open_array(path / level0, mode="r")[...]}
    try:
        import tensorstore as ts
    except ImportError:
        pass
    else:
        spec = {
            "driver": "zarr3" if zarr_format == 3 else "zarr",
            "kvstore": {"driver": "file", "path": str(path / level0)},
        }
        reads["tensorstore"] = ts.open(spec, open=True).result().read().result()
    try:
        import ngff_zarr as nz
    except ImportError:
        pass
    else:
        reads["ngff-zarr"] = np.asarray(nz.from_ngff_zarr(str(path)).images[0].data)
    try:
        from ome_zarr.io import parse_url
        from ome_zarr.reader import Multiscales, Reader
    except ImportError:
        pass
    else:
        nodes = list(Reader(parse_url(str(path)))())
        image = next(node for node in nodes if node.load(Multiscales) is not None)
        reads["ome-zarr-py"] = np.asarray(image.data[0])
    return reads


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize(("writer", "version", "unit"), INPUTS)
def test_foreign_image_through_script(
    tmp_path: Path, writer: str, version: str, unit: str | None, script: str
) -> None:
    source = tmp_path / "input.ome.zarr"
    ndim = 2 if script == "stitch-2d" else 3
    WRITE[writer](source, version, unit, ndim)
    assert read_coordinates(source).translation == pytest.approx(TRANSLATION[-ndim:])
    output = tmp_path / "output.ome.zarr"
    _run(script, source, output, version, tmp_path)

    names, units, scale, translation = _expected(script, unit)
    coordinates = read_coordinates(output)
    assert "".join(a.name for a in coordinates.axes) == names
    assert [a.unit for a in coordinates.axes] == units  # none invented for a unitless input
    assert coordinates.scale == pytest.approx(scale)
    assert coordinates.translation == pytest.approx(translation)

    level0, zarr_format = _level0(output)
    _validate(output, zarr_format)
    reads = _read_all(output, level0, zarr_format)
    for reader, values in reads.items():
        np.testing.assert_array_equal(values, reads["zarr"], err_msg=reader)
    data = _data(ndim)
    if script in ("convert", "rechunk"):
        np.testing.assert_array_equal(reads["zarr"], data)
    elif script == "aip":
        np.testing.assert_allclose(reads["zarr"], data.mean(axis=0), rtol=1e-6)
    elif script == "stitch-3d":
        assert reads["zarr"].shape == (SHAPE[0], *TRANSFORM.normalized().output_shape())
    else:
        _check_stitched_plane(reads["zarr"], data)


def _check_stitched_plane(stitched: np.ndarray, data: np.ndarray) -> None:
    """The 2D stitch: the output's shape, and each tile's part that no other tile overlaps
    (its values kept as they were) at the place the transform gives it."""
    layout = TRANSFORM.normalized()
    assert stitched.shape == layout.output_shape()
    assert stitched.dtype == data.dtype
    # the upper-left tile at (0, 1): its first 14 rows and 13 columns overlap no other
    np.testing.assert_array_equal(stitched[:14, 1:14], data[:14, :13])
