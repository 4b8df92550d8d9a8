"""Opening remote images and arrays: what a read asks of the server before its chunks, on
127.0.0.1 only.

Opening a node fetches each metadata object once, its folder's names together in one round trip;
an OME-Zarr image (a group, then its level) takes two round trips, a plain array one.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import zarr

from linumpy.io import open_array, read_omezarr, read_volume, save_omezarr
from linumpy.io.stores import METADATA_NAMES, MetadataOnceStore, open_store, parse_source
from tests.remote_server import RangeRequestHandler, serve_directory
from tests.zarr_layouts import CHUNKS, LAYOUTS, SHAPE, make_array, sample_data

pytest.importorskip("obstore")


class CountingHandler(RangeRequestHandler):
    """Records the path of every request, in the order they arrive."""

    paths: list[str] = []
    lock = threading.Lock()

    def respond(self, *, head: bool) -> None:
        with self.lock:
            self.paths.append(self.path)
        super().respond(head=head)


def _metadata_requests(paths: list[str]) -> Counter:
    return Counter(p for p in paths if p.rsplit("/", 1)[-1] in METADATA_NAMES)


@pytest.mark.parametrize("ngff_version", ["0.4", "0.5"])
def test_image_metadata_is_fetched_once(tmp_path: Path, ngff_version: str) -> None:
    data = sample_data((16, 40, 48), "uint16")
    save_omezarr(
        data,
        tmp_path / "image.ome.zarr",
        voxel_size=(4, 2, 2),
        n_levels=2,
        ngff_version=ngff_version,
    )
    CountingHandler.paths = []
    with serve_directory(tmp_path, CountingHandler) as url:
        array, voxel_size = read_omezarr(f"{url}/image.ome.zarr", 1)
        opened = list(CountingHandler.paths)
        np.testing.assert_array_equal(array[...], read_volume(tmp_path / "image.ome.zarr", level=1))
    assert voxel_size == (8.0, 4.0, 4.0)
    counts = _metadata_requests(opened)
    assert counts and max(counts.values()) == 1, counts  # zarr alone asks zarr.json twice
    root = {p for p in counts if p.count("/") == 2}  # /image.ome.zarr/<name>
    assert len(root) == len(METADATA_NAMES)
    assert all(p.startswith("/image.ome.zarr/1/") for p in set(counts) - root)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_arrays_open_and_read_as_before(tmp_path: Path, layout: str) -> None:
    data = sample_data(SHAPE, "uint16")
    make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS)
    CountingHandler.paths = []
    with serve_directory(tmp_path, CountingHandler) as url:
        np.testing.assert_array_equal(read_volume(f"{url}/a.zarr"), data)
        counts = _metadata_requests(CountingHandler.paths)
        # the metadata asked for outside an opening (zarr's own reads) go to the server each time
        store = open_store(parse_source(f"{url}/a.zarr"))
        assert isinstance(store, MetadataOnceStore)
        node = zarr.open(store=store, mode="r")
        CountingHandler.paths = []
        zarr.open(store=store, mode="r")
        again = _metadata_requests(CountingHandler.paths)
    assert max(counts.values()) == 1, counts
    assert isinstance(node, zarr.Array) and node.shape == data.shape
    assert again and store.fetched == []  # not inside metadata_once: nothing held


def test_missing_image_is_still_named(tmp_path: Path) -> None:
    from linumpy.errors import RemoteNotFoundError

    with serve_directory(tmp_path) as url, pytest.raises(RemoteNotFoundError, match="nothing"):
        open_array(f"{url}/nothing.zarr")
