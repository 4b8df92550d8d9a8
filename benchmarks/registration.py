"""Tile registration on the CPU in N threads against the GPU, on demo mosaic projections.

For each grid, a demo mosaic (``generate_demo_mosaic``, on the GPU when cupy is there) is
averaged over z and its pairs registered with ``estimate_transform``: on the host in each
``--threads`` count, then (with cupy) on the GPU, every pair at once. Each row is timed after
one warm-up run (FFT plans, compiled kernels: its time is the ``first s`` column), best and
median of ``--repeats``; the pairs the fit keeps must agree with the CPU's to 0.011 px. This
measures the threads of ``linumpy.mosaic.registration`` (``PIXELS_PER_THREAD``) and the GPU's
speed against them.

Usage::

    python benchmarks/registration.py                     # 6x6 of 512^2 and 8x8 of 256^2 tiles
    python benchmarks/registration.py --grid 3x3:64 --threads 1 2 --repeats 1   # a smoke run
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from linumpy.mosaic.demo import generate_demo_mosaic
from linumpy.mosaic.registration import estimate_transform, registration_threads
from linumpy.settings import available_cpus

TOLERANCE_PX = 0.011


def _grid(text: str) -> tuple[tuple[int, int], int]:
    """``ROWSxCOLS:TILE`` (square tiles of TILE pixels)."""
    try:
        grid, tile = text.split(":")
        rows, cols = (int(n) for n in grid.split("x"))
        return (rows, cols), int(tile)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected ROWSxCOLS:TILE, e.g. 6x6:512"
        ) from None


def _build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--grid",
        nargs="+",
        type=_grid,
        default=[_grid("6x6:512"), _grid("8x8:256")],
        help="Grids as ROWSxCOLS:TILE [6x6:512 8x8:256].",
    )
    parser.add_argument(
        "--threads",
        nargs="+",
        type=int,
        default=[1, 2, 4, 8, 16],
        help="CPU thread counts [1 2 4 8 16].",
    )
    parser.add_argument("--repeats", type=int, default=3, help="Timed runs per row [3].")
    parser.add_argument("--cpu", action="store_true", help="CPU rows only, even with cupy.")
    parser.add_argument("--json", help="Also write the rows here.")
    return parser


def _projection(grid: tuple[int, int], tile: int, xp: Any) -> Any:
    demo = generate_demo_mosaic(grid_shape=grid, tile_shape=(16, tile, tile), xp=xp)
    return demo.mosaic.mean(axis=0, dtype=xp.float32)


def _time(
    run: Callable[[], Any], repeats: int, sync: Callable[[], None]
) -> tuple[float, float, float, Any]:
    start = time.perf_counter()
    result = run()  # warm-up: FFT plans, compiled kernels
    sync()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        sync()
        times.append(time.perf_counter() - start)
    return first, min(times), statistics.median(times), result


def _kept(pairs: list[Any]) -> dict[tuple[Any, Any], np.ndarray]:
    return {(p.first, p.second): np.array(p.displacement) for p in pairs if p.score >= 0.3}


def main(argv: list[str] | None = None) -> int:
    args = _build_arg_parser().parse_args(argv)
    try:
        import cupy
    except ImportError:
        cupy = None
    gpu = cupy is not None and not args.cpu
    rows: list[dict[str, Any]] = []
    wrong = 0
    for grid, tile in args.grid:
        xp = cupy if gpu else np
        image = _projection(grid, tile, xp)
        host = image.get() if gpu else image
        name = f"{grid[0]}x{grid[1]} of {tile}x{tile} px"
        shape = (tile, tile)
        modes = [(f"CPU, {n} threads", host, {"threads": n}) for n in args.threads]
        if gpu:
            modes.append(("GPU", image, {}))
        reference = None
        sync = cupy.cuda.Device().synchronize if gpu else lambda: None
        for mode, array, options in modes:
            run = functools.partial(estimate_transform, array, shape, **options)
            first, best, median, (_, pairs) = _time(run, args.repeats, sync)
            kept = _kept(pairs)
            reference = kept if reference is None else reference
            error = max(
                (float(abs(kept[k] - d).max()) for k, d in reference.items() if k in kept),
                default=0.0,
            )
            wrong += error > TOLERANCE_PX
            rows.append(
                {
                    "grid": name,
                    "mode": mode,
                    "first_s": round(first, 3),
                    "best_s": round(best, 3),
                    "median_s": round(median, 3),
                    "pairs": len(pairs),
                    "max_difference_px": round(error, 4),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    cpus = available_cpus()
    print(
        f"\n{cpus} CPUs; default CPU threads: "
        + ", ".join(
            f"{tile} px {registration_threads((tile, tile), cpus)}" for _, tile in args.grid
        )
    )
    print("| grid | mode | first s | best s | median s | pairs | max difference px |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print("| " + " | ".join(str(v) for v in row.values()) + " |")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=1)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
