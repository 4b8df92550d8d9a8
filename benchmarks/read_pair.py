"""Dev benchmark: GPU reads by one process alone against two processes at once, one per GPU.

What the host gives two GPU readers together (page-cache reads into pinned memory, the cores
that check and submit), without dask: each process reads the same 1 GiB sharded 64^3 volume with
``read_volume(gpu=True)`` ``--reads`` times after a warm-up, all processes starting together; the
aggregate is the bytes of all reads over the span from the first start to the last end. Rows for
each ``--threads`` value (``io_threads`` per process; 0 = the default, the CPUs).

    python3 benchmarks/read_pair.py --threads 0 16 8
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import tempfile
import time
from pathlib import Path

GIB = 2**30


def _reader(path: str, device: int, threads: int, reads: int, barrier, results) -> None:
    import cupy

    from linumpy.io import read_volume

    cupy.cuda.Device(device).use()
    settings = {"io_threads": threads} if threads else None
    read_volume(path, gpu=True, settings=settings)  # warm-up: pinned buffers, nvCOMP
    cupy.cuda.Device(device).synchronize()
    barrier.wait()
    start = time.perf_counter()
    for _ in range(reads):
        volume = read_volume(path, gpu=True, settings=settings)
        del volume
    cupy.cuda.Device(device).synchronize()
    results.put((device, start, time.perf_counter()))


def measure(path: str, nbytes: int, devices: list[int], threads: int, reads: int) -> float:
    """Aggregate GB/s of ``reads`` reads per process, one process per device, started together."""
    context = mp.get_context("spawn")
    barrier, results = context.Barrier(len(devices)), context.Queue()
    procs = [
        context.Process(target=_reader, args=(path, d, threads, reads, barrier, results))
        for d in devices
    ]
    for proc in procs:
        proc.start()
    spans = [results.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join()
    # perf_counter is CLOCK_MONOTONIC on Linux: comparable between processes
    first, last = min(s[1] for s in spans), max(s[2] for s in spans)
    return nbytes * reads * len(devices) / (last - first) / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="*", default=[0, 16])
    parser.add_argument("--reads", type=int, default=10)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()

    import numpy as np
    import zarr

    from linumpy.bench import oct_volume

    with tempfile.TemporaryDirectory(dir=args.workdir) as folder:
        path = str(Path(folder) / "v.zarr")
        data = oct_volume((512, 1024, 1024))
        array = zarr.create_array(
            path, shape=data.shape, dtype=data.dtype, chunks=(64, 64, 64), shards=(128, 512, 512)
        )
        array[...] = data
        nbytes = int(np.prod(data.shape)) * data.dtype.itemsize
        rows = []
        for threads in args.threads:
            one = measure(path, nbytes, [0], threads, args.reads)
            two = measure(path, nbytes, [0, 1], threads, args.reads)
            rows.append((threads or "default", one, two))
            print(rows[-1], flush=True)
    print("\n| io_threads per process | 1 process, 1 GPU GB/s | 2 processes, 2 GPUs GB/s | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for threads, one, two in rows:
        print(f"| {threads} | {one:.2f} | {two:.2f} | {two / one:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
