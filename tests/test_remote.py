"""Remote reads over HTTP and S3, on servers this test starts on 127.0.0.1 (nothing else).

Every layout read remotely equals the local read, through the engine; failures (unreachable,
403, 404, truncated, short, stalled, 5xx) each raise a LinumpyError naming the URL, in bounded
time.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr

from linumpy import settings
from linumpy.errors import (
    ChunkDecodeError,
    LinumpyError,
    RemoteConnectionError,
    RemoteNotFoundError,
    RemotePermissionError,
    RemoteTimeoutError,
    SettingsError,
)
from linumpy.io import open_array, open_volume, read_axes, read_omezarr, read_volume, save_omezarr
from linumpy.io.engine.plan import plan_read
from linumpy.io.stores import open_store, parse_source
from tests.remote_server import RangeRequestHandler, s3_fixture, serve_directory
from tests.zarr_layouts import CHUNKS, LAYOUTS, REGIONS, SHAPE, make_array, sample_data

pytest.importorskip("obstore")

BUCKET = "linumpy-test"


class FaultyHandler(RangeRequestHandler):
    """Serves files, except for names (last path part) listed in ``faults``."""

    faults: dict[str, str] = {}
    counts: dict[str, int] = {}
    lock = threading.Lock()

    def respond(self, *, head: bool) -> None:
        name = self.path.rstrip("/").rsplit("/", 1)[-1]
        fault = self.faults.get(name) or self.faults.get(self.path.strip("/").split("/")[0])
        with self.lock:
            self.counts[name] = self.counts.get(name, 0) + 1
            seen = self.counts[name]
        if fault == "403":
            self.send_error(403)
        elif fault == "auth" and self.headers.get("Authorization") != "Bearer sesame":
            self.send_error(401)
        elif fault == "stall":
            time.sleep(3)
            self.close_connection = True
        elif fault == "500-once" and seen == 1:
            self.send_error(500)
        elif fault == "truncate":
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b"\x28\xb5\x2f\xfd" * 4)
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        else:
            super().respond(head=head)


@pytest.fixture
def http(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    FaultyHandler.faults, FaultyHandler.counts = {}, {}
    with serve_directory(tmp_path, FaultyHandler) as url:
        yield tmp_path, url


s3 = s3_fixture(BUCKET)


def _s3_store(url: str, options: dict[str, str]) -> zarr.storage.ObjectStore:
    from linumpy.io.remote import object_store

    return zarr.storage.ObjectStore(object_store(url, options), read_only=False)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts_over_http_equal_local_reads(http: tuple[Path, str], layout: str) -> None:
    root, url = http
    data = sample_data(SHAPE, "uint16")
    make_array(root / f"{layout}.zarr", layout, data, chunks=CHUNKS, crc32c=layout != "v2")
    local = root / f"{layout}.zarr"
    remote = f"{url}/{layout}.zarr"
    assert plan_read(open_array(remote)).remote is not None  # the engine reads it, not zarr
    for region in REGIONS:
        expected = read_volume(local, region=region)
        np.testing.assert_array_equal(read_volume(remote, region=region), expected)
    lazy = open_volume(remote, chunks=16)
    np.testing.assert_array_equal(lazy.compute(), data)


def test_missing_chunks_read_as_fill_value(http: tuple[Path, str]) -> None:
    root, url = http
    data = sample_data(SHAPE, "float32")
    data[:8] = 5.0  # equal to the fill value: those chunks are not stored
    for layout in LAYOUTS:
        make_array(root / f"{layout}.zarr", layout, data, chunks=CHUNKS, fill_value=5.0)
        np.testing.assert_array_equal(read_volume(f"{url}/{layout}.zarr"), data)
    FaultyHandler.counts.clear()
    os.remove(root / "v3.zarr" / "c" / "1" / "0" / "0")  # deleted under the reader: fill value
    expected = data.copy()
    expected[8:16, :16, :16] = 5.0
    np.testing.assert_array_equal(read_volume(f"{url}/v3.zarr"), expected)
    os.remove(root / "v3-sharded.zarr" / "c" / "1" / "0" / "0")  # a whole shard: fill value
    expected = data.copy()
    expected[16:, :32, :32] = 5.0
    np.testing.assert_array_equal(read_volume(f"{url}/v3-sharded.zarr"), expected)


@pytest.mark.parametrize("ngff_version", ["0.4", "0.5"])
def test_ome_zarr_image_over_http(http: tuple[Path, str], ngff_version: str) -> None:
    root, url = http
    data = sample_data((16, 40, 48), "uint16")
    save_omezarr(
        data, root / "image.ome.zarr", voxel_size=(4, 2, 2), n_levels=2, ngff_version=ngff_version
    )
    remote = f"{url}/image.ome.zarr"
    np.testing.assert_array_equal(read_volume(remote), data)
    np.testing.assert_array_equal(
        read_volume(remote, level=1), read_volume(root / "image.ome.zarr", level=1)
    )
    assert read_omezarr(remote, 1)[1] == (8.0, 4.0, 4.0)
    assert read_axes(remote) == read_axes(root / "image.ome.zarr")
    assert (
        read_volume(zarr.open_group(zarr.storage.ObjectStore(_http_store(remote)), mode="r")).shape
        == data.shape
    )


def _http_store(url: str):  # noqa: ANN202 - an obstore store
    from linumpy.io.remote import object_store

    return object_store(url)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts_over_s3_equal_local_reads(s3: dict[str, str], tmp_path: Path, layout: str) -> None:
    data = sample_data(SHAPE, "uint8")
    local = make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS)
    url = f"s3://{BUCKET}/{layout}.zarr"
    zarr_format = 2 if layout == "v2" else 3
    target = zarr.create_array(
        _s3_store(url, s3),
        shape=data.shape,
        dtype=data.dtype,
        chunks=CHUNKS,
        shards=local.shards,
        compressors=local.compressors,
        zarr_format=zarr_format,
        overwrite=True,
    )
    target[...] = data
    assert plan_read(open_array(url, storage_options=s3)).remote is not None
    for region in REGIONS:
        expected = read_volume(tmp_path / "a.zarr", region=region)
        np.testing.assert_array_equal(read_volume(url, region=region, storage_options=s3), expected)


def test_s3_image_written_and_read(s3: dict[str, str]) -> None:
    data = sample_data((16, 32, 32), "uint16")
    url = f"s3://{BUCKET}/written.ome.zarr"
    save_omezarr(data, url, voxel_size=(3, 1, 1), n_levels=2, storage_options=s3, overwrite=True)
    np.testing.assert_array_equal(read_volume(url, storage_options=s3), data)
    assert read_omezarr(url, 1, storage_options=s3)[1] == (6.0, 2.0, 2.0)
    with pytest.raises(LinumpyError, match="exists"):
        save_omezarr(data, url, voxel_size=(3, 1, 1), storage_options=s3)


def test_s3_without_credentials_is_refused_naming_the_url(s3: dict[str, str]) -> None:
    with pytest.raises(RemoteNotFoundError, match=f"s3://{BUCKET}/nothing.zarr"):
        read_volume(f"s3://{BUCKET}/nothing.zarr", storage_options=s3)
    with pytest.raises(LinumpyError, match="unknown storage option"):
        read_volume(f"s3://{BUCKET}/a.zarr", storage_options={**s3, "no_such_option": 1})


def test_unreachable_host_fails_fast_naming_the_url() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/image.ome.zarr"
    started = time.monotonic()
    with settings.set(remote_retries=1), pytest.raises(RemoteConnectionError, match=url):
        read_volume(url)
    assert time.monotonic() - started < 20


def test_forbidden_and_missing_images(http: tuple[Path, str]) -> None:
    root, url = http
    make_array(root / "a.zarr", "v3", sample_data(SHAPE, "uint8"), chunks=CHUNKS)
    FaultyHandler.faults["a.zarr"] = "403"
    with pytest.raises(RemotePermissionError, match=f"{url}/a.zarr.*403"):
        read_volume(f"{url}/a.zarr")
    with pytest.raises(RemoteNotFoundError, match=f"{url}/b.zarr: no zarr array"):
        read_volume(f"{url}/b.zarr")
    FaultyHandler.faults["0"] = "403"  # a chunk (c/0/0/0) refused: an error, not a fill value
    del FaultyHandler.faults["a.zarr"]
    with pytest.raises(RemotePermissionError, match=r"a.zarr/c/\d+/\d+/0: access denied"):
        read_volume(f"{url}/a.zarr")


def test_headers_authenticate_http(http: tuple[Path, str]) -> None:
    root, url = http
    data = sample_data(SHAPE, "uint8")
    make_array(root / "a.zarr", "v3", data, chunks=CHUNKS)
    FaultyHandler.faults["a.zarr"] = "auth"
    with pytest.raises(RemotePermissionError, match="401"):
        read_volume(f"{url}/a.zarr")
    options = {"headers": {"Authorization": "Bearer sesame"}}
    np.testing.assert_array_equal(read_volume(f"{url}/a.zarr", storage_options=options), data)
    with pytest.raises(LinumpyError, match="do not apply to HTTP"):
        read_volume(f"{url}/a.zarr", storage_options={"anonymous": False, "region": "x"})


def test_anonymous_skips_signing_on_object_stores_only() -> None:
    from linumpy.io.remote import _store_config

    assert _store_config("s3", "s3://b/x", {"anon": True}) == ({"skip_signature": True}, {})
    assert _store_config("https", "https://h/x", {"anonymous": True}) == ({}, {})


def test_truncated_response_is_retried_then_named(http: tuple[Path, str]) -> None:
    root, url = http
    make_array(root / "a.zarr", "v3", sample_data(SHAPE, "uint8"), chunks=CHUNKS)
    FaultyHandler.faults["1"] = "truncate"  # every chunk whose last key part is 1
    with settings.set(remote_retries=2), pytest.raises(RemoteConnectionError, match="ended before"):
        read_volume(f"{url}/a.zarr")
    assert FaultyHandler.counts["1"] >= 3  # tried, then retried twice (at least one chunk)


def test_transient_server_error_is_retried(http: tuple[Path, str]) -> None:
    root, url = http
    data = sample_data(SHAPE, "uint16")
    make_array(root / "a.zarr", "v3-sharded", data, chunks=CHUNKS)
    FaultyHandler.faults["0"] = "500-once"
    np.testing.assert_array_equal(read_volume(f"{url}/a.zarr"), data)
    assert FaultyHandler.counts["0"] >= 2


def test_short_shard_is_a_chunk_error_naming_the_url(http: tuple[Path, str]) -> None:
    root, url = http
    make_array(root / "a.zarr", "v3-sharded", sample_data(SHAPE, "uint16"), chunks=CHUNKS)
    shard = root / "a.zarr" / "c" / "0" / "0" / "0"
    raw = shard.read_bytes()
    index = raw[-(8 * 16 + 4) :]
    shard.write_bytes(raw[: len(raw) // 2] + index)  # the index points past the end
    with pytest.raises(ChunkDecodeError, match=f"{url}/a.zarr/c/0/0/0"):
        read_volume(f"{url}/a.zarr")


def test_stalled_server_times_out(http: tuple[Path, str]) -> None:
    root, url = http
    make_array(root / "a.zarr", "v3", sample_data(SHAPE, "uint8"), chunks=CHUNKS)
    FaultyHandler.faults["a.zarr"] = "stall"
    started = time.monotonic()
    with (
        settings.set(remote_timeout=0.3, remote_retries=1),
        pytest.raises(RemoteTimeoutError, match=f"{url}/a.zarr.*remote_timeout"),
    ):
        read_volume(f"{url}/a.zarr")
    assert time.monotonic() - started < 10


def test_http_is_read_only(http: tuple[Path, str]) -> None:
    _, url = http
    with pytest.raises(RemotePermissionError, match="HTTP servers are read-only"):
        open_store(parse_source(f"{url}/out.zarr"), writable=True)
    with pytest.raises(RemotePermissionError, match=f"{url}/out.ome.zarr"):
        save_omezarr(np.zeros((4, 4, 4), np.uint8), f"{url}/out.ome.zarr", voxel_size=(1, 1, 1))


@pytest.mark.parametrize("name", ["h#sh.ome.zarr", "q?m.ome.zarr", "p%41.ome.zarr", "s p.ome.zarr"])
def test_local_names_are_paths(tmp_path: Path, name: str) -> None:
    data = sample_data((8, 16, 16), "uint16")
    path = tmp_path / name
    save_omezarr(data, os.fspath(path), voxel_size=(1, 1, 1))
    for source in (os.fspath(path), path, path.as_uri()):
        np.testing.assert_array_equal(read_volume(source), data)
        np.testing.assert_array_equal(open_volume(source).compute(), data)
        assert read_omezarr(source)[1] == (1.0, 1.0, 1.0)


def test_zarr_objects_and_stores_are_sources(tmp_path: Path) -> None:
    data = sample_data(SHAPE, "uint16")
    array = make_array(tmp_path / "a.zarr", "v3", data, chunks=CHUNKS)
    memory = zarr.create_array({}, shape=data.shape, chunks=CHUNKS, dtype=data.dtype)
    memory[...] = data
    for source in (array, memory, zarr.storage.LocalStore(tmp_path / "a.zarr")):
        np.testing.assert_array_equal(read_volume(source), data)
        np.testing.assert_array_equal(open_volume(source, chunks=16).compute(), data)
    save_omezarr(data, tmp_path / "i.ome.zarr", voxel_size=(1, 1, 1))
    group = zarr.open_group(tmp_path / "i.ome.zarr", mode="r")
    np.testing.assert_array_equal(read_volume(group), data)
    with pytest.raises(LinumpyError, match="cannot read a list"):
        read_volume([1, 2])


def test_unknown_scheme_is_named() -> None:
    with pytest.raises(LinumpyError, match="ftp://host/a.zarr: no store for this scheme"):
        read_volume("ftp://host/a.zarr")


def test_remote_settings_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SettingsError, match="remote_timeout"):
        settings.Settings(remote_timeout=0)
    with pytest.raises(SettingsError, match="remote_retries"):
        settings.Settings(remote_retries=-1)
    monkeypatch.setenv("LINUMPY_REMOTE_TIMEOUT", "soon")
    with pytest.raises(SettingsError, match="LINUMPY_REMOTE_TIMEOUT"):
        settings.get()
    monkeypatch.setenv("LINUMPY_REMOTE_TIMEOUT", "2.5")
    monkeypatch.setenv("LINUMPY_REMOTE_RETRIES", "0")
    assert (settings.get().remote_timeout, settings.get().remote_retries) == (2.5, 0)


def test_script_reads_a_url(http: tuple[Path, str], tmp_path: Path) -> None:
    from linumpy.scripts.linum_aip import main

    root, url = http
    data = sample_data((8, 32, 32), "float32")
    save_omezarr(data, root / "in.ome.zarr", voxel_size=(1, 1, 1))
    main([f"{url}/in.ome.zarr", os.fspath(tmp_path / "remote.ome.zarr")])
    main([os.fspath(root / "in.ome.zarr"), os.fspath(tmp_path / "local.ome.zarr")])
    remote = read_volume(tmp_path / "remote.ome.zarr")
    np.testing.assert_array_equal(remote, read_volume(tmp_path / "local.ome.zarr"))
    assert remote.shape == (32, 32) and remote.any()


def test_remote_benchmark_runs_at_a_tiny_size() -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "remote_read.py"), "--mib", "2"]
        + ["--rounds", "1", "--skip", "tensorstore,fsspec", "--stages"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = [line.split(" | ") for line in done.stdout.splitlines() if line.startswith("| s")]
    readers = {row[1] for row in rows if len(row) == 4}
    assert readers == {"linumpy", "zarr ObjectStore", "local", "ceiling"}
    # --stages: the stages, then the read's parts outside them, which add up to its total
    parts = [row for row in rows if len(row) == 9 and row[1] == "linumpy"]
    assert len(parts) == 1, done.stdout
    seconds = [float(cell.strip(" |")) for cell in parts[0][2:]]
    assert all(s >= 0 for s in seconds[:-2]) and seconds[-1] > 0
    assert abs(sum(seconds[:-1]) - seconds[-1]) < 0.005  # each cell rounded to 1 ms


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_gpu_reads_over_http_equal_cpu_reads(http: tuple[Path, str], layout: str) -> None:
    root, url = http
    data = sample_data(SHAPE, "uint16")
    data[:8] = 0  # chunks equal to the fill value are not stored: filled on the device
    make_array(root / "a.zarr", layout, data, chunks=CHUNKS, crc32c=layout != "v2")
    remote = f"{url}/a.zarr"
    for region in REGIONS:
        expected = read_volume(root / "a.zarr", region=region)
        np.testing.assert_array_equal(read_volume(remote, region=region, gpu=True).get(), expected)
    from linumpy.gpu.zarr_io import last_read_report

    assert last_read_report().path != "zarr"  # the engine read it
    np.testing.assert_array_equal(open_volume(remote, gpu=True, chunks=16).compute().get(), data)


@pytest.mark.gpu
def test_gpu_reads_over_s3(s3: dict[str, str]) -> None:
    data = sample_data((32, 64, 64), "uint16")
    url = f"s3://{BUCKET}/gpu.ome.zarr"
    save_omezarr(data, url, voxel_size=(1, 1, 1), storage_options=s3, overwrite=True)
    np.testing.assert_array_equal(read_volume(url, gpu=True, storage_options=s3).get(), data)


@pytest.mark.gpu
def test_gpu_remote_errors_name_the_url(http: tuple[Path, str]) -> None:
    root, url = http
    make_array(root / "a.zarr", "v3", sample_data(SHAPE, "uint8"), chunks=CHUNKS)
    FaultyHandler.faults["1"] = "truncate"
    with settings.set(remote_retries=1), pytest.raises(RemoteConnectionError, match=url):
        read_volume(f"{url}/a.zarr", gpu=True)
    del FaultyHandler.faults["1"]
    np.testing.assert_array_equal(  # the next read on the device works
        read_volume(f"{url}/a.zarr", gpu=True).get(), read_volume(root / "a.zarr")
    )
