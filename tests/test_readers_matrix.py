"""What linumpy writes, the common readers read: NGFF 0.4 and 0.5, sharded or not, checksums on and
off, uint8, uint16 and float32, each read by zarr-python, tensorstore, zarr-python with the zarrs
codec pipeline, ome-zarr-py and ngff-zarr (those installed), and compared with the data written.

A zarr v2 array's zstd frames carry their content checksum (flagged in each frame's header) while
its ``.zarray`` names only the codec's id and level: tensorstore, ngff-zarr and numcodecs 0.12
refuse a ``checksum`` member.
"""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr

from linumpy.io import save_omezarr

SHAPE = (20, 36, 44)  # edge chunks on every axis
LAYOUTS = {
    "0.4": dict(ngff_version="0.4", chunks=(8, 16, 16), shards=None),
    "0.5": dict(ngff_version="0.5", chunks=(8, 16, 16), shards=None),
    "0.5-sharded": dict(ngff_version="0.5", chunks=(4, 8, 8), shards=(8, 16, 16)),
}
DTYPES = ("uint8", "uint16", "float32")
CASES = [
    pytest.param(
        layout, checksum, dtype, id=f"{layout}-{'checksum' if checksum else 'plain'}-{dtype}"
    )
    for layout, checksum, dtype in itertools.product(LAYOUTS, (True, False), DTYPES)
]


def _data(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(sum(map(ord, dtype)))
    values = rng.normal(100, 30, SHAPE).clip(0, 255)
    values[:, :8, :8] = 0  # a corner of fill value: chunks left out must read as zeros
    return values.astype(dtype)


def _written(tmp_path: Path, layout: str, checksum: bool, dtype: str) -> tuple[Path, np.ndarray]:
    data = _data(dtype)
    path = tmp_path / "image.ome.zarr"
    save_omezarr(data, path, voxel_size=(2, 1, 1), n_levels=2, checksum=checksum, **LAYOUTS[layout])
    return path, data


@pytest.mark.parametrize(("layout", "checksum", "dtype"), CASES)
def test_zarr_python_reads_it(tmp_path: Path, layout: str, checksum: bool, dtype: str) -> None:
    path, data = _written(tmp_path, layout, checksum, dtype)
    np.testing.assert_array_equal(zarr.open_array(path / "0", mode="r")[:], data)
    assert zarr.open_array(path / "1", mode="r").shape == tuple(-(-n // 2) for n in SHAPE)


@pytest.mark.parametrize(("layout", "checksum", "dtype"), CASES)
def test_tensorstore_reads_it(tmp_path: Path, layout: str, checksum: bool, dtype: str) -> None:
    ts = pytest.importorskip("tensorstore")
    path, data = _written(tmp_path, layout, checksum, dtype)
    spec = {
        "driver": "zarr" if layout == "0.4" else "zarr3",
        "kvstore": {"driver": "file", "path": str(path / "0")},
    }
    np.testing.assert_array_equal(ts.open(spec, open=True).result().read().result(), data)


@pytest.mark.parametrize("checksum", [True, False], ids=["checksum", "plain"])
def test_v2_frames_keep_their_checksum(tmp_path: Path, checksum: bool) -> None:
    import json

    path, _ = _written(tmp_path, "0.4", checksum, "uint16")
    for level in ("0", "1"):
        compressor = json.loads((path / level / ".zarray").read_text())["compressor"]
        assert compressor == {"id": "zstd", "level": compressor["level"]}
        frames = [f for f in (path / level).rglob("*") if f.is_file() and f.name[0] != "."]
        assert frames
        for frame in frames:
            header = frame.read_bytes()[:5]
            assert header[:4] == bytes.fromhex("28b52ffd")  # a zstd frame
            assert bool(header[4] & 4) is checksum  # its content checksum flag


@pytest.mark.parametrize(("layout", "checksum", "dtype"), CASES)
def test_ngff_zarr_reads_it(tmp_path: Path, layout: str, checksum: bool, dtype: str) -> None:
    nz = pytest.importorskip("ngff_zarr")
    path, data = _written(tmp_path, layout, checksum, dtype)
    multiscales = nz.from_ngff_zarr(str(path))
    assert len(multiscales.images) == 2
    np.testing.assert_array_equal(np.asarray(multiscales.images[0].data), data)
    assert multiscales.images[0].scale == {"z": 2.0, "y": 1.0, "x": 1.0}


@pytest.mark.parametrize(("layout", "checksum", "dtype"), CASES)
def test_zarrs_pipeline_reads_it(tmp_path: Path, layout: str, checksum: bool, dtype: str) -> None:
    pytest.importorskip("zarrs")
    path, data = _written(tmp_path, layout, checksum, dtype)
    with (
        zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        read = zarr.open_array(path / "0", mode="r")[:]
    np.testing.assert_array_equal(read, data)
    handed_back = [w for w in caught if "unsupported by ZarrsCodecPipeline" in str(w.message)]
    if layout != "0.4":  # zarr v3: zarrs decodes every layout itself
        assert handed_back == [], [str(w.message) for w in handed_back]


@pytest.mark.parametrize(("layout", "checksum", "dtype"), CASES)
def test_ome_zarr_py_reads_it(tmp_path: Path, layout: str, checksum: bool, dtype: str) -> None:
    pytest.importorskip("ome_zarr")
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Multiscales, Reader

    path, data = _written(tmp_path, layout, checksum, dtype)
    nodes = list(Reader(parse_url(str(path)))())
    image = next(node for node in nodes if node.load(Multiscales) is not None)
    assert len(image.data) == 2
    np.testing.assert_array_equal(np.asarray(image.data[0]), data)
    assert image.metadata["axes"][0]["name"] == "z"
