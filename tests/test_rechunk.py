"""linum-rechunk and linumpy.io.rechunk: every array copied bit for bit into the default layout,
attributes kept (moved between NGFF 0.4 and 0.5), out of core, each stored chunk read once."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import zarr

import linumpy.io.engine.read as read_engine
from linumpy.errors import LinumpyError
from linumpy.io import open_array, read_axes, read_omezarr, read_volume, save_omezarr
from linumpy.io.formats import NGFF_04
from linumpy.io.layout import inner_chunks, slab_shards, tile_layout
from linumpy.io.rechunk import rechunk
from linumpy.mosaic.attrs import read_linumpy_attrs, write_linumpy_attrs
from linumpy.mosaic.demo import make_demo_data
from linumpy.parallel import Cluster
from linumpy.scripts import linum_rechunk

OMERO = {
    "channels": [
        {
            "label": "OCT",
            "color": "FFFFFF",
            "window": {"min": 0, "max": 65535, "start": 0, "end": 4000},
        }
    ]
}


def _image(path: Path, version: str, n_levels: int = 3) -> np.ndarray:
    """An image with a pyramid, units, a translation, omero and linumpy attributes, and array
    attributes, in one chunk per 64^3 file."""
    rng = np.random.default_rng(1)
    volume = rng.integers(0, 4000, (48, 160, 200)).astype(np.uint16)
    save_omezarr(
        volume,
        path,
        voxel_size=(3.5, 1.25, 1.25),
        chunks=(64, 64, 64),
        shards=None,
        n_levels=n_levels,
        ngff_version=version,
        unit="millimeter",
    )
    group = zarr.open_group(path, mode="r+")
    attrs = group.attrs.asdict()
    ome = attrs["ome"] if version == "0.5" else attrs
    for dataset in ome["multiscales"][0]["datasets"]:
        dataset["coordinateTransformations"].append(
            {"type": "translation", "translation": [0, 5, 7]}
        )
    ome["omero"] = OMERO
    group.attrs.update(attrs)
    group["1"].attrs["note"] = "kept"
    write_linumpy_attrs(path, {"mosaic": {"tile_shape": [40, 50], "grid_shape": [4, 4]}})
    return volume


def _attrs(path: Path) -> dict:
    return zarr.open_group(path, mode="r").attrs.asdict()


def _levels(path: Path) -> list[np.ndarray]:
    group = zarr.open_group(path, mode="r")
    return [group[str(i)][...] for i in range(len(list(group.array_keys())))]


def _same_data(a: Path, b: Path) -> None:
    for x, y in zip(_levels(a), _levels(b), strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


def test_rechunk_keeps_every_level_bit_for_bit_and_the_attributes(tmp_path: Path) -> None:
    source, target = tmp_path / "in.ome.zarr", tmp_path / "out.ome.zarr"
    _image(source, "0.5")
    done = rechunk(source, target)
    _same_data(source, target)
    assert _attrs(target) == _attrs(source)  # same version: the attributes as they were
    assert read_axes(target) == read_axes(source)
    for level in range(3):
        assert read_omezarr(target, level)[1] == read_omezarr(source, level)[1]
    assert zarr.open_group(target)["1"].attrs["note"] == "kept"
    # a mosaic grid (linumpy.mosaic.tile_shape): one tile per shard at level 0
    level0 = open_array(target)
    assert (level0.chunks, level0.shards) == tile_layout(level0.shape, "uint16", (40, 50))
    assert done.arrays["0"] == (level0.shape, level0.chunks, level0.shards)
    assert done.nbytes == sum(x.nbytes for x in _levels(source))
    assert open_array(target).fill_value == open_array(source).fill_value
    assert zarr.open_array(target / "0").metadata.dimension_names == ("z", "y", "x")


def test_rechunk_04_to_05_and_back(tmp_path: Path) -> None:
    source = tmp_path / "v04.ome.zarr"
    _image(source, "0.4")
    rechunk(source, tmp_path / "v05.ome.zarr")
    _same_data(source, tmp_path / "v05.ome.zarr")
    attrs = _attrs(tmp_path / "v05.ome.zarr")
    assert attrs["ome"]["version"] == "0.5" and attrs["ome"]["omero"] == OMERO
    assert "version" not in attrs["ome"]["multiscales"][0]
    assert attrs["linumpy"] == _attrs(source)["linumpy"]
    assert NGFF_04.convert_attrs(attrs) == _attrs(source)
    array = open_array(tmp_path / "v05.ome.zarr", level=2)
    assert array.metadata.zarr_format == 3
    assert array.metadata.dimension_names == ("z", "y", "x")  # from the axes
    for level in range(3):
        assert read_omezarr(tmp_path / "v05.ome.zarr", level)[1] == read_omezarr(source, level)[1]
    rechunk(tmp_path / "v05.ome.zarr", tmp_path / "back.ome.zarr", ngff_version="0.4")
    assert _attrs(tmp_path / "back.ome.zarr") == _attrs(source)
    _same_data(source, tmp_path / "back.ome.zarr")
    back = open_array(tmp_path / "back.ome.zarr")
    assert back.metadata.zarr_format == 2 and back.shards is None


def test_rechunk_plain_arrays_and_chosen_layouts(tmp_path: Path) -> None:
    data = np.arange(40 * 300 * 260, dtype=np.float32).reshape(40, 300, 260)
    zarr.create_array(tmp_path / "plain.zarr", data=data, chunks=(40, 100, 260), zarr_format=2)
    rechunk(tmp_path / "plain.zarr", tmp_path / "default.zarr")
    array = zarr.open_array(tmp_path / "default.zarr", mode="r")
    chunks = inner_chunks(data.shape, np.float32)
    assert array.chunks == chunks and array.shards == slab_shards(data.shape, chunks, "float32")
    np.testing.assert_array_equal(array[...], data)
    rechunk(tmp_path / "plain.zarr", tmp_path / "c.zarr", chunks=(8, 64, 64), shards=(40, 128, 128))
    array = zarr.open_array(tmp_path / "c.zarr", mode="r")
    assert array.chunks == (8, 64, 64) and array.shards == (40, 128, 128)
    np.testing.assert_array_equal(array[...], data)
    rechunk(tmp_path / "plain.zarr", tmp_path / "n.zarr", chunks=(8, 64, 64), shards=None)
    assert zarr.open_array(tmp_path / "n.zarr", mode="r").shards is None
    with pytest.raises(ValueError, match="3 values needed"):
        rechunk(tmp_path / "plain.zarr", tmp_path / "bad.zarr", chunks=(8, 64))
    assert not (tmp_path / "bad.zarr").exists()
    with pytest.raises(LinumpyError, match="exists"):
        rechunk(tmp_path / "plain.zarr", tmp_path / "c.zarr")
    with pytest.raises(LinumpyError, match="no such file"):
        rechunk(tmp_path / "missing.zarr", tmp_path / "m.zarr")


def test_rechunk_under_a_memory_limit_and_reads_each_chunk_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grid = tmp_path / "grid.ome.zarr"
    make_demo_data(grid, grid_shape=(3, 3), tile_shape=(24, 64, 64), shards=None)
    counts: Counter = Counter()
    plan_region = read_engine.plan_region

    def counting(array, region, settings=None):
        plan = plan_region(array, region, settings)
        for i in np.flatnonzero(plan.stored).tolist():
            counts[plan.files[int(plan.file_index[i])], tuple(plan.coords[i].tolist())] += 1
        return plan

    monkeypatch.setattr(read_engine, "plan_region", counting)
    for name, cluster in (("a", Cluster(threads=2)), ("b", Cluster(memory_limit=2**20, threads=2))):
        counts.clear()
        rechunk(grid, tmp_path / f"{name}.ome.zarr", chunks=(8, 32, 32), cluster=cluster)
        assert len(counts) == 9 and set(counts.values()) == {1}  # the 9 tiles, once each
        _same_data(grid, tmp_path / f"{name}.ome.zarr")
    assert open_array(tmp_path / "a.ome.zarr").shards == (24, 64, 64)
    assert read_linumpy_attrs(tmp_path / "a.ome.zarr") == read_linumpy_attrs(grid)


def test_rechunk_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in.ome.zarr"
    volume = _image(source, "0.4", n_levels=2)
    linum_rechunk.main([str(source), str(tmp_path / "out.ome.zarr")])
    out = capsys.readouterr()
    assert "out.ome.zarr: written" in out.out and "shards" in out.out
    assert "%" in out.err  # a progress bar
    np.testing.assert_array_equal(read_volume(tmp_path / "out.ome.zarr"), volume)
    with pytest.raises(SystemExit) as stop:
        linum_rechunk.main([str(source), str(tmp_path / "out.ome.zarr")])
    assert stop.value.code == 2
    linum_rechunk.main(
        [str(source), str(tmp_path / "out.ome.zarr"), "--no-shards", "--chunks", "16", "32", "32"]
        + ["--ngff-version", "0.5", "-f"]
    )
    array = open_array(tmp_path / "out.ome.zarr")
    assert array.shards is None and array.chunks == (16, 32, 32)
    with pytest.raises(SystemExit) as stop:
        linum_rechunk.main([str(source), str(tmp_path / "x.ome.zarr"), "--chunks", "16"])
    assert stop.value.code == 2
    assert "3 values needed" in capsys.readouterr().err
    meta = json.loads((tmp_path / "out.ome.zarr" / "zarr.json").read_text())
    assert meta["attributes"]["ome"]["omero"] == OMERO
    assert math.prod(array.chunks) * 2 < 2**20
