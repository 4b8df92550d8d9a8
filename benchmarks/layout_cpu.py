#!/usr/bin/env python3
"""The default write layout on the CPU: steps at the speed of their reads, and linum-rechunk
against its read and write ceilings.

Writes a demo mosaic grid (``--grid`` tiles of ``--tile-shape`` uint16, checksums on, the
default) in two layouts: one chunk per tile (``tiled``, what acquisition software writes) and
the default (``sharded``: one tile per shard of ~1 MiB inner chunks). Then, in interleaved
rounds: ``read_volume`` of the whole grid and ``average_intensity_projection`` of each copy (the
projection's target: at most 1.2x the read of the same copy, and the sharded copy's projection
no slower than the tiled one's), and ``rechunk`` of the tiled copy into the default layout
against the same round's read ceiling (``read_volume`` of the tiled copy) plus write ceiling
(the grid, in memory, written in the default layout by ``OmeZarrWriter``): the target is
``(read + write) / rechunk >= 0.8``. With ``--layouts`` it also times reads and writes of a
``--mib`` volume in 128^3 chunks against the default layout (uint16 and float32), and with
``--files`` the cost of creating and deleting small files (the NGFF 0.4 warning's threshold).

Prints medians and best rounds as a Markdown table; ``--json FILE`` writes the figures.
Development tool (not installed): ``python benchmarks/layout_cpu.py --rounds 9``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np


def _time(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _rounds(cases: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Each case once per round, in the same order (a warm-up round first, not counted)."""
    for run in cases.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, run in cases.items():
            times[name].append(_time(run))
    return times


def mosaic_rows(folder: Path, grid: int, tile: tuple[int, int, int], rounds: int) -> list[dict]:
    from linumpy.io import OmeZarrWriter, read_volume
    from linumpy.io.rechunk import rechunk
    from linumpy.mosaic.demo import make_demo_data
    from linumpy.mosaic.pipeline import average_intensity_projection

    tiled, sharded = folder / "tiled.ome.zarr", folder / "sharded.ome.zarr"
    demo = make_demo_data(tiled, grid_shape=(grid, grid), tile_shape=tile, shards=None)
    make_demo_data(sharded, grid_shape=(grid, grid), tile_shape=tile)
    volume = demo.mosaic[...]  # make_demo_data returns the written array: read it once
    out = folder / "rechunked.ome.zarr"
    written = folder / "written.ome.zarr"

    def write() -> None:
        with OmeZarrWriter(
            written, volume.shape, volume.dtype, voxel_size=(1, 1, 1), overwrite=True
        ) as writer:
            writer[...] = volume

    cases = {
        "read tiled": lambda: read_volume(tiled),
        "read sharded": lambda: read_volume(sharded),
        "projection tiled": lambda: average_intensity_projection(tiled),
        "projection sharded": lambda: average_intensity_projection(sharded),
        "write default layout": write,
        "rechunk tiled -> default": lambda: rechunk(tiled, out, overwrite=True),
    }
    times = _rounds(cases, rounds)
    gb = volume.nbytes / 1e9
    rows = [
        {"what": name, "median_s": statistics.median(t), "best_s": min(t), "gb": gb}
        for name, t in times.items()
    ]
    med = {r["what"]: r["median_s"] for r in rows}
    ceiling = [r + w for r, w in zip(times["read tiled"], times["write default layout"])]
    ratio = [c / t for c, t in zip(ceiling, times["rechunk tiled -> default"])]
    rows += [
        {
            "what": "projection / read, tiled",
            "ratio": med["projection tiled"] / med["read tiled"],
        },
        {
            "what": "projection / read, sharded",
            "ratio": med["projection sharded"] / med["read sharded"],
        },
        {
            "what": "projection sharded / projection tiled",
            "ratio": med["projection sharded"] / med["projection tiled"],
        },
        {
            "what": "(read + write) / rechunk, per round",
            "ratio": statistics.median(ratio),
            "best": max(ratio),
        },
    ]
    return rows


def layout_rows(folder: Path, mib: int, rounds: int) -> list[dict]:
    from linumpy.io import read_volume, save_omezarr

    rows = []
    for dtype in ("uint16", "float32"):
        itemsize = np.dtype(dtype).itemsize
        side = 512
        depth = max(1, mib * 2**20 // (side * side * itemsize))
        rng = np.random.default_rng(0)
        volume = (rng.gamma(2.0, 400.0, (depth, side, side))).astype(dtype)  # speckle-like
        layouts = {
            "128^3 chunks": {"chunks": (128, 128, 128), "shards": None},
            "default": {},
        }
        cases = {}
        for name, options in layouts.items():
            path = folder / f"{dtype}-{name.split()[0]}.ome.zarr"

            def write(
                path: Path = path, options: dict = options, volume: np.ndarray = volume
            ) -> None:
                save_omezarr(volume, path, voxel_size=(1, 1, 1), overwrite=True, **options)

            write()
            cases[f"{dtype} write {name}"] = write
            cases[f"{dtype} read {name}"] = lambda path=path: read_volume(path)
        for what, t in _rounds(cases, rounds).items():
            rows.append(
                {
                    "what": what,
                    "median_s": statistics.median(t),
                    "best_s": min(t),
                    "gb": volume.nbytes / 1e9,
                }
            )
    return rows


def file_rows(folder: Path, n: int = 20000) -> list[dict]:
    root = folder / "files"
    root.mkdir()
    data = b"x" * 512
    start = time.perf_counter()
    for i in range(n):
        if i % 100 == 0:
            (root / str(i // 100)).mkdir()
        (root / str(i // 100) / str(i % 100)).write_bytes(data)
    create = time.perf_counter() - start
    start = time.perf_counter()
    shutil.rmtree(root)
    delete = time.perf_counter() - start
    return [
        {"what": "create and write a 512 B file", "us_per_file": create / n * 1e6},
        {"what": "delete it (rmtree)", "us_per_file": delete / n * 1e6},
    ]


def _table(rows: list[dict]) -> str:
    lines = [
        "| what | median s | best s | GB/s (median) | ratio |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if "us_per_file" in r:
            lines.append(f"| {r['what']} | | | | {r['us_per_file']:.1f} us per file |")
        elif "ratio" in r:
            best = f" (best round {r['best']:.2f})" if "best" in r else ""
            lines.append(f"| {r['what']} | | | | {r['ratio']:.2f}{best} |")
        else:
            speed = r["gb"] / r["median_s"]
            lines.append(
                f"| {r['what']} | {r['median_s']:.3f} | {r['best_s']:.3f} | {speed:.2f} | |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", type=int, default=4, help="Tiles along y and x [4].")
    parser.add_argument(
        "--tile-shape", type=int, nargs=3, default=(96, 256, 256), help="[96 256 256]"
    )
    parser.add_argument("--rounds", type=int, default=7, help="Timed rounds [7].")
    parser.add_argument("--layouts", action="store_true", help="Also 128^3 against the default.")
    parser.add_argument("--mib", type=int, default=256, help="Volume of --layouts [256].")
    parser.add_argument("--files", action="store_true", help="Also the cost of small files.")
    parser.add_argument("--json", help="Write the figures to this file.")
    parser.add_argument("--dir", help="Work in this folder (default: a temporary one).")
    args = parser.parse_args(argv)
    import zarr

    import linumpy

    folder = Path(args.dir or tempfile.mkdtemp(prefix="layout-cpu-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        rows = mosaic_rows(folder, args.grid, tuple(args.tile_shape), args.rounds)
        if args.layouts:
            rows += layout_rows(folder, args.mib, args.rounds)
        if args.files:
            rows += file_rows(folder)
    finally:
        if not args.dir:
            shutil.rmtree(folder, ignore_errors=True)
    header = (
        f"{time.strftime('%Y-%m-%d')}, {platform.node()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, zarr {zarr.__version__}, linumpy {linumpy.__version__}; "
        f"{args.grid}x{args.grid} tiles of {tuple(args.tile_shape)} uint16, {args.rounds} rounds"
    )
    print(header)
    print(_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"setup": header, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
