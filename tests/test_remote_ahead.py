"""The remote fetch stage's read-ahead and the loopback server's processes, on 127.0.0.1 only.

A read fetches ahead of its groups within its read-ahead budget and gives every request back
when it ends, whether it succeeds or fails; the server answers from processes of its own and
none outlives its block.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from linumpy import settings
from linumpy.errors import ChunkDecodeError, RemotePermissionError
from linumpy.io import open_array, read_volume, remote_client
from linumpy.io.engine import fetch_remote
from linumpy.io.engine.cpu_files import RemoteChunkReads
from linumpy.io.engine.fetch import chunk_sizes
from linumpy.io.engine.plan import plan_read
from tests.remote_server import serve_directory
from tests.test_remote import FaultyHandler
from tests.zarr_layouts import CHUNKS, LAYOUTS, REGIONS, SHAPE, make_array, sample_data

pytest.importorskip("obstore")


def _read_ahead(budget: int) -> mock._patch:
    """Within: remote reads opened hold at most ``budget`` bytes fetched ahead."""
    return mock.patch.object(remote_client, "_READ_AHEAD_BYTES", budget)


@pytest.mark.parametrize("budget", [1, 64 * 1024, 256 * 2**20])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_reads_ahead_within_any_budget_equal_local_reads(
    tmp_path: Path, layout: str, budget: int
) -> None:
    data = sample_data(SHAPE, "uint16")
    data[:8] = 0  # not stored: filled
    make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS, crc32c=layout != "v2")
    with serve_directory(tmp_path) as url, _read_ahead(budget):
        for region in REGIONS:
            expected = read_volume(tmp_path / "a.zarr", region=region)
            np.testing.assert_array_equal(read_volume(f"{url}/a.zarr", region=region), expected)
    assert not fetch_remote._reads  # every read gave its requests back


@pytest.mark.parametrize("layout", ["v3-sharded", "v3"])
def test_read_ahead_holds_at_most_its_budget_beyond_a_group(tmp_path: Path, layout: str) -> None:
    data = sample_data((64, 64, 64), "uint16")
    make_array(tmp_path / "a.zarr", layout, data, chunks=(16, 16, 16))
    budget = 40_000
    with serve_directory(tmp_path) as url, _read_ahead(budget):
        plan = plan_read(open_array(f"{url}/a.zarr"))
        order = fetch_remote.read_order(plan)
        ahead = fetch_remote.ReadAhead(plan, order)
        held, groups = [], np.array_split(order, 8)
        for group in groups:
            ahead.group(group, lambda n: np.empty(n, np.uint8))
            held.append(ahead.held)
    largest = max(int(ahead.cost[np.unique(ahead.requests.request[g])].sum()) for g in groups)
    assert max(held) <= budget + largest
    assert ahead.done and ahead.held == 0  # all handed on, nothing kept
    assert sum(held[:-1]) > 0  # it did fetch ahead of the groups


def test_read_ahead_follows_the_best_compressed_first_order(tmp_path: Path) -> None:
    data = sample_data((32, 64, 64), "uint16")
    make_array(tmp_path / "a.zarr", "v3-sharded", data, chunks=(16, 16, 16))
    with serve_directory(tmp_path) as url:
        plan = plan_read(open_array(f"{url}/a.zarr"))
        sizes = chunk_sizes(plan)
        order = fetch_remote.read_order(plan, sizes)
        by_size = order[np.argsort(sizes[order], kind="stable")]
        out = []
        for k, group in enumerate(np.array_split(by_size, 3)):
            present, layout, buffer, nbytes, _ = fetch_remote.fetch_remote_group(
                plan, group, lambda n: np.empty(n, np.uint8)
            )
            out += [bytes(buffer[o : o + n]) for o, n in zip(layout.offsets, nbytes)]
            if k == 0:  # the order was guessed from the first group
                np.testing.assert_array_equal(fetch_remote._reads[id(plan)].order, by_size)
    shard_bytes = {}
    for e in by_size.tolist():
        key = plan.files[plan.file_index[e]].rsplit("/a.zarr/", 1)[1]
        raw = shard_bytes.setdefault(key, (tmp_path / "a.zarr" / key).read_bytes())
        start = int(plan.offsets[e])
        assert out.pop(0) == raw[start : start + int(plan.nbytes[e])]
    assert not fetch_remote._reads


def test_failed_read_ahead_gives_its_requests_back(tmp_path: Path) -> None:
    FaultyHandler.faults, FaultyHandler.counts = {"2": "403"}, {}
    make_array(tmp_path / "a.zarr", "v3", sample_data(SHAPE, "uint8"), chunks=CHUNKS)
    with serve_directory(tmp_path, FaultyHandler) as url:
        with pytest.raises(RemotePermissionError, match=f"{url}/a.zarr/c/"):
            read_volume(f"{url}/a.zarr")
        assert not fetch_remote._reads
        del FaultyHandler.faults["2"]
        np.testing.assert_array_equal(
            read_volume(f"{url}/a.zarr"), read_volume(tmp_path / "a.zarr")
        )


def test_server_processes_serve_and_stop(tmp_path: Path) -> None:
    data = sample_data(SHAPE, "uint16")
    make_array(tmp_path / "a.zarr", "v3-sharded", data, chunks=CHUNKS)
    with serve_directory(tmp_path, processes=2, delay=0.05) as url:
        started = time.monotonic()
        with urllib.request.urlopen(f"{url}/a.zarr/zarr.json") as response:
            assert response.status == 200
        assert time.monotonic() - started >= 0.05  # each request waits its delay
        np.testing.assert_array_equal(read_volume(f"{url}/a.zarr"), data)
    with pytest.raises(urllib.error.URLError):  # no process is left accepting
        urllib.request.urlopen(f"{url}/a.zarr/zarr.json", timeout=2)
    with (
        pytest.raises(ValueError, match="default handler"),
        serve_directory(tmp_path, FaultyHandler, processes=1),
    ):
        pass


@pytest.mark.parametrize("layout", ["v3-sharded", "v3"])
def test_staging_copy_shared_between_threads(
    tmp_path: Path, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = sample_data(SHAPE, "uint16")
    make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS)
    monkeypatch.setattr(fetch_remote, "_copy_threads", lambda nbytes: 3)  # as on a large host
    with serve_directory(tmp_path) as url:
        np.testing.assert_array_equal(read_volume(f"{url}/a.zarr"), data)


def test_whole_objects_longer_than_expected_or_empty_arrive_whole(tmp_path: Path) -> None:

    from linumpy.io.remote import object_store
    from linumpy.io.remote_client import SMALLEST_GUESS, RangeClient

    body = bytes(range(256)) * 40
    (tmp_path / "long").write_bytes(body)
    (tmp_path / "empty").write_bytes(b"")
    with serve_directory(tmp_path) as url:
        client = RangeClient(url, object_store(url))
        asked = [
            ("long", 0, -SMALLEST_GUESS),
            ("long", 0, -len(body)),
            ("empty", 0, -SMALLEST_GUESS),
        ]
        asked.append(("missing", 0, -SMALLEST_GUESS))
        found = [f.result() for f in client.submit(asked)]
    assert [None if f is None else bytes(f) for f in found] == [body, body, b"", None]


def test_abandoned_read_ahead_gives_its_requests_back_when_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_array(tmp_path / "a.zarr", "v3-sharded", sample_data(SHAPE, "uint16"), chunks=CHUNKS)
    monkeypatch.setattr(fetch_remote, "IDLE_SECONDS", 0.3)
    with serve_directory(tmp_path) as url:
        plan = plan_read(open_array(f"{url}/a.zarr"))
        order = fetch_remote.read_order(plan)
        fetch_remote.fetch_remote_group(plan, order[:2], lambda n: np.empty(n, np.uint8))
        ahead = fetch_remote._reads[id(plan)]  # a read that never asks for the rest
        assert ahead.held > 0
        deadline = time.monotonic() + 10
        while fetch_remote._reads and time.monotonic() < deadline:
            time.sleep(0.05)
    assert not fetch_remote._reads
    assert ahead.held == 0 and all(f is None for f in ahead.futures)


@pytest.mark.parametrize("layout", ["v3-sharded", "v3"])
def test_threads_hold_at_most_the_budget_beyond_their_batches(tmp_path: Path, layout: str) -> None:
    data = sample_data((64, 64, 64), "uint16")
    make_array(tmp_path / "a.zarr", layout, data, chunks=(16, 16, 16), crc32c=True)
    budget = 40_000
    with serve_directory(tmp_path) as url, _read_ahead(budget):
        plan = plan_read(open_array(f"{url}/a.zarr"))
        order = fetch_remote.read_order(plan)
        reads = RemoteChunkReads(plan, order)
        held, batches, frames = [], np.array_split(order, 8), {}
        for batch in batches:
            reads.begin(batch.tolist())
            for e in batch.tolist():
                found = reads.read(e, None)
                if found is not None:  # None: a chunk object not stored (background)
                    frames[e] = bytes(found[2])
            held.append(reads.ahead.held)
            reads.end(batch.tolist())
        reads.close()
    largest = max(
        int(reads.ahead.cost[np.unique(reads.ahead.requests.request[b])].sum()) for b in batches
    )
    assert max(held) <= budget + largest
    assert reads.ahead.done and reads.ahead.held == 0
    local = plan_read(open_array(tmp_path / "a.zarr"))
    assert len(frames) >= len(order) // 2  # the background third is not stored
    for e, frame in frames.items():  # each frame as stored, less its crc32c
        raw = Path(local.files[local.file_index[e]]).read_bytes()
        start = int(local.offsets[e]) if layout == "v3-sharded" else 0
        size = int(local.nbytes[e]) if layout == "v3-sharded" else len(raw)
        assert frame == raw[start : start + size - 4]


@pytest.mark.parametrize("layout", ["v3-sharded", "v3"])
def test_corrupt_remote_chunk_is_named_and_the_next_read_is_right(
    tmp_path: Path, layout: str
) -> None:
    data = sample_data((64, 64, 64), "uint16")
    make_array(tmp_path / "a.zarr", layout, data, chunks=(16, 16, 16), crc32c=True)
    plan = plan_read(open_array(tmp_path / "a.zarr"))
    first_planes = plan.bounds()[0][:, 0] == 0
    entry = next(e for e in fetch_remote.read_order(plan).tolist() if first_planes[e])
    path = Path(plan.files[plan.file_index[entry]])
    raw = bytearray(path.read_bytes())
    raw[int(plan.offsets[entry]) + int(chunk_sizes(plan)[entry]) // 2] ^= 0x10
    path.write_bytes(bytes(raw))
    with serve_directory(tmp_path) as url, settings.set(io_threads=4):
        remote = plan_read(open_array(f"{url}/a.zarr"))
        with pytest.raises(ChunkDecodeError, match=re.escape(remote.key(entry))):
            read_volume(f"{url}/a.zarr")
        region = (slice(32, 64),)  # chunks of the second half only
        np.testing.assert_array_equal(read_volume(f"{url}/a.zarr", region=region), data[region])
