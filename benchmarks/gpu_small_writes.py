"""Where nvCOMP beats the host for writing a device array: ``write_array`` of cupy blocks of
several sizes, encoded on the GPU against copied to the host and encoded by libzstd threads.

Below ``gpu_encode_min_bytes()`` the write engine takes the host path. Each size is an OCT-like
float32 block of 16 planes (the shape of a stitch's 2x mean) written into a new array in
linumpy's default layout, by one thread and by two at once (a stitch writes two blocks at a
time), with checksums, both paths interleaved, ``--repeats`` times after one untimed write of
each. Prints a Markdown table (median seconds per block and GB/s of volume) with the date,
machine and versions; ``--json`` also writes the rows.

    python benchmarks/gpu_small_writes.py /tmp/small-writes --mib 4 16 64 256 --repeats 5
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from linumpy.bench.report import machine_info
from linumpy.bench.volume import oct_volume
from linumpy.io import OmeZarrWriter
from linumpy.io.engine.write import encode_min_bytes, write_array

PATHS = {"GPU (nvCOMP)": 1, "host (libzstd)": 1 << 60}


def _shape(mib: int) -> tuple[int, int, int]:
    side = max(32, int(round((mib * 2**20 / (16 * 4)) ** 0.5 / 32)) * 32)
    return (16, side, side)


def _target(folder: Path, name: str, shape: tuple[int, int, int]) -> Any:
    path = folder / f"{name}.ome.zarr"
    shutil.rmtree(path, ignore_errors=True)
    return OmeZarrWriter(path, shape, "float32", voxel_size=(1, 1, 1), n_levels=1).arrays[0]


def _write_once(folder: Path, blocks: list[Any], min_bytes: int, tag: str) -> float:
    """Seconds to write every block (each into its own new array), all at once."""
    import cupy

    arrays = [_target(folder, f"{tag}-{i}", b.shape) for i, b in enumerate(blocks)]
    cupy.cuda.runtime.deviceSynchronize()
    with encode_min_bytes(min_bytes), ThreadPoolExecutor(len(blocks)) as pool:
        started = time.perf_counter()
        list(pool.map(write_array, arrays, blocks))
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--mib", type=int, nargs="+", default=[4, 16, 32, 64, 128, 256])
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, help="Also write the rows to this file.")
    args = parser.parse_args()
    import cupy

    args.out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for mib in args.mib:
        shape = _shape(mib)
        for writers in args.writers:
            blocks = [cupy.asarray(oct_volume(shape, "float32", seed=s)) for s in range(writers)]
            times: dict[str, list[float]] = {name: [] for name in PATHS}
            for repeat in range(args.repeats + 1):
                for name, min_bytes in PATHS.items():
                    seconds = _write_once(args.out_dir, blocks, min_bytes, f"{mib}-{writers}")
                    if repeat:  # the first of each is untimed
                        times[name].append(seconds)
            nbytes = sum(int(b.nbytes) for b in blocks)
            for name, values in times.items():
                median = statistics.median(values)
                rows.append(
                    {
                        "shape": list(shape),
                        "mib": round(nbytes / writers / 2**20, 1),
                        "writers": writers,
                        "path": name,
                        "seconds": median,
                        "gbps": nbytes / median / 1e9,
                        "runs": values,
                    }
                )
            del blocks
    info = machine_info(True)
    print(
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} CPUs, {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}, "
        f"cupy {cupy.__version__}, "
        + ", ".join(f"{k} {v}" for k, v in info.items() if k != "command")
    )
    print(f"`{info['command']}`, median of {args.repeats}\n")
    print("| block (MiB) | shape | writers at once | path | s | GB/s |")
    print("| ---: | --- | ---: | --- | ---: | ---: |")
    for row in rows:
        print(
            f"| {row['mib']} | {'x'.join(map(str, row['shape']))} | {row['writers']} "
            f"| {row['path']} | {row['seconds']:.4f} | {row['gbps']:.2f} |"
        )
    if args.json:
        args.json.write_text(json.dumps({"info": info, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
