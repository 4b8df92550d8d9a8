#!/usr/bin/env python3
"""Peak memory of out-of-core stitching and projection against ``--memory-limit``.

Writes a synthetic 3D mosaic grid at least ``--factor`` times the memory limit, then runs
``linum-stitch-3d`` and ``linum-aip`` on it with ``--memory-limit``, each in its own subprocess,
and compares each run's peak resident memory (``VmHWM``) with that of a subprocess that only
imports what the script imports. The issue's target: the difference stays within twice the
limit. Prints a table and exits 1 when a run misses the target.

Development tool (not installed): ``python benchmarks/out_of_core.py --memory-limit 64MiB``.
``--json FILE`` also writes the figures; the test suite runs it with small sizes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEAK = (
    "import re\n"
    "def _peak():\n"
    "    status = open('/proc/self/status').read()\n"
    "    return int(re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1)) * 1024\n"
)

#: What the scripts import before they start working: the baseline's imports.
IMPORTS = (
    "import dask.array, numpy, zarr, linumpy.io, linumpy.parallel, linumpy.mosaic.pipeline, "
    "linumpy.scripts.linum_stitch_3d, linumpy.scripts.linum_aip"
)


def make_mosaic(path: Path, volume_bytes: int, tile: int, grid: int, depth_chunk: int) -> dict:
    """Write a uint16 mosaic grid of ``grid x grid`` tiles of ``tile x tile`` pixels, deep
    enough to hold ``volume_bytes``, one chunk per tile, and its tile transform (10% overlap)."""
    import numpy as np

    from linumpy.io import OmeZarrWriter
    from linumpy.mosaic.attrs import write_linumpy_attrs
    from linumpy.mosaic.transform import TileTransform

    plane = (grid * tile) ** 2 * 2
    depth = math.ceil(volume_bytes / plane / depth_chunk) * depth_chunk
    shape = (depth, grid * tile, grid * tile)
    writer = OmeZarrWriter(
        path / "mosaic.ome.zarr",
        shape,
        np.uint16,
        voxel_size=(1, 1, 1),
        chunks=(depth_chunk, tile, tile),
    )
    rng = np.random.default_rng(0)
    for z0 in range(0, depth, depth_chunk):
        slab = rng.integers(100, 1100, size=(depth_chunk, *shape[1:]), dtype=np.uint16)
        writer.array[z0 : z0 + depth_chunk] = slab
    step = 0.9 * tile
    write_linumpy_attrs(
        path / "mosaic.ome.zarr",
        {"mosaic": {"tile_shape": [tile, tile], "grid_shape": [grid, grid]}},
    )
    TileTransform([[step, 0.0], [0.0, step]], (0.0, 0.0), (tile, tile), (grid, grid)).save(
        path / "transform.json"
    )
    return {"shape": shape, "bytes": math.prod(shape) * 2}


def peak_of(code: str) -> tuple[int, float]:
    """Peak resident memory (bytes) and wall time of ``code`` run in a fresh interpreter."""
    program = PEAK + code + "\nprint('PEAK', _peak())\n"
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"subprocess failed ({done.returncode}):\n{done.stderr[-3000:]}")
    line = [x for x in done.stdout.splitlines() if x.startswith("PEAK ")][-1]
    return int(line.split()[1]), elapsed


def run_script(module: str, args: list[str]) -> str:
    return f"{IMPORTS}\nfrom {module} import main\nmain({args!r})\n"


def measure(folder: Path, limit: str, factor: float, tile: int, grid: int, chunk: int) -> dict:
    from linumpy.parallel import parse_size

    limit_bytes = parse_size(limit)
    made = make_mosaic(folder, int(factor * limit_bytes), tile, grid, chunk)
    baseline, _ = peak_of(IMPORTS)
    mosaic = os.fspath(folder / "mosaic.ome.zarr")
    stitched = os.fspath(folder / "stitched.ome.zarr")
    chunks = ["--chunks", str(chunk), "128", "128"]
    runs = {
        "stitch": run_script(
            "linumpy.scripts.linum_stitch_3d",
            [mosaic, os.fspath(folder / "transform.json"), stitched, "--memory-limit", limit]
            + chunks
            + ["--dtype", "float32"],  # the projection's input: twice the mosaic's bytes
        ),
        "aip": run_script(
            "linumpy.scripts.linum_aip",
            [stitched, os.fspath(folder / "aip.ome.zarr"), "--memory-limit", limit],
        ),
    }
    from linumpy.io import open_array

    rows = []
    for name, code in runs.items():
        peak, seconds = peak_of(code)
        source = mosaic if name == "stitch" else stitched
        array = open_array(source)
        rows.append(
            {
                "run": name,
                "input_bytes": math.prod(array.shape) * array.dtype.itemsize,
                "peak_bytes": peak,
                "above_baseline": peak - baseline,
                "seconds": round(seconds, 2),
                "ok": peak - baseline <= 2 * limit_bytes,
            }
        )
    return {
        "memory_limit": limit_bytes,
        "baseline_bytes": baseline,
        "mosaic": made,
        "runs": rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory-limit", default="64MiB", help="[%(default)s]")
    parser.add_argument("--factor", type=float, default=4.0, help="volume / limit [%(default)s]")
    parser.add_argument("--tile", type=int, default=256, help="tile size [%(default)s]")
    parser.add_argument("--grid", type=int, default=4, help="tiles per side [%(default)s]")
    parser.add_argument("--chunk-depth", type=int, default=16, help="[%(default)s]")
    parser.add_argument("--folder", help="where to write (a temporary folder by default)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        result = measure(
            Path(folder), args.memory_limit, args.factor, args.tile, args.grid, args.chunk_depth
        )
    mib = 2**20
    print(
        f"memory limit {result['memory_limit'] / mib:.0f} MiB, "
        f"baseline (interpreter + imports) {result['baseline_bytes'] / mib:.0f} MiB"
    )
    print("| run | input MiB | peak MiB | above baseline MiB | limit x2 MiB | s | ok |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in result["runs"]:
        print(
            f"| {row['run']} | {row['input_bytes'] / mib:.0f} | {row['peak_bytes'] / mib:.0f} "
            f"| {row['above_baseline'] / mib:.0f} | {2 * result['memory_limit'] / mib:.0f} "
            f"| {row['seconds']} | {'yes' if row['ok'] else 'NO'} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if all(row["ok"] for row in result["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
