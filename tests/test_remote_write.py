"""Object-store writes never read as a valid image before they are whole: on a moto S3 server this
test starts on 127.0.0.1, a writer in a separate process replacing an image is killed with
SIGKILL mid-write, several times; each time the path reads back as the old image whole, the new
image whole, or no image (an error naming the URL), never as other values.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import zarr

from linumpy.errors import LinumpyError
from linumpy.io import read_omezarr, read_volume, save_omezarr
from linumpy.io.remote_write import MetadataLastStore
from tests.remote_server import S3_CREDENTIALS, s3_fixture

pytest.importorskip("obstore")

BUCKET = "linumpy-kill"
SHAPE = (32, 128, 128)
CHUNKS = (4, 32, 32)  # 128 chunks, each a request to moto


WRITER = """
import sys, numpy as np
from linumpy.io import save_omezarr
url, endpoint, value, version = sys.argv[1:5]
data = np.full({shape}, int(value), np.uint16)
print("start", flush=True)
save_omezarr(data, url, voxel_size=(1, 1, 1), chunks={chunks}, shards=None, overwrite=True,
             ngff_version=version, storage_options={{"endpoint_url": endpoint,
             "region": "us-east-1"}})
print("done", flush=True)
"""


s3 = s3_fixture(BUCKET)


def _objects(s3: dict[str, str], prefix: str) -> list[str]:
    import boto3

    client = boto3.client("s3", endpoint_url=s3["endpoint_url"])
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def _state(url: str, s3: dict[str, str]) -> str:
    """ "old", "new" or "none" (an error naming the URL); anything else fails the test."""
    try:
        values = read_volume(url, storage_options=s3)
    except LinumpyError as exc:
        assert url in str(exc)
        return "none"
    assert values.shape == SHAPE
    for name, value in (("old", 3), ("new", 7)):
        if (values == value).all():
            return name
    raise AssertionError(f"{url} read back as values {np.unique(values)}: neither image")


@pytest.mark.parametrize("version", ["0.5", "0.4"])
def test_killed_overwrite_never_reads_as_wrong_values(s3: dict[str, str], version: str) -> None:
    url = f"s3://{BUCKET}/kill-{version}.ome.zarr"
    prefix = f"kill-{version}.ome.zarr/"
    writer = WRITER.format(shape=SHAPE, chunks=CHUNKS)
    env = {**os.environ, **S3_CREDENTIALS}
    states = []
    # killed once the old image is deleted, once a quarter of the new chunks are stored, and
    # once nearly all are
    for kill_at in (0, 32, 100):
        save_omezarr(
            np.full(SHAPE, 3, np.uint16),
            url,
            voxel_size=(1, 1, 1),
            chunks=CHUNKS,
            shards=None,
            ngff_version=version,
            overwrite=True,
            storage_options=s3,
        )
        assert _state(url, s3) == "old"
        old = len(_objects(s3, prefix))
        process = subprocess.Popen(
            [sys.executable, "-c", writer, url, s3["endpoint_url"], "7", version],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert process.stdout.readline().strip() == "start"
            deleted = False
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and process.poll() is None:
                count = len(_objects(s3, prefix))
                deleted = deleted or count < old
                if deleted and count >= kill_at:
                    break
                time.sleep(0.01)
            finished = process.poll() is not None
            process.send_signal(signal.SIGKILL)
            process.wait(30)
        finally:
            if process.poll() is None:
                process.kill()
        state = _state(url, s3)
        assert state == "new" if finished else state in ("none", "new")
        states.append(state)
    assert "none" in states  # at least one kill landed mid-write


def test_interrupted_overwrite_is_named_then_replaced(s3: dict[str, str]) -> None:
    url = f"s3://{BUCKET}/named.ome.zarr"
    data = np.arange(16 * 32 * 32, dtype=np.uint16).reshape(16, 32, 32)
    save_omezarr(data, url, voxel_size=(2, 1, 1), chunks=(8, 16, 16), storage_options=s3)

    class Interrupted(Exception):
        pass

    from linumpy.io import OmeZarrWriter

    writer = OmeZarrWriter(
        url, data.shape, data.dtype, voxel_size=(2, 1, 1), chunks=(8, 16, 16),
        overwrite=True, storage_options=s3,
    )  # fmt: skip
    writer[:8] = data[:8]  # chunks stored, metadata held back: no image yet
    with pytest.raises(LinumpyError, match=url):
        read_omezarr(url, storage_options=s3)
    writer.commit()
    np.testing.assert_array_equal(read_volume(url, storage_options=s3)[:8], data[:8])
    np.testing.assert_array_equal(read_volume(url, storage_options=s3)[8:], 0)


def test_metadata_is_written_last_deepest_first(tmp_path) -> None:
    from zarr.storage import LocalStore

    store = MetadataLastStore(LocalStore(tmp_path))
    group = zarr.open_group(store=store, mode="w")
    array = group.create_array("0", shape=(4, 4), chunks=(2, 2), dtype="uint8")
    array[:] = 1
    group.attrs["name"] = "x"
    assert not (tmp_path / "zarr.json").exists() and (tmp_path / "0" / "c").is_dir()
    assert zarr.open_group(store=store, mode="r").attrs["name"] == "x"  # read from memory
    assert store.pending == ["0/zarr.json", "zarr.json"]
    store.flush()
    assert store.pending == []
    assert zarr.open_group(tmp_path, mode="r")["0"][:].sum() == 16


def test_a_pyramid_written_to_an_object_store(s3: dict[str, str]) -> None:
    from linumpy.io import downsample_mean

    url = f"s3://{BUCKET}/pyramid.ome.zarr"
    data = np.arange(8 * 32 * 32, dtype=np.uint16).reshape(8, 32, 32)
    save_omezarr(
        data, url, voxel_size=(1, 1, 1), chunks=(4, 16, 16), n_levels=3, storage_options=s3
    )
    for level, expected in enumerate([data, downsample_mean(data)]):
        np.testing.assert_array_equal(read_volume(url, level=level, storage_options=s3), expected)
    assert read_omezarr(url, level=2, storage_options=s3)[0].shape == (2, 8, 8)
