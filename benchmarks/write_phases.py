"""Dev: where a GPU write of the write engine spends its time, against nvCOMP's encode alone.

Per layout, on the benchmark's 1 GiB OCT-like volume (already on the device): ``write_array``
from cupy (linumpy's default chain: zstd with content checksums and crc32c, and without
checksums), with the default ``scratch_bytes`` and with others (how many groups a write makes),
each run into a new array after ``os.sync()`` (untimed), median of 3 after a warm-up, with the
engine's phases (gather, encode, download: GPU work; the rest is file threads and set-up); then
nvCOMP's encode ceiling: one batched encode of every chunk, already gathered, on the device.

Usage (GPU host)::

    python benchmarks/write_phases.py --workdir /tmp/wp
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from pathlib import Path

import numpy as np
import zarr

from linumpy import settings
from linumpy.bench import Layout, oct_volume
from linumpy.bench.rows import _codecs, _create
from linumpy.io.engine.write import write_array

LAYOUTS = {
    "sharded 128^3": Layout.cubic(128, 3, shards=(128, 512, 512)),
    "sharded 64^3": Layout.cubic(64, 3, shards=(128, 512, 512)),
    "64^3": Layout.cubic(64, 3),
}


def encode_ceiling(device_volume, chunk: int) -> float:
    """Seconds of one nvCOMP encode of every chunk (median of 3 after a warm-up)."""
    import cupy

    from linumpy.gpu import nvcomp
    from linumpy.io.engine.write_plan import gather_chunks

    rows = gather_chunks(cupy, device_volume, (chunk,) * 3, 0).view(np.uint8)
    n, nbytes = rows.shape
    capacity = -(-nvcomp.max_encoded_size(nbytes) // 8) * 8
    out = cupy.empty(n * capacity, np.uint8)
    stream = cupy.cuda.get_current_stream()
    seconds = []
    for _ in range(4):
        start = time.perf_counter()
        pending = nvcomp.encode(
            int(rows.data.ptr) + np.arange(n, dtype=np.int64) * nbytes,
            np.full(n, nbytes, np.int64),
            int(out.data.ptr) + np.arange(n, dtype=np.int64) * capacity,
            stream=stream,
        )
        stream.synchronize()
        pending.check([str(i) for i in range(n)])
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds[1:])


def main() -> None:
    """Time the GPU writes and the encode ceiling per layout; print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="/tmp/write_phases")
    parser.add_argument("--scratch-mib", default="2048,512,8192")
    args = parser.parse_args()
    import cupy

    volume = oct_volume((512, 1024, 1024))
    device_volume = cupy.asarray(volume)
    gb = volume.nbytes / 1e9
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    lines = []
    for name, layout in LAYOUTS.items():
        chunk = layout.chunks[0]
        ceiling = encode_ceiling(device_volume, chunk)
        lines.append(f"{name}: nvCOMP encode alone {gb / ceiling:.2f} GB/s ({ceiling:.3f} s)")
        for checksum in (True, False):
            codec = _codecs(zarr.codecs.ZstdCodec, 3, checksum)
            for mib in (int(m) for m in args.scratch_mib.split(",")):
                seconds, phases = [], []
                for run in range(4):
                    target = work / f"{run}.zarr"
                    shutil.rmtree(work / f"{run - 1}.zarr", ignore_errors=True)
                    os.sync()
                    with settings.set(scratch_bytes=mib * 2**20):
                        start = time.perf_counter()
                        report = write_array(_create(target, volume, layout, codec), device_volume)
                        cupy.cuda.get_current_stream().synchronize()
                        seconds.append(time.perf_counter() - start)
                    phases.append(report.phases)
                shutil.rmtree(work / "3.zarr", ignore_errors=True)
                wall = statistics.median(seconds[1:])
                mean = {k: statistics.median(p[k] for p in phases[1:]) for k in phases[-1]}
                cells = ", ".join(f"{k} {v:.3f}" for k, v in mean.items())
                lines.append(
                    f"  checksums {checksum!s:5} scratch {mib:5} MiB: {gb / wall:.2f} GB/s "
                    f"({wall:.3f} s; runs {', '.join(f'{s:.3f}' for s in seconds)}; {cells})"
                )
                print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
