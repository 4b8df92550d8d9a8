"""Dev check on a GPU: the level-0 stitch of a mosaic of large single-chunk tiles (the notebook's:
(96, 512, 512) tiles, one 48 MiB chunk each) against the block shape, on the local threaded
scheduler, GPU and CPU; blocks are summed, nothing is written. Then one block's phases (the
tile read, with the read engine's phase report, and the stitch).
``python benchmarks/stitch_blocks.py [--grid N] [--threads T ...]``."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

BLOCKS = [(32, 256, 256), (96, 256, 256), (96, 512, 512), (96, 1024, 1024), (96, 4096, 4096)]


def one_block(mosaic: Path, transform, block: tuple[int, ...], gpu: bool) -> dict:
    from linumpy._xp import gpu_module
    from linumpy.io import read_volume
    from linumpy.mosaic.stitch import stitch_region, tiles_in_region

    y0, x0 = block[1], block[2]  # the second block in y and x: an inner one
    if tiles_in_region(transform, (y0, x0), block[1:]) is None:
        y0 = x0 = 0
    rows, cols = tiles_in_region(transform, (y0, x0), block[1:])
    th, tw = transform.tile_shape
    region = (slice(0, block[0]), slice(rows.start * th, rows.stop * th),
              slice(cols.start * tw, cols.stop * tw))  # fmt: skip
    times = {}
    for _ in range(2):  # the second run is reported
        start = time.perf_counter()
        tiles = read_volume(mosaic, gpu=gpu, region=region)
        if gpu:
            gpu_module(True).cuda.Device().synchronize()
        times["read"] = time.perf_counter() - start
        start = time.perf_counter()
        out = stitch_region(tiles, transform, "linear", origin=(y0, x0), shape=block[1:],
                            grid_origin=(rows.start, cols.start))  # fmt: skip
        if gpu:
            gpu_module(True).cuda.Device().synchronize()
        times["stitch"] = time.perf_counter() - start
    report = None
    if gpu:
        from linumpy.gpu.zarr_io import last_read_report

        report = last_read_report()
    return {"block": block, "gpu": gpu, "tiles MiB": tiles.nbytes / 2**20,
            "out MiB": out.nbytes / 2**20, **{k: round(v, 4) for k, v in times.items()},
            "read phases": report.phases if report else None,
            "cpu decoded": report.n_cpu_decoded if report else None}  # fmt: skip


def main() -> None:
    import dask
    import numpy as np

    from linumpy.io.demo import make_demo_data, read_demo_truth
    from linumpy.mosaic.out_of_core import stitch_lazy

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=int, default=4)
    parser.add_argument("--threads", type=int, nargs="+", default=[16, 4])
    parser.add_argument("--cpu", action="store_true", help="also the CPU at the first count")
    parser.add_argument("--no-gpu", action="store_true", help="CPU only (a smoke run)")
    args = parser.parse_args()
    devices = (False,) if args.no_gpu else (True, False)
    folder = Path(tempfile.mkdtemp())
    mosaic = folder / "mosaic.ome.zarr"
    make_demo_data(
        mosaic,
        grid_shape=(args.grid, args.grid),
        tile_shape=(96, 512, 512),
        xp=np if args.no_gpu else __import__("cupy"),
    )
    transform = read_demo_truth(mosaic).normalized()
    nbytes = args.grid**2 * 96 * 512 * 512 * 2
    for block in BLOCKS[:4]:
        for gpu in devices:
            print(json.dumps(one_block(mosaic, transform, block, gpu)), flush=True)
    rows = []
    runs = [] if args.no_gpu else [(True, t) for t in args.threads]
    runs += [(False, args.threads[0])] if args.cpu or args.no_gpu else []
    for gpu, threads in runs:
        for block in BLOCKS:
            lazy = stitch_lazy(mosaic, transform, block=block, gpu=gpu)
            start = time.perf_counter()
            with dask.config.set(scheduler="threads", num_workers=threads):
                float(lazy.sum(dtype="float64").compute())
            seconds = time.perf_counter() - start
            rows.append(("GPU" if gpu else "CPU", threads, block, lazy.npartitions, seconds))
            print(f"{rows[-1]} {nbytes / seconds / 1e9:.2f} GB/s", flush=True)
    print("| device | threads | block | blocks | s | input GB/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for device, threads, block, n, seconds in rows:
        rate = nbytes / seconds / 1e9
        print(f"| {device} | {threads} | {block} | {n} | {seconds:.2f} | {rate:.2f} |")


if __name__ == "__main__":
    main()
