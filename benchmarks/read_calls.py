#!/usr/bin/env python3
"""Profile many small ``read_volume(gpu=True)`` calls (a stitch task's reads), in one process.

Reads ``--calls`` regions of ``--depth`` planes from the 2 GiB sharded volume of
``benchmarks/dask_gpu.py`` (made under ``--folder`` unless ``--volume`` is given), after one
warm-up, under cProfile; prints the mean wall time of a call, the report's phases, and the
profile's top entries by cumulative time. With ``--procs 2`` the same runs in two processes at
once (one per GPU) to show what slows down when they share the host.

Usage (dev, from the checkout): ``python benchmarks/read_calls.py --folder /tmp``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def profile(volume: str, depth: int, calls: int, top: int) -> str:
    import cupy

    from linumpy.gpu.zarr_io import last_read_report
    from linumpy.io import read_volume

    def one(z0: int) -> None:
        read_volume(volume, gpu=True, region=(slice(z0, z0 + depth),))
        cupy.cuda.get_current_stream().synchronize()

    one(0)
    starts = [(i * depth) % 1024 for i in range(calls)]
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    for z0 in starts:
        one(z0)
    profiler.disable()
    wall = (time.perf_counter() - start) / calls
    report = last_read_report()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(top)
    phases = ", ".join(f"{k} {1e3 * v:.1f}" for k, v in report.phases.items())
    return (
        f"GPU {os.environ.get('CUDA_VISIBLE_DEVICES', '?')}: {calls} calls of {depth} planes, "
        f"{1e3 * wall:.1f} ms per call (profiled); last call ms: {1e3 * report.seconds:.1f}, "
        f"{phases}\n{text.getvalue()}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder")
    parser.add_argument("--volume")
    parser.add_argument("--depth", type=int, default=64)
    parser.add_argument("--calls", type=int, default=16)
    parser.add_argument("--procs", type=int, default=1)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        print(profile(args.volume, args.depth, args.calls, args.top))
        return 0
    sys.path.insert(0, str(HERE))
    from dask_gpu import make_volume

    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        volume = args.volume or str(Path(folder) / "volume.ome.zarr")
        if not args.volume:
            make_volume(Path(volume), 2.0)
        for procs in sorted({1, args.procs}):
            print(f"===== {procs} process(es) at once", flush=True)
            command = [sys.executable, __file__, "--child", "--volume", volume,
                       "--depth", str(args.depth), "--calls", str(args.calls),
                       "--top", str(args.top)]  # fmt: skip
            running = [
                subprocess.Popen(command, env=dict(os.environ, CUDA_VISIBLE_DEVICES=str(i)))
                for i in range(procs)
            ]
            for proc in running:
                proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
