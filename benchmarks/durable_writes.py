"""What durable writes cost: save_omezarr over an existing image with the flush off, with one
``syncfs`` (the default on Linux) and with an ``fsync`` per file and folder.

Each row writes the same volume (uint16, values 0-4000, compressible as OCT data is about) in one
layout, ``--repeats`` times per mode, modes interleaved; the page cache is flushed (``os.sync``)
before every timed write so that no mode pays for another's dirty pages. Prints a Markdown table
(median seconds and GB/s of volume, and the flush's share) with the date, machine and versions.

    python benchmarks/durable_writes.py /tmp/durable --size-mib 256 --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import shutil
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import zarr

import linumpy
from linumpy import settings
from linumpy.io import durable, save_omezarr

LAYOUTS = {
    "64³ chunks": {"chunks": (64, 64, 64), "shards": None},
    "32³ chunks": {"chunks": (32, 32, 32), "shards": None},
    "128³ shards of 32³": {"chunks": (32, 32, 32), "shards": (128, 128, 128)},
}
MODES = ("off", "syncfs", "fsync")


@contextlib.contextmanager
def _flush_mode(mode: str) -> Iterator[None]:
    """Writes flushed as ``mode`` says: ``"fsync"`` as on a system without ``syncfs``."""
    syncfs = durable._syncfs
    if mode == "fsync":
        durable._syncfs = lambda path: False
    try:
        with settings.set(durable=mode != "off"):
            yield
    finally:
        durable._syncfs = syncfs


def _write(data: np.ndarray, target: Path, layout: dict, mode: str) -> float:
    os.sync()
    with _flush_mode(mode):
        started = time.perf_counter()
        save_omezarr(data, target, voxel_size=(1, 1, 1), overwrite=True, **layout)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    side = int(round((args.size_mib * 2**20 / 2) ** (1 / 3) / 32)) * 32
    data = np.random.default_rng(0).integers(0, 4000, (side, side, side), dtype=np.uint16)
    print(
        f"{datetime.date.today()}, {platform.node()}, {os.cpu_count()} CPUs, "
        f"{platform.platform()}; linumpy {linumpy.__version__}, zarr {zarr.__version__}, "
        f"numpy {np.__version__}; volume {data.shape} uint16 ({data.nbytes / 2**20:.0f} MiB), "
        f"median of {args.repeats}"
    )
    print(
        "\n| layout | files | durable off (s) | syncfs (s) | fsync per file (s) | cost of syncfs |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, layout in LAYOUTS.items():
        target = args.out_dir / "image.ome.zarr"
        save_omezarr(data, target, voxel_size=(1, 1, 1), overwrite=True, **layout)
        files = sum(len(f) for _, _, f in os.walk(target))
        times: dict[str, list[float]] = {mode: [] for mode in MODES}
        for _ in range(args.repeats):
            for mode in MODES:
                times[mode].append(_write(data, target, layout, mode))
        med = {mode: statistics.median(t) for mode, t in times.items()}
        cost = med["syncfs"] / med["off"] - 1
        cells = " | ".join(f"{med[m]:.2f} ({data.nbytes / med[m] / 1e9:.2f} GB/s)" for m in MODES)
        print(f"| {name} | {files} | {cells} | {cost:+.0%} |")
        shutil.rmtree(target)


if __name__ == "__main__":
    main()
