#!/usr/bin/env python3
"""Time ``linum-stitch-3d`` on a ~2 GiB demo mosaic grid: CPU, then the same command with --use-gpu.

One run each, as separate processes (imports and CUDA start-up included), on the same input with
its page cache warm. The demo grid is generated on the GPU when one is usable (faster), else on
the CPU; the stitch uses the demo's true layout. Prints the times, their ratio and the largest
difference between the two outputs over a slab.

    python docs/dev/bench_stitch.py [--out DIR] [--grid 8 8] [--tile-shape 256 256 256]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def _stitch(mosaic: Path, transform: Path, output: Path, gpu: bool) -> tuple[float, str]:
    command = [
        sys.executable,
        "-m",
        "linumpy.cli.linum_stitch_3d",
        str(mosaic),
        str(transform),
        str(output),
        "-f",
        "-v",
        *(["--use-gpu"] if gpu else []),
    ]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    log = [
        line for line in result.stderr.splitlines() if "\r" not in line and "stitch:" not in line
    ]
    if result.returncode:
        raise SystemExit(
            f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr[-3000:]}"
        )
    return elapsed, "\n".join(log[-5:])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench_stitch"))
    parser.add_argument("--grid", nargs=2, type=int, default=(8, 8))
    parser.add_argument("--tile-shape", nargs=3, type=int, default=(256, 256, 256))
    args = parser.parse_args()

    from linumpy._xp import gpu_module
    from linumpy.cli import resolve_gpu
    from linumpy.io import read_volume
    from linumpy.io.demo import make_demo_data, read_demo_truth

    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    mosaic = args.out / "mosaic.ome.zarr"
    transform = args.out / "transform.json"
    gpu = resolve_gpu(True)
    start = time.perf_counter()
    demo = make_demo_data(
        mosaic, grid_shape=tuple(args.grid), tile_shape=tuple(args.tile_shape), xp=gpu_module(gpu)
    )
    size = demo.mosaic.nbytes
    del demo
    read_demo_truth(mosaic).save(transform)
    print(
        f"mosaic grid: {size / 2**30:.2f} GiB uint16, generated on the {'GPU' if gpu else 'CPU'} "
        f"in {time.perf_counter() - start:.1f} s",
        flush=True,
    )

    cpu_time, cpu_log = _stitch(mosaic, transform, args.out / "cpu.ome.zarr", gpu=False)
    print(f"CPU  linum-stitch-3d: {cpu_time:.2f} s\n{cpu_log}", flush=True)
    gpu_time, gpu_log = _stitch(mosaic, transform, args.out / "gpu.ome.zarr", gpu=True)
    print(f"GPU  linum-stitch-3d --use-gpu: {gpu_time:.2f} s\n{gpu_log}", flush=True)

    slab = (slice(0, 32), slice(None), slice(None))
    cpu = read_volume(args.out / "cpu.ome.zarr", region=slab)
    gpu_out = read_volume(args.out / "gpu.ome.zarr", region=slab)
    scale = float(np.abs(cpu).max()) or 1.0
    difference = float(np.abs(cpu - gpu_out).max()) / scale
    out_size = sum(f.stat().st_size for f in (args.out / "cpu.ome.zarr").rglob("*") if f.is_file())
    print(
        f"output on disk: {out_size / 2**30:.2f} GiB; largest |CPU - GPU| over planes 0-31: "
        f"{difference:.2e} of the maximum"
    )
    print(
        f"SUMMARY stitch {size / 2**30:.2f} GiB: CPU {cpu_time:.2f} s, GPU {gpu_time:.2f} s, "
        f"speed-up {cpu_time / gpu_time:.1f}x (cpus: {os.cpu_count()})"
    )


if __name__ == "__main__":
    main()
