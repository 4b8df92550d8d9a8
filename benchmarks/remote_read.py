"""Remote reads on a loopback HTTP server: linumpy against zarr-python, tensorstore and the wire.

Writes an OCT-like uint16 volume (zstd level 3, no empty chunk) in two layouts, zarr v3
chunks of 64^3 in shards, and plain 64^3 chunk files, serves the folder with
:func:`serve_directory` (``tests/remote_server.py``) on 127.0.0.1, and times reading the whole
array over HTTP with:

- ``linumpy``: ``read_volume(url)`` (the engine's remote fetch stage, then libzstd threads);
  ``linumpy gpu`` too with ``--gpu`` (nvCOMP decode);
- ``zarr ObjectStore``: zarr-python on :class:`zarr.storage.ObjectStore` (obstore's HTTPStore);
- ``zarr FsspecStore``: zarr-python on fsspec's HTTP file system (aiohttp);
- ``tensorstore http``: tensorstore's zarr3 driver on its ``http`` kvstore (when installed);
- ``ceiling``: the transport alone: every request of the whole-array read (those the engine's
  fetch stage makes), all started at once, into memory (the same client, no decode);
- ``local``: ``read_volume`` of the same files on disk, for reference.

The server answers from ``--server-processes`` processes of its own (a quarter of the CPUs by
default; 0: threads of this process, which share its GIL with the reader), so that it is not
what every reader waits for; ``--latency-ms`` makes it wait that long per request, as a link
with that round trip would. linumpy reads with the ``remote_requests`` setting in force: 4
requests in flight to an ``http://`` server by default, as many as an object store gets with
``LINUMPY_REMOTE_REQUESTS=64``. Rounds are interleaved (every reader once per round) on a
shared machine; the table gives the median and the best round in GB/s of decoded output (the
ceiling: output bytes over the time its fetches took). Every reader's result is checked against
the volume. ``--stages`` also prints, from an extra untimed ``read_volume`` per round (and one with
``gpu=True`` with ``--gpu``), the median seconds of the engine's stages (the fetch stage's own
time, the time the decode waited for it, the frame checks, the hand-over to the decoder, the
decode's tail after the last group) and of the read's parts outside them: opening the array
(its metadata requests), planning (the shard index requests), allocating the output, the run
loop's set-up (the fill of chunks not stored, grouping) and the rest. GPU reads are timed to
the end of their work on the device, without a copy back to the host.

``--transports`` times the ranged GETs alone instead: obstore (linumpy's client, and
``get_ranges_async``) against fsspec's ``cat_ranges``, which chose the transport.

``--limits auto,4,8,16,32,64`` times ``read_volume(url)`` with each ``remote_requests`` setting
instead (the requests in flight to the server at once), against three servers, a fresh one per
limit so that no connection outlives its limit: ``small``, 4 threads that accept a connection
only when one is free, with http.server's listen backlog of 5; ``http.server``, a thread per
connection with that backlog; and ``object store``, a server in processes of its own answering
each request after ``--latency-ms`` (30 ms by default here), as an object store across a link
does. The table gives each limit's median and slowest read: a client opening more connections
than a small server serves waits for them (seconds: until a request times out, or until the
server drops an idle connection) or loses their SYNs, tried again 1, 3, 7, 15 and 31 s later.

Usage::

    .venv/bin/python benchmarks/remote_read.py --mib 256 --rounds 5 --stages
    .venv/bin/python benchmarks/remote_read.py --mib 256 --rounds 3 --latency-ms 20
    .venv/bin/python benchmarks/remote_read.py --transports --rounds 5
    .venv/bin/python benchmarks/remote_read.py --limits auto,8,16,32,64 --mib 32 --chunk 32
    .venv/bin/python benchmarks/remote_read.py --mib 2048 --rounds 5 --gpu --json out.json
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from linumpy import settings
from linumpy.bench.report import machine_info
from linumpy.bench.volume import oct_volume
from linumpy.io import open_array, read_volume
from linumpy.io.engine.fetch_remote import read_order, remote_requests
from linumpy.io.engine.plan import plan_read
from linumpy.io.remote import object_store

# the tests' loopback server: tests/remote_server.py, from the repository's root
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.remote_server import serve_directory  # noqa: E402

CHUNK = 64
LAYOUTS = {"sharded": (CHUNK, 256, 256), "chunks": None}


def volume(mib: int, chunk: int = CHUNK) -> np.ndarray:
    """About ``mib`` MiB of uint16 OCT-like data (:func:`~linumpy.bench.volume.oct_volume`).

    Every chunk holds data, as in a real acquisition (a noise floor above the tissue): a volume
    with an empty part would be answered 404 for its chunks that zarr does not store.
    """
    side = max(chunk, int(round((mib * 2**20 / 2 / 4) ** (1 / 3) / chunk)) * chunk)
    return oct_volume((side, 2 * side, 2 * side))


def write(root: Path, data: np.ndarray, chunk: int = CHUNK) -> None:
    for name, shards in LAYOUTS.items():
        array = zarr.create_array(
            root / f"{name}.zarr",
            shape=data.shape,
            dtype=data.dtype,
            chunks=(chunk,) * 3,
            shards=shards if shards is None else (chunk, *shards[1:]),
            compressors=zarr.codecs.ZstdCodec(level=3),
            overwrite=True,
        )
        array[...] = data


def ceiling(url: str) -> Callable[[], Any]:
    """Fetch every request of the whole-array read at once, as the engine would, no decode."""

    array = open_array(url)
    plan = plan_read(array)
    client = plan.remote
    requests = remote_requests(plan, read_order(plan))
    batch = [
        (key, int(start), int(n))
        for key, start, n in zip(requests.keys, requests.starts, requests.nbytes)
    ]

    def fetch() -> None:
        for future in client.submit(batch):
            future.result()

    return fetch


def transports(rounds: int) -> list[dict[str, Any]]:
    """Ranged GETs alone, obstore against fsspec: 16 objects of 4 MiB, every range at once."""
    import asyncio

    import obstore

    from linumpy.io.remote_client import RangeClient

    objects, size = 16, 4 * 2**20
    rows = []
    with tempfile.TemporaryDirectory(prefix="linumpy-ranges-") as folder:
        rng = np.random.default_rng(0)
        for i in range(objects):
            Path(folder, f"f{i}").write_bytes(rng.integers(0, 255, size, dtype=np.uint8).tobytes())
        with serve_directory(folder) as base:
            store = object_store(base)
            client = RangeClient(base, store)
            for span in (64 * 1024, 2**20):
                starts = list(range(0, size, span))
                ends = [s + span for s in starts]

                async def gather(starts: list[int] = starts, ends: list[int] = ends) -> Any:
                    calls = [
                        obstore.get_ranges_async(store, f"f{i}", starts=starts, ends=ends)
                        for i in range(objects)
                    ]
                    return await asyncio.gather(*calls)

                requests = [(f"f{i}", s, span) for i in range(objects) for s in starts]
                funcs: dict[str, Callable[[], Any]] = {
                    "obstore RangeClient.ranges": lambda r=requests: client.ranges(r),
                    "obstore get_ranges_async": lambda g=gather: asyncio.run(g()),
                }
                try:
                    import fsspec
                except ImportError:
                    pass
                else:
                    fs = fsspec.filesystem("http")
                    urls = [f"{base}/f{i}" for i in range(objects) for _ in starts]
                    every_start, every_end = starts * objects, ends * objects
                    funcs["fsspec cat_ranges"] = functools.partial(
                        fs.cat_ranges, urls, every_start, every_end
                    )
                times: dict[str, list[float]] = {k: [] for k in funcs}
                for _ in range(rounds):
                    for k, func in funcs.items():
                        started = time.perf_counter()
                        func()
                        times[k].append(time.perf_counter() - started)
                for k, runs in times.items():
                    rows.append(
                        {
                            "layout": f"ranges of {span // 1024} KiB",
                            "reader": k,
                            "median_gbps": objects * size / statistics.median(runs) / 1e9,
                            "best_gbps": objects * size / min(runs) / 1e9,
                            "rounds": len(runs),
                        }
                    )
    return rows


#: The servers of ``--limits``: :func:`serve_directory`'s arguments (``delay`` from
#: ``--latency-ms``).
LIMIT_SERVERS: dict[str, dict[str, Any]] = {
    "small": {"workers": 4, "backlog": 5},
    "http.server": {"backlog": 5},
    "object store": {"processes": 1},
}


def limits(
    root: Path, layouts: Sequence[str], numbers: Sequence[int | str], rounds: int, latency: float
) -> list[dict[str, Any]]:
    """Seconds of ``read_volume(url)`` per server, layout and ``remote_requests`` setting."""
    rows = []
    for server, options in LIMIT_SERVERS.items():
        options = options | ({"delay": latency} if "processes" in options else {})
        for name in layouts:
            expected = read_volume(root / f"{name}.zarr")
            for number in numbers:
                runs = []
                # a fresh server (and so a fresh connection pool) per limit
                with settings.set(remote_requests=number), serve_directory(root, **options) as base:
                    for _ in range(rounds):
                        started = time.perf_counter()
                        data = read_volume(f"{base}/{name}.zarr")
                        runs.append(time.perf_counter() - started)
                        if not np.array_equal(data, expected):
                            raise SystemExit(f"wrong data read ({server}, {name}, {number})")
                rows.append(
                    {
                        "server": server,
                        "layout": name,
                        "requests": number,
                        "median_s": statistics.median(runs),
                        "slowest_s": max(runs),
                        "rounds": len(runs),
                    }
                )
                print(f"{server} {name} {number}: " + " ".join(f"{t:.2f}" for t in runs))
    return rows


def readers(root: Path, base: str, name: str, gpu: bool, skip: set[str]) -> dict[str, Callable]:
    """The timed readers of one layout (each returns what it read, in host or device memory)."""
    url = f"{base}/{name}.zarr"
    found: dict[str, Callable[[], Any]] = {"linumpy": lambda: read_volume(url)}
    if gpu:
        found["linumpy gpu"] = functools.partial(gpu_read, url)
    store = zarr.storage.ObjectStore(object_store(url), read_only=True)
    found["zarr ObjectStore"] = lambda: zarr.open_array(store=store, mode="r")[...]
    if "fsspec" not in skip:
        found["zarr FsspecStore"] = lambda: zarr.open_array(url, mode="r")[...]
    if "tensorstore" not in skip:
        try:
            import tensorstore as ts
        except ImportError:
            pass
        else:
            spec = {"driver": "zarr3", "kvstore": {"driver": "http", "base_url": url}}
            found["tensorstore http"] = lambda: ts.open(spec, read=True).result().read().result()
    found["local"] = lambda: read_volume(root / f"{name}.zarr")
    found["ceiling"] = ceiling(url)
    return found


def gpu_read(url: str) -> Any:
    """``read_volume(url, gpu=True)``, finished on the device; not copied back to the host,
    which is no part of the read (a 1 GiB copy into new host memory takes a large part of it)."""
    import cupy

    out = read_volume(url, gpu=True)
    cupy.cuda.runtime.deviceSynchronize()
    return out


def on_host(result: Any) -> np.ndarray:
    """A reader's result in host memory, to check it."""
    return result.get() if hasattr(result, "get") else np.asarray(result)


def staged_read(url: str, gpu: bool) -> dict[str, float]:
    """One ``read_volume`` of ``url``, its parts timed: ``open`` (opening the array: its metadata
    requests), ``total``, and the read report's phases (``plan``: planning, with the shard index
    requests; ``allocate``; ``pipeline``, with the run loop's stages)."""
    from linumpy.io.engine.read import last_read_report

    started = time.perf_counter()
    array = open_array(url)
    opened = time.perf_counter() - started
    if gpu:
        import cupy

        read_volume(array, gpu=True)
        cupy.cuda.runtime.deviceSynchronize()
    else:
        read_volume(array)
    total = time.perf_counter() - started
    report = last_read_report("gpu" if gpu else "cpu")
    phases = dict(report.phases) if report is not None else {}
    return phases | {"open": opened, "total": total}


#: Stages of the run loop reported by ``--stages`` (seconds summed over a read's groups).
STAGES = ("fetch", "fetch_wait", "validate", "submit", "final_sync")
#: A read's parts reported by ``--stages`` beside its stages (see :func:`outside_stages`).
OUTSIDE = ("open", "plan", "allocate", "setup", "stages", "other", "total")


def outside_stages(phases: dict[str, float]) -> dict[str, float]:
    """A staged read's seconds outside the run loop's stages, and those stages' sum.

    ``setup`` is the run loop's own start (sizing, the fill of chunks not stored, grouping);
    ``stages`` what it then waited for and did per group (``fetch_wait``, ``validate``,
    ``submit``) and at the end (``final_sync``), the fetch stage's own time overlapping them;
    ``other`` the total less every part named.

    Examples
    --------
    >>> row = outside_stages({"open": 0.01, "plan": 0.02, "allocate": 0.01, "groups": 0.01,
    ...                       "fetch_wait": 0.1, "validate": 0.02, "final_sync": 0.01,
    ...                       "total": 0.2})
    >>> {k: round(v, 3) for k, v in row.items()}  # doctest: +NORMALIZE_WHITESPACE
    {'open': 0.01, 'plan': 0.02, 'allocate': 0.01, 'setup': 0.01, 'stages': 0.13,
     'other': 0.02, 'total': 0.2}
    """
    row = {k: phases.get(k, 0.0) for k in ("open", "plan", "allocate")}
    row["setup"] = phases.get("sizes", 0.0) + phases.get("groups", 0.0)
    per_group = ("fetch_wait", "validate", "submit", "final_sync")
    row["stages"] = sum(phases.get(k, 0.0) for k in per_group)
    total = phases.get("total", 0.0)
    row["other"] = total - sum(row.values())
    row["total"] = total
    return row


def stage_rows(layout: str, stages: dict[str, list]) -> list[dict[str, Any]]:
    """The median seconds of each stage and part per reader, over the rounds."""
    rows = []
    for reader, runs in stages.items():
        row: dict[str, Any] = {"layout": layout, "reader": reader}
        runs = [run | outside_stages(run) for run in runs]
        for stage in sorted({k for run in runs for k in run}):
            row[stage] = statistics.median(run.get(stage, 0.0) for run in runs)
        rows.append(row)
    return rows


def _print_seconds(title: str, columns: Sequence[str], rows: list[dict[str, Any]]) -> None:
    """One markdown table of seconds per read: a row per layout and reader."""
    print("\n" + title)
    print("| layout | reader | " + " | ".join(columns) + " |")
    print("| --- | --- |" + " ---: |" * len(columns))
    for row in rows:
        cells = " | ".join(f"{row.get(column, 0.0):.3f}" for column in columns)
        print(f"| {row['layout']} | {row['reader']} | {cells} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256, help="volume size (MiB, about)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--gpu", action="store_true", help="add read_volume(url, gpu=True)")
    parser.add_argument("--skip", default="", help="readers to leave out: fsspec,tensorstore")
    parser.add_argument("--layouts", default="sharded,chunks", help="sharded and/or chunks")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument(
        "--server-processes",
        type=int,
        default=max(1, (os.cpu_count() or 1) // 4),
        help="processes of the loopback server (0: threads of this process); default: a "
        "quarter of the CPUs, at least 1",
    )
    parser.add_argument(
        "--latency-ms", type=float, default=0.0, help="the server waits this long per request"
    )
    parser.add_argument(
        "--stages", action="store_true", help="also print the engine's seconds per stage"
    )
    parser.add_argument(
        "--transports", action="store_true", help="time ranged GETs alone: obstore vs fsspec"
    )
    parser.add_argument(
        "--limits", default="", help="time read_volume at these remote_requests (auto or numbers)"
    )
    parser.add_argument("--chunk", type=int, default=CHUNK, help="chunk side (voxels)")
    args = parser.parse_args(argv)
    skip = {s for s in args.skip.split(",") if s}
    if args.limits:
        return limit_table(args)
    data = volume(args.mib, args.chunk)
    info = machine_info(args.gpu)
    for name in ("obstore", "fsspec", "aiohttp"):
        try:
            info[name] = __import__(name).__version__
        except ImportError:
            info[name] = "-"
    info["server"] = f"{args.server_processes} processes, {args.latency_ms:g} ms per request"
    results = transports(args.rounds) if args.transports else []
    stage_table: list[dict[str, Any]] = []
    serve = functools.partial(
        serve_directory, processes=args.server_processes, delay=args.latency_ms / 1000
    )
    with tempfile.TemporaryDirectory(prefix="linumpy-remote-") as folder:
        root = Path(folder)
        write(root, data, args.chunk)
        with serve(root) as base:
            for name in [] if args.transports else args.layouts.split(","):
                stages: dict[str, list] = {}
                funcs = readers(root, base, name, args.gpu, skip)
                url = f"{base}/{name}.zarr"
                staged = {"linumpy": False} | ({"linumpy gpu": True} if args.gpu else {})
                times: dict[str, list[float]] = {k: [] for k in funcs}
                for k, func in funcs.items():  # checked once, and warmed up
                    if k != "ceiling" and not np.array_equal(on_host(func()), data):
                        raise SystemExit(f"{k} read wrong data ({name})")
                for _ in range(args.rounds):
                    for k, func in funcs.items():
                        started = time.perf_counter()
                        func()
                        times[k].append(time.perf_counter() - started)
                    for k, gpu in staged.items() if args.stages else ():  # untimed
                        stages.setdefault(k, []).append(staged_read(url, gpu))
                for k, runs in times.items():
                    results.append(
                        {
                            "layout": name,
                            "reader": k,
                            "median_gbps": data.nbytes / statistics.median(runs) / 1e9,
                            "best_gbps": data.nbytes / min(runs) / 1e9,
                            "rounds": len(runs),
                        }
                    )
                stage_table += stage_rows(name, stages) if args.stages else []
    threads = settings.get().io_threads
    if not args.transports:
        print(f"{data.shape} uint16, {data.nbytes / 2**20:.0f} MiB, {threads} I/O threads")
    print("| layout | reader | median GB/s | best GB/s |")
    print("| --- | --- | ---: | ---: |")
    for row in results:
        print(
            f"| {row['layout']} | {row['reader']} | {row['median_gbps']:.2f} "
            f"| {row['best_gbps']:.2f} |"
        )
    if stage_table:
        _print_seconds(
            "seconds per read, median (fetch: the fetch stage's own time; fetch_wait: the\n"
            "decode waiting for it; validate; submit; final_sync: the decode's tail)",
            STAGES,
            stage_table,
        )
        _print_seconds(
            "seconds per read outside the stages, median (open: the metadata requests; plan:\n"
            "the shard index requests; allocate: the output; setup: sizing, filling chunks not\n"
            "stored, grouping; stages: the stages above but fetch; other: the rest)",
            OUTSIDE,
            stage_table,
        )
    print("machine: " + "; ".join(f"{k} {v}" for k, v in info.items()))
    if args.json is not None:
        command = "python benchmarks/remote_read.py " + " ".join(argv or sys.argv[1:])
        record = {
            "machine": info,
            "shape": data.shape,
            "command": command,
            "rows": results,
            "stages": stage_table,
        }
        args.json.write_text(json.dumps(record, indent=1))
    return 0


def limit_table(args: argparse.Namespace) -> int:
    """``--limits``: print (and with ``--json`` write) the seconds per read of each limit."""
    numbers = [n if n == "auto" else int(n) for n in args.limits.split(",")]
    data = volume(args.mib, args.chunk)
    latency = (args.latency_ms or 30.0) / 1000
    with tempfile.TemporaryDirectory(prefix="linumpy-limits-") as folder:
        root = Path(folder)
        write(root, data, args.chunk)
        rows = limits(root, args.layouts.split(","), numbers, args.rounds, latency)
    print(f"{data.shape} uint16, {data.nbytes / 2**20:.0f} MiB, chunks of {args.chunk}^3")
    print("| server | layout | requests in flight | median s | slowest s |")
    print("| --- | --- | ---: | ---: | ---: |")
    for row in rows:
        print(
            f"| {row['server']} | {row['layout']} | {row['requests']} | {row['median_s']:.2f} "
            f"| {row['slowest_s']:.2f} |"
        )
    print(f"object store: {latency * 1000:g} ms per request")
    if args.json is not None:
        args.json.write_text(json.dumps({"machine": machine_info(False), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
