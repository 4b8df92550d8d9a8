#!/usr/bin/env python3
"""How the fast path's batch size (bounded by pinned and scratch memory) changes its speed.

nvCOMP decodes one zstd frame per multiprocessor, so one call takes about as long for 16 chunks
as for a full wave (notes-gpu-io.md); fewer, larger batches should help large chunks. Reads the
1 GiB OCT-like benchmark volume (128^3 and 64^3 chunks) with several memory settings and prints
GB/s (median of 3 after a warm-up), batches and memory used.

    python docs/dev/bench_batches.py [--workdir DIR]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import cupy
import numpy as np
import zarr

from linumpy.cli.linum_benchmark_io import oct_like_volume
from linumpy.gpu.zarr_io import GpuReadSettings, last_read_report, read_zarr_to_gpu

SETTINGS_MIB = [(512, 448), (1024, 640), (1024, 1024), (2048, 2048)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_batches"))
    args = parser.parse_args()
    volume = oct_like_volume((512, 1024, 1024), np.dtype(np.uint16), cupy).get()
    for edge in (128, 64):
        path = args.workdir / f"v{edge}.zarr"
        if not path.exists():
            array = zarr.create_array(
                path,
                shape=volume.shape,
                chunks=(edge,) * 3,
                dtype=volume.dtype,
                compressors=zarr.codecs.ZstdCodec(level=3),
                fill_value=0,
            )
            array[...] = volume
        for pinned, scratch in SETTINGS_MIB:
            settings = GpuReadSettings.from_env(
                pinned_bytes=pinned * 2**20, scratch_bytes=scratch * 2**20
            )
            times = []
            for run in range(4):
                cupy.cuda.runtime.deviceSynchronize()
                start = time.perf_counter()
                out = read_zarr_to_gpu(path, settings=settings)
                cupy.cuda.runtime.deviceSynchronize()
                if run:
                    times.append(time.perf_counter() - start)
                del out
            report = last_read_report()
            cupy.get_default_memory_pool().free_all_blocks()
            print(
                f"chunks {edge}^3 pinned {pinned} MiB scratch {scratch} MiB: "
                f"{volume.nbytes / statistics.median(times) / 1e9:.2f} GB/s, "
                f"{report.n_batches} batches, device beyond output "
                f"{report.device_extra_bytes / 2**20:.0f} MiB, "
                f"pinned {report.pinned_bytes / 2**20:.0f} MiB",
                flush=True,
            )


if __name__ == "__main__":
    main()
