"""Connections to one HTTP server: at most ``remote_requests`` open at once, all reads together.

A server started here on 127.0.0.1 counts the connections open at once (a connection counts
from its accept to its close, idle or not). A small web server serves a few at a time; a client
opening more stalls for seconds on it (see ``benchmarks/remote_read.py --limits``).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from linumpy import settings
from linumpy.errors import SettingsError
from linumpy.io import open_volume, read_volume
from linumpy.io.remote_client import HTTP_REQUESTS, OBJECT_STORE_REQUESTS, host_requests
from tests.remote_server import RangeRequestHandler, serve_directory, serve_s3

pytest.importorskip("obstore")

SHAPE = (32, 64, 64)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """The same volume in 128 chunk files and in 8 shards of 16 chunks."""
    root = tmp_path_factory.mktemp("images")
    data = np.random.default_rng(0).integers(0, 2**16, SHAPE, dtype=np.uint16)
    for name, shards in (("chunks", None), ("sharded", (16, 32, 32))):
        array = zarr.create_array(
            root / f"{name}.zarr", shape=SHAPE, dtype=data.dtype, chunks=(8, 16, 16), shards=shards
        )
        array[...] = data
    return root, data


def _counting() -> type[RangeRequestHandler]:
    """A handler class counting its server's connections open at once (``most``)."""

    class Counting(RangeRequestHandler):
        lock = threading.Lock()
        open = most = 0

        def setup(self) -> None:
            super().setup()
            with Counting.lock:
                Counting.open += 1
                Counting.most = max(Counting.most, Counting.open)

        def finish(self) -> None:
            try:
                super().finish()
            finally:
                with Counting.lock:
                    Counting.open -= 1

    return Counting


@pytest.mark.parametrize("layout", ["chunks", "sharded"])
def test_default_opens_at_most_the_http_limit(
    images: tuple[Path, np.ndarray], layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole read, then a lazy read by dask's threads (several reads at once), open at most
    HTTP_REQUESTS connections to the server; the delay per answer keeps requests in flight
    long enough to overlap."""
    monkeypatch.delenv("LINUMPY_REMOTE_REQUESTS", raising=False)
    root, data = images
    handler = _counting()
    with serve_directory(root, handler, delay=0.01) as base:
        url = f"{base}/{layout}.zarr"
        np.testing.assert_array_equal(read_volume(url), data)
        lazy = open_volume(url, chunks=(8, 32, 32))
        assert lazy.npartitions >= 8
        np.testing.assert_array_equal(lazy.compute(scheduler="threads", num_workers=8), data)
    assert 1 <= handler.most <= HTTP_REQUESTS == 4


def test_the_setting_raises_the_limit(images: tuple[Path, np.ndarray]) -> None:
    """``remote_requests`` set higher lets a read of many chunk files open more connections
    (so the count above does see them), and no more than it allows."""
    root, data = images
    handler = _counting()
    with settings.set(remote_requests=12), serve_directory(root, handler, delay=0.02) as base:
        np.testing.assert_array_equal(read_volume(f"{base}/chunks.zarr"), data)
    assert HTTP_REQUESTS < handler.most <= 12


def test_a_reads_own_settings_set_the_limit(images: tuple[Path, np.ndarray]) -> None:
    """``read_volume(settings=...)`` holds for that read's chunk requests; opening the image
    (its metadata) follows the settings in force, whose connections may still be open."""
    root, data = images
    handler = _counting()
    with serve_directory(root, handler, delay=0.02) as base:
        url = f"{base}/chunks.zarr"
        np.testing.assert_array_equal(read_volume(url, settings={"remote_requests": 12}), data)
    assert HTTP_REQUESTS < handler.most <= 12 + HTTP_REQUESTS


def test_auto_by_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LINUMPY_REMOTE_REQUESTS", "auto")
    assert settings.get().remote_requests == "auto"
    assert host_requests("http://127.0.0.1:8000/a.zarr") == HTTP_REQUESTS
    assert host_requests("https://example.org/a.zarr") == HTTP_REQUESTS
    assert host_requests("s3://bucket/a.zarr") == host_requests("gs://b/a") == 64
    assert OBJECT_STORE_REQUESTS == 64
    monkeypatch.setenv("LINUMPY_REMOTE_REQUESTS", "24")
    assert host_requests("https://example.org/a.zarr") == host_requests("s3://b/a") == 24
    monkeypatch.setenv("LINUMPY_REMOTE_REQUESTS", "many")
    with pytest.raises(SettingsError, match="LINUMPY_REMOTE_REQUESTS"):
        settings.get()


def test_s3_reads_keep_many_requests_in_flight(images: tuple[Path, np.ndarray]) -> None:
    """An S3 read takes the object stores' limit and reads the same data."""
    pytest.importorskip("moto")
    root, data = images
    from linumpy.io.remote_client import range_client
    from linumpy.io.stores import open_store, parse_source

    with serve_s3("connections") as options:
        import boto3

        client = boto3.client("s3", endpoint_url=options["endpoint_url"])
        for path in (root / "chunks.zarr").rglob("*"):
            if path.is_file():
                key = "chunks.zarr/" + path.relative_to(root / "chunks.zarr").as_posix()
                client.upload_file(str(path), "connections", key)
        url = "s3://connections/chunks.zarr"
        store = open_store(parse_source(url, options))
        assert range_client(store).requests == OBJECT_STORE_REQUESTS
        np.testing.assert_array_equal(read_volume(url, storage_options=options), data)


def test_host_limit_across_loops_and_cancellations() -> None:
    """One HostLimit bounds holders from two event loops in two threads; a waiter cancelled
    before its turn, and one cancelled as its turn comes, leave every place free at the end."""
    import asyncio

    from linumpy.io.remote_client import HostLimit

    limit, lock = HostLimit(2), threading.Lock()
    now, most = [0], [0]

    async def hold(seconds: float) -> None:
        async with limit:
            with lock:
                now[0] += 1
                most[0] = max(most[0], now[0])
            await asyncio.sleep(seconds)
            with lock:
                now[0] -= 1

    async def many() -> None:
        await asyncio.gather(*(hold(0.005) for _ in range(20)))

    threads = [threading.Thread(target=asyncio.run, args=(many(),)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert most[0] == 2 and now[0] == 0

    async def cancelled() -> None:
        holders = [asyncio.ensure_future(hold(0.05)) for _ in range(2)]
        await asyncio.sleep(0.01)
        waiters = [asyncio.ensure_future(hold(0.0)) for _ in range(3)]
        await asyncio.sleep(0.01)
        waiters[0].cancel()  # before its turn
        await asyncio.gather(*holders)
        waiters[1].cancel()  # its turn may have come: the place goes on
        await asyncio.gather(*waiters, return_exceptions=True)
        await asyncio.sleep(0.05)  # the places freed after the grace
        await asyncio.wait_for(asyncio.gather(hold(0.0), hold(0.0)), 5)

    asyncio.run(cancelled())
    time.sleep(0.1)  # the last places are freed after the grace
    assert limit._free == 2 and not limit._waiting
