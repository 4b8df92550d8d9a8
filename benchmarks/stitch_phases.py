#!/usr/bin/env python3
"""Where a GPU stitch block's time goes, on 1 GPU and on N GPUs at once.

The task of ``stitch_omezarr(gpu=True)`` is: ``read_volume(gpu=True)`` of the tiles under a
block, ``stitch_region`` on the device, then ``store_block`` (nvCOMP encode, files written by
threads). This script runs those three steps by hand for every block of the same job as
``benchmarks/dask_gpu.py --stitch-only`` (the 2 GiB sharded volume read as a 4x4 grid of 256x256
tiles, output float32 in (64, 128, 128) chunks), first in one process on GPU 0, then in N
processes at once (one per GPU, each taking every N-th block), and prints per process the
seconds of each step summed over its blocks, plus the write engine's own phases. No dask: if the
N-process wall time does not shrink either, the limit is in the steps, not in the scheduler.

Usage (dev, from the checkout): ``python benchmarks/stitch_phases.py --gpus 2 --folder /tmp``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _transform() -> Any:
    from linumpy.mosaic.transform import TileTransform

    step = 0.9 * 256
    return TileTransform([[step, 0.0], [0.0, step]], (0.0, 0.0), (256, 256), (4, 4)).normalized()


def worker(volume: str, target: str, depth: int, index: int, count: int, write: bool) -> dict:
    """Process blocks index::count of depth ``depth`` (whole planes) on the current GPU."""
    import cupy
    import zarr

    from linumpy.gpu.zarr_io import last_read_report
    from linumpy.io import read_volume
    from linumpy.io.engine.write import write_array
    from linumpy.mosaic.stitch import stitch_region, tiles_in_region

    transform = _transform()
    source = zarr.open_array(volume + "/0", mode="r")
    out = zarr.open_array(target, mode="r+")
    height, width = out.shape[-2:]
    starts = list(range(0, source.shape[0], depth))[index::count]
    steps = dict.fromkeys(("read", "stitch", "write"), 0.0)
    # warm-up outside the timings: CUDA context, nvCOMP, kernels, pinned buffers, the pool
    rows, cols = tiles_in_region(transform, (0, 0), (height, width))
    warm = read_volume(volume, gpu=True, region=(slice(0, depth), slice(0, 512), slice(0, 512)))
    stitch_region(warm, transform, origin=(0, 0), shape=(256, 256))
    del warm
    cupy.cuda.Device().synchronize()
    engine: dict[str, float] = {}
    reads: dict[str, float] = {"outside": 0.0, "compressed": 0.0}
    start = time.perf_counter()
    for z0 in starts:
        z1 = min(z0 + depth, source.shape[0])
        t0 = time.perf_counter()
        rows, cols = tiles_in_region(transform, (0, 0), (height, width))
        region = (slice(z0, z1), slice(rows.start * 256, rows.stop * 256),
                  slice(cols.start * 256, cols.stop * 256))  # fmt: skip
        tiles = read_volume(volume, gpu=True, region=region)
        cupy.cuda.get_current_stream().synchronize()
        t1 = time.perf_counter()
        report = last_read_report()
        for name, value in report.phases.items():
            reads[name] = reads.get(name, 0.0) + value
        reads["outside"] += (t1 - t0) - report.seconds
        reads["compressed"] += report.compressed_bytes / 1e9
        block = stitch_region(tiles, transform, origin=(0, 0), shape=(height, width),
                              grid_origin=(rows.start, cols.start))  # fmt: skip
        cupy.cuda.get_current_stream().synchronize()
        t2 = time.perf_counter()
        if write:
            report = write_array(out, block, (slice(z0, z1), slice(0, height), slice(0, width)))
            for name, value in report.phases.items():
                engine[name] = engine.get(name, 0.0) + value
        del tiles, block
        t3 = time.perf_counter()
        steps["read"] += t1 - t0
        steps["stitch"] += t2 - t1
        steps["write"] += t3 - t2
    wall = time.perf_counter() - start
    return {"blocks": len(starts), "wall": wall, **steps, "engine": engine, "reads": reads}


def _spawn(args: argparse.Namespace, target: str, count: int, write: bool) -> list[dict]:
    """``count`` worker processes at once, one per GPU; their JSON results."""
    procs = []
    for i in range(count):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(i))
        command = [sys.executable, __file__, "--worker", f"{i}/{count}", "--volume", args.volume,
                   "--target", target, "--depth", str(args.depth)]  # fmt: skip
        command += [] if write else ["--no-write"]
        procs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True))
    results = []
    for proc in procs:
        out, _ = proc.communicate()
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--depth", type=int, default=64, help="block depth [%(default)s]")
    parser.add_argument("--skip-writes", action="store_true", help="compute only")
    parser.add_argument("--folder")
    parser.add_argument("--worker")
    parser.add_argument("--volume")
    parser.add_argument("--target")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if args.worker:
        index, count = map(int, args.worker.split("/"))
        result = worker(args.volume, args.target, args.depth, index, count, not args.no_write)
        print(json.dumps(result))
        return 0
    sys.path.insert(0, str(HERE))
    import zarr
    from dask_gpu import make_volume

    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        args.volume = str(Path(folder) / "volume.ome.zarr")
        shape = make_volume(Path(args.volume), 2.0)
        out_shape = (shape[0], *_transform().output_shape())
        table = []
        for count in (1, args.gpus):
            # the second write: warm file system state
            for write in (False,) if args.skip_writes else (False, True, True):
                target = str(Path(folder) / f"out_{count}_{write}.zarr")
                zarr.create_array(target, shape=out_shape, chunks=(64, 128, 128),
                                  dtype="float32", overwrite=True)  # fmt: skip
                start = time.perf_counter()
                results = _spawn(args, target, count, write)
                wall = time.perf_counter() - start
                row = {"gpus": count, "write": write, "wall": wall, "procs": results}
                print(json.dumps(row), flush=True)
                table.append(row)
        print("\n| GPUs | write | wall s | per process: blocks, read/stitch/write s, engine |")
        print("| --- | --- | --- | --- |")
        for row in table:
            procs = "; ".join(
                f"{p['blocks']}: {p['read']:.2f}/{p['stitch']:.2f}/{p['write']:.2f} "
                + ",".join(f"{k} {v:.2f}" for k, v in p["engine"].items())
                for p in row["procs"]
            )
            print(f"| {row['gpus']} | {row['write']} | {row['wall']:.2f} | {procs} |")
        print("\nread phases (s, summed over blocks; compressed GB):")
        for row in table:
            for p in row["procs"]:
                phases = ", ".join(f"{k} {v:.3f}" for k, v in p["reads"].items())
                print(f"{row['gpus']} GPU(s), write {row['write']}: {phases}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
