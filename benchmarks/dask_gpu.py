#!/usr/bin/env python3
"""GPU throughput of ``open_volume(gpu=True)``: one process against ``read_volume(gpu=True)``,
and a dask-cuda ``LocalCUDACluster`` on 1 against 2 GPUs.

(a) On one sharded uint16 volume (64^3 chunks in 128x512x512 shards; OCT-like speckle, page
cache warm), ``read_volume(gpu=True)`` of the whole volume against ``open_volume(gpu=True)``
with each block summed on the device (block sizes and local thread counts varied). Target:
open_volume at >= 0.8 of read_volume's throughput.
(b) ``--device-limit``: the same volume read block by block under a cupy memory-pool limit of a
quarter of its size; peak pool use sampled after each task. Target: within the limit.
(c) With ``--gpus 2``: the same sum on a ``LocalCUDACluster`` with 1 worker (1 GPU), then with
2 workers (2 GPUs), for each block shape of ``--read-blocks``. Target: >= 1.8x.
(d) With ``--gpus 2``: ``stitch_omezarr(gpu=True)`` of the volume read as a 4x4 mosaic grid, on
1 then 2 dask-cuda workers (what ``linum-stitch-3d --use-gpu --gpus N`` runs): a warm-up, then
the median of ``--stitch-repeats``, with the last run's task stream (time before the first task,
the span of the tasks, time after the last; per worker, tasks and seconds computing). Target:
>= 1.8x.

``--cpu`` runs (a) on the CPU instead (numpy blocks, no GPU needed): with ``--size-gib 0.001
--side 128`` it is the smoke test CI runs.

Medians of ``--repeats`` runs after one warm-up; a short table is printed last. Run from the
checkout: ``python benchmarks/dask_gpu.py --gpus 2`` (``--json FILE`` keeps the rows).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

GIB = 2**30


def make_volume(path: Path, size_gib: float, side: int = 1024) -> tuple[int, ...]:
    """Sharded uint16 OME-Zarr image of about ``size_gib``, ``side`` x ``side`` planes (no zstd
    checksums): speckle-like noise with a dim background. Read as a 4x4 mosaic grid of tiles of a
    quarter side by the stitching rows."""
    from linumpy.io import OmeZarrWriter

    shard = min(512, side)
    depth = max(128, int(round(size_gib * GIB / (2 * side * side) / 128)) * 128)
    shape = (depth, side, side)
    writer = OmeZarrWriter(
        path,
        shape,
        np.uint16,
        voxel_size=(1, 1, 1),
        chunks=(64, 64, 64),
        shards=(128, shard, shard),
        checksum=False,
    )
    array = writer.array
    rng = np.random.default_rng(0)
    slab = rng.gamma(2.0, 300.0, size=(128, side, side))
    slab[:, :, : side * 300 // 1024] *= 0.05  # background
    slab = np.clip(slab, 0, 65535).astype(np.uint16)
    for z0 in range(0, depth, 128):
        array[z0 : z0 + 128] = np.roll(slab, z0 // 128 * 37, axis=2)
    writer.commit()
    return shape


def _block_sums(lazy: Any) -> Any:
    """One float per block, each block summed on the GPU (host gets 8 bytes per block)."""
    return lazy.map_blocks(
        lambda b: np.full((1,) * b.ndim, float(b.sum(dtype="float64"))),
        chunks=tuple((1,) * len(c) for c in lazy.chunks),
        dtype=np.float64,
        meta=np.empty((0,) * lazy.ndim, np.float64),
    ).sum()


def _forgotten(client: Any) -> None:
    """Wait until the scheduler holds no task: a repeat must not find the last one's results
    (released futures are forgotten asynchronously, and the keys of a repeat are the same)."""
    deadline = time.monotonic() + 10
    while client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)):
        if time.monotonic() > deadline:
            raise RuntimeError("the scheduler still holds tasks 10 s after a compute")
        time.sleep(0.02)


def timed(fn, repeats: int, client: Any = None) -> tuple[float, Any]:
    result = fn()  # warm-up
    times = []
    for _ in range(repeats):
        if client is not None:
            _forgotten(client)
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def _free_device_pool(gpu: bool) -> None:
    if gpu:
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()


def single_gpu(path: Path, nbytes: int, repeats: int, gpu: bool = True) -> list[dict[str, Any]]:
    """(a): ``read_volume`` of the whole volume against ``open_volume`` summed block by block,
    on the GPU (or, ``gpu=False``, on the CPU)."""
    from linumpy.io import open_volume, read_volume
    from linumpy.parallel import Cluster

    def read() -> float:
        volume = read_volume(path, gpu=gpu)
        total = float(volume.sum(dtype="float64"))
        del volume
        return total

    seconds, expected = timed(read, repeats)
    rows = [{"what": f"read_volume(gpu={gpu}) + sum", "s": seconds, "GB/s": nbytes / seconds / 1e9}]
    _free_device_pool(gpu)
    configs = [("128MiB", 1), ("128MiB", 2), ("512MiB", 1), ("512MiB", 2), ("512MiB", 4)]
    configs += [("1GiB", 1), ("1GiB", 2), (None, 2)]
    for chunks, threads in configs:
        what = f"open_volume(gpu={gpu}), {chunks or 'default'} blocks, {threads} thread(s)"
        cluster = Cluster(threads=threads)
        lazy = _block_sums(open_volume(path, gpu=gpu, chunks=chunks))
        try:
            seconds, total = timed(lambda: float(cluster.compute(lazy)), repeats)  # noqa: B023
        except Exception as exc:  # a failing configuration is a result too
            rows.append({"what": what, "error": f"{type(exc).__name__}: {exc}"[:200]})
            continue
        finally:
            _free_device_pool(gpu)
        rows.append(
            {
                "what": what,
                "s": seconds,
                "GB/s": nbytes / seconds / 1e9,
                "ratio": rows[0]["s"] / seconds,
                "sum ok": total == expected,
            }
        )
    return rows


def _scratch(limit: int) -> dict[str, int] | None:
    """Settings that keep the GPU reader's staging within an eighth of ``limit``, if it has them."""
    from linumpy import settings

    fields = getattr(settings.get(), "__dataclass_fields__", {})
    return {"scratch_bytes": limit // 8} if "scratch_bytes" in fields else None


def device_limit(path: Path, nbytes: int) -> dict[str, Any]:
    """Read the volume block by block with the cupy pool limited to a quarter of its size."""
    import cupy
    from dask.callbacks import Callback

    from linumpy.io import open_volume
    from linumpy.parallel import Cluster

    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    limit = nbytes // 4
    pool.set_limit(size=limit)
    peak = [0]

    class Peak(Callback):
        def _posttask(self, *args: Any) -> None:
            peak[0] = max(peak[0], pool.total_bytes())

    what = f"open_volume(gpu=True) under a {limit / GIB:.2f} GiB pool limit"
    try:
        blocks = f"{limit // 8}B"
        lazy = _block_sums(open_volume(path, gpu=True, chunks=blocks, settings=_scratch(limit)))
        start = time.perf_counter()
        with Peak():
            Cluster(threads=2).compute(lazy)
        seconds = time.perf_counter() - start
    except Exception as exc:
        return {"what": what, "error": f"{type(exc).__name__}: {exc}"[:200]}
    finally:
        pool.set_limit(size=0)
        pool.free_all_blocks()
    return {
        "what": f"open_volume(gpu=True) under a {limit / GIB:.2f} GiB pool limit "
        f"(volume {nbytes / GIB:.2f} GiB)",
        "s": seconds,
        "GB/s": nbytes / seconds / 1e9,
        "peak pool GiB": peak[0] / GIB,
        "ok": peak[0] <= limit,
    }


def _blocks(spec: str) -> tuple[int, ...] | None:
    """``"128x512x512"`` -> (128, 512, 512); ``"default"`` -> None (open_volume's choice)."""
    return None if spec == "default" else tuple(int(v) for v in spec.split("x"))


def _reads_in_worker(path: str, depth: int, reads: int) -> tuple[float, float, int]:
    """In a worker process, outside any task: ``reads`` reads of the volume's first ``depth``
    planes with ``read_volume(gpu=True)``; the span (start, end, bytes) of the timed ones."""
    import cupy

    from linumpy.io import read_volume

    region = (slice(0, depth),)
    read_volume(path, gpu=True, region=region)  # warm-up
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    nbytes = 0
    for _ in range(reads):
        volume = read_volume(path, gpu=True, region=region)
        nbytes += volume.nbytes
        del volume
    cupy.cuda.Device().synchronize()
    return start, time.perf_counter(), nbytes


def multi_gpu(
    path: Path, nbytes: int, repeats: int, gpus: int, blocks: list[str]
) -> list[dict[str, Any]]:
    """The block sums on 1 then ``gpus`` dask-cuda workers, for each block shape in ``blocks``
    (one cluster per GPU count, every block shape timed on it)."""
    from distributed import get_task_stream

    from linumpy.io import open_volume
    from linumpy.parallel import dask_cluster

    rows: dict[str, list[dict[str, Any]]] = {spec: [] for spec in blocks}
    for n in (1, gpus):
        start = time.perf_counter()
        with dask_cluster(gpus=n) as cluster:
            print(f"{n} dask-cuda worker(s) up in {time.perf_counter() - start:.1f} s", flush=True)
            for spec in blocks:
                lazy = open_volume(path, gpu=True, chunks=_blocks(spec))
                shape = "x".join(str(c[0]) for c in lazy.chunks)
                summed = _block_sums(lazy)
                seconds, _ = timed(lambda: float(cluster.compute(summed)), repeats, cluster.client)  # noqa: B023
                _forgotten(cluster.client)
                with get_task_stream(cluster.client) as stream:  # one more, to see where time goes
                    wall = time.time()
                    float(cluster.compute(summed))
                    ended = time.time()
                rows[spec].append(
                    {
                        "what": f"LocalCUDACluster, {n} GPU(s), {spec} blocks ({shape}, "
                        f"{lazy.npartitions} blocks)",
                        "s": seconds,
                        "GB/s": nbytes / seconds / 1e9,
                        "extra run": task_stream_summary(stream.data, wall, ended),
                    }
                )
                print(json.dumps(rows[spec][-1]), flush=True)
            # The same reads without tasks: each worker reads 1 GiB regions in a loop at once
            # (client.run), to tell the worker processes' own speed from the tasks' overhead.
            try:
                spans = cluster.client.run(_reads_in_worker, str(path), 512, 5)
            except Exception as exc:  # a failing measurement is a result too
                print(f"reads in workers failed: {type(exc).__name__}: {exc}", flush=True)
                continue
            first = min(a for a, _, _ in spans.values())
            last = max(b for _, b, _ in spans.values())
            total = sum(size for _, _, size in spans.values())
            rows.setdefault("in workers", []).append(
                {
                    "what": f"{n} dask-cuda worker(s) reading 1 GiB regions in a loop at once "
                    "(client.run, no tasks)",
                    "s": last - first,
                    "GB/s": total / (last - first) / 1e9,
                }
            )
            print(json.dumps(rows["in workers"][-1]), flush=True)
    for pair in rows.values():
        pair[-1]["ratio"] = pair[-1]["GB/s"] / pair[0]["GB/s"]
    return [row for pair in rows.values() for row in pair]


def task_stream_summary(records: list[dict[str, Any]], started: float, ended: float) -> dict:
    """Where one distributed computation's wall time went: before the first task started (the
    client: writer, plan, graph), between the first start and the last end (per worker: tasks
    and seconds computing), and after the last end (the client: commit)."""
    spans = [
        (r["worker"], ss["start"], ss["stop"], ss["action"])
        for r in records
        for ss in r.get("startstops", ())
    ]
    if not spans:
        return {}
    first = min(a for _, a, _, _ in spans)
    last = max(b for _, _, b, _ in spans)
    workers: dict[str, dict[str, float]] = {}
    for worker, a, b, action in spans:
        entry = workers.setdefault(worker, {"tasks": 0, "compute s": 0.0, "other s": 0.0})
        if action == "compute":
            entry["tasks"] += 1
            entry["compute s"] += b - a
        else:
            entry["other s"] += b - a
    return {
        "before first task s": round(first - started, 3),
        "tasks span s": round(last - first, 3),
        "after last task s": round(ended - last, 3),
        "workers": {w: {k: round(v, 3) for k, v in e.items()} for w, e in workers.items()},
    }


def _cpus() -> str:
    """This process's CPUs, as ranges ("0-15,32-47")."""
    cpus, ranges = sorted(os.sched_getaffinity(0)), []
    for cpu in cpus:
        if ranges and ranges[-1][1] == cpu - 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges)


def multi_gpu_stitch(
    path: Path, nbytes: int, gpus: int, out_folder: Path | None = None, repeats: int = 3
) -> list[dict[str, Any]]:
    """``stitch_omezarr(gpu=True)`` of the volume read as a 4x4 grid of 256x256 tiles (10%
    overlap), one level, on 1 then ``gpus`` dask-cuda workers: one warm-up run, then the median
    of ``repeats``, with the task stream of the last (where the wall time went)."""
    from distributed import get_task_stream

    from linumpy.io import open_array
    from linumpy.mosaic.out_of_core import plan_stitch_block
    from linumpy.mosaic.pipeline import stitch_omezarr
    from linumpy.mosaic.transform import TileTransform
    from linumpy.parallel import dask_cluster

    step = 0.9 * 256
    transform = TileTransform([[step, 0.0], [0.0, step]], (0.0, 0.0), (256, 256), (4, 4))
    source = open_array(path)
    rows: list[dict[str, Any]] = []
    folder = out_folder or path.parent
    for n in (1, gpus):
        with dask_cluster(gpus=n) as cluster:
            block = plan_stitch_block(
                source.shape,
                2,
                transform.normalized(),
                (64, 128, 128),
                cluster,
                source.chunks,
                gpu=True,
            )
            times = []
            for run in range(repeats + 1):  # the first warms the workers up
                # a new image each run, the last one deleted outside the timing: replacing an
                # image deletes the old one at the commit, in the client after the last task,
                # which is not stitching
                target = folder / f"stitched_{n}_{run}.ome.zarr"
                shutil.rmtree(folder / f"stitched_{n}_{run - 1}.ome.zarr", ignore_errors=True)
                with get_task_stream(cluster.client) as stream:
                    start, wall = time.perf_counter(), time.time()
                    stitch_omezarr(
                        path,
                        target,
                        transform,
                        gpu=True,
                        n_levels=1,
                        chunks=(64, 128, 128),
                        cluster=cluster,
                        overwrite=True,
                    )
                    seconds, ended = time.perf_counter() - start, time.time()
                if run:
                    times.append(seconds)
            stored = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
            if out_folder is not None:  # not inside the temporary folder: gone with it
                shutil.rmtree(target, ignore_errors=True)
            rows.append(
                {
                    "what": f"stitch_omezarr(gpu=True), LocalCUDACluster, {n} GPU(s), blocks of "
                    f"{block}, median of {repeats} (input GB/s)",
                    "s": statistics.median(times),
                    "GB/s": nbytes / statistics.median(times) / 1e9,
                    "runs": [round(t, 3) for t in times],
                    "stored GB": stored / 1e9,
                    "last run": task_stream_summary(stream.data, wall, ended),
                    # dask-cuda pins each worker to its GPU's CPUs (as NVML reports them)
                    "worker CPUs": cluster.client.run(_cpus),
                }
            )
        print(json.dumps(rows[-1]), flush=True)
    rows[-1]["ratio"] = rows[0]["s"] / rows[-1]["s"]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gib", type=float, default=2.0, help="volume size [%(default)s]")
    parser.add_argument("--gpus", type=int, default=1, help="2: also (c), (d) [%(default)s]")
    parser.add_argument("--cpu", action="store_true", help="only (a), on the CPU (no GPU needed)")
    parser.add_argument(
        "--side", type=int, default=1024, help="the volume's planes, side x side [%(default)s]"
    )
    parser.add_argument("--repeats", type=int, default=3, help="[%(default)s]")
    parser.add_argument("--no-device-limit", action="store_true", help="skip (b)")
    parser.add_argument("--no-stitch", action="store_true", help="skip (d)")
    parser.add_argument("--stitch-only", action="store_true", help="only (d)")
    parser.add_argument("--no-single", action="store_true", help="skip (a)")
    parser.add_argument("--folder", help="where the volume goes (a temporary folder by default)")
    parser.add_argument(
        "--out-folder",
        type=Path,
        help="where (d) writes the stitched images (e.g. /dev/shm: tells the file system's "
        "share of the time); beside the volume by default",
    )
    parser.add_argument(
        "--read-blocks",
        default="128x512x512,default",
        help="block shapes of (c), comma-separated ('default': open_volume's) [%(default)s]",
    )
    parser.add_argument(
        "--stitch-repeats",
        type=int,
        default=3,
        help="timed runs of (d) per GPU count [%(default)s]",
    )
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument(
        "--blocks-per-slot",
        type=int,
        help="blocks per running task in the plans (parallel.block_sizes.GPU_BLOCKS_PER_SLOT)",
    )
    parser.add_argument(
        "--worker-threads",
        type=int,
        help="threads per dask-cuda worker (parallel.startup.GPU_WORKER_THREADS)",
    )
    args = parser.parse_args()
    if args.worker_threads:
        import linumpy.parallel.startup

        linumpy.parallel.startup.GPU_WORKER_THREADS = args.worker_threads
    if args.blocks_per_slot:
        import linumpy.parallel.block_sizes

        linumpy.parallel.block_sizes.GPU_BLOCKS_PER_SLOT = args.blocks_per_slot
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        path = Path(folder) / "volume.ome.zarr"
        start = time.perf_counter()
        shape = make_volume(path, args.size_gib, args.side)
        nbytes = int(np.prod(shape)) * 2
        print(
            f"volume {shape} uint16 ({nbytes / GIB:.2f} GiB) written in "
            f"{time.perf_counter() - start:.1f} s",
            flush=True,
        )
        single = args.stitch_only or args.no_single
        gpu = not args.cpu
        steps = [] if single else [lambda: single_gpu(path, nbytes, args.repeats, gpu)]
        if gpu and not args.no_device_limit and not args.stitch_only:
            steps.append(lambda: [device_limit(path, nbytes)])
        if gpu and args.gpus > 1:
            if not args.stitch_only:
                blocks = args.read_blocks.split(",")
                steps.append(lambda: multi_gpu(path, nbytes, args.repeats, args.gpus, blocks))
            if not args.no_stitch:
                steps.append(
                    lambda: multi_gpu_stitch(
                        path, nbytes, args.gpus, args.out_folder, args.stitch_repeats
                    )
                )
        for step in steps:
            new = step()
            rows += new
            for row in new:  # as they come: a run cut short still shows what it measured
                print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    print("\n| what | s | GB/s | ratio / peak |")
    print("| --- | --- | --- | --- |")
    for row in rows:
        if "error" in row:
            print(f"| {row['what']} | failed | - | {row['error']} |")
            continue
        if "ratio" in row:
            extra = f"{row['ratio']:.2f}" + ("" if row.get("sum ok", True) else " (WRONG SUM)")
        elif "peak pool GiB" in row:
            extra = f"peak {row['peak pool GiB']:.2f} GiB, {'ok' if row['ok'] else 'OVER'}"
        else:
            extra = ""
        print(f"| {row['what']} | {row['s']:.3f} | {row['GB/s']:.2f} | {extra} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
