"""What linumpy writes, the common readers read: NGFF 0.4 and 0.5, sharded or not, checksums on and
off, uint8, uint16 and float32, each read by zarr-python, tensorstore, zarr-python with the zarrs
codec pipeline and ome-zarr-py (those installed), and compared with the data written.

One known exception, the documented trade of NGFF 0.4's default: a zarr v2 array with zstd's
content checksum stores ``"checksum": true`` in its compressor, which tensorstore refuses as an
unknown member; the test checks that it still does (so the documentation is revisited when it
changes) and that the same image without checksums reads.
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
    if layout == "0.4" and checksum:
        with pytest.raises(ValueError, match="checksum"):
            ts.open(spec, open=True).result()
        return
    np.testing.assert_array_equal(ts.open(spec, open=True).result().read().result(), data)


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
