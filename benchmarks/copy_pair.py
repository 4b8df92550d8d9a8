"""Dev benchmark: host<->device copies on one GPU alone and on two GPUs at once (issue 11).

One process per GPU copies a pinned 512 MiB buffer to its device and back ``--repeat`` times,
first GPU 0 alone, then GPU 1 alone, then both together (started on a barrier), then the same
with a host memory copy (numpy, ``--threads`` threads) running throughout: if two GPUs copy slower
together than alone, they share the link or host memory bandwidth that a stitch's reads and
writes need. Prints a table last.

    python3 benchmarks/copy_pair.py
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import threading
import time
from concurrent.futures import ThreadPoolExecutor

MIB = 2**20


def _copies(device: int, nbytes: int, repeat: int, barrier, results) -> None:  # noqa: ANN001
    import cupy
    import numpy as np

    with cupy.cuda.Device(device):
        memory = cupy.cuda.alloc_pinned_memory(nbytes)
        host = np.frombuffer(memory, dtype=np.uint8, count=nbytes)
        host[:] = 1
        dev = cupy.empty(nbytes, dtype=np.uint8)
        stream = cupy.cuda.Stream(non_blocking=True)
        runtime = cupy.cuda.runtime
        to_device = (host.ctypes.data, dev.data.ptr, runtime.memcpyHostToDevice)
        to_host = (dev.data.ptr, host.ctypes.data, runtime.memcpyDeviceToHost)
        for direction, (src, dst, kind) in (("h2d", to_device), ("d2h", to_host)):
            runtime.memcpyAsync(dst, src, nbytes, kind, stream.ptr)  # warm-up
            stream.synchronize()
            barrier.wait()
            started = time.perf_counter()
            for _ in range(repeat):
                runtime.memcpyAsync(dst, src, nbytes, kind, stream.ptr)
            stream.synchronize()
            results[(device, direction)] = nbytes * repeat / (time.perf_counter() - started) / 1e9


def _host_copy(nbytes: int, threads: int, stop: threading.Event) -> float:
    """Copy host memory in ``threads`` threads until ``stop``; return GB/s."""
    import numpy as np

    parts = [(np.ones(nbytes // threads, np.uint8), np.empty(nbytes // threads, np.uint8))]
    parts *= threads
    done = 0
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        while not stop.is_set():
            list(pool.map(lambda p: np.copyto(p[1], p[0]), parts))
            done += nbytes
    return done / (time.perf_counter() - started) / 1e9


def _run(devices: list[int], nbytes: int, repeat: int, host_threads: int) -> dict:
    manager = mp.Manager()
    results = manager.dict()
    barrier = manager.Barrier(len(devices))
    context = mp.get_context("spawn")
    procs = [
        context.Process(target=_copies, args=(d, nbytes, repeat, barrier, results)) for d in devices
    ]
    stop = threading.Event()
    with ThreadPoolExecutor(1) as beside:
        host = beside.submit(_host_copy, 256 * MIB, host_threads, stop) if host_threads else None
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
        stop.set()
        out = dict(results)
        if host is not None:
            out["host"] = host.result()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=8)
    parser.add_argument("--threads", type=int, default=16, help="host copy threads beside")
    args = parser.parse_args()
    nbytes = args.mib * MIB
    rows = []
    for label, devices, threads in (
        ("GPU 0 alone", [0], 0),
        ("GPU 1 alone", [1], 0),
        ("both GPUs", [0, 1], 0),
        ("GPU 0 + host copy", [0], args.threads),
        ("both GPUs + host copy", [0, 1], args.threads),
    ):
        result = _run(devices, nbytes, args.repeat, threads)
        rows.append((label, result))
        print(label, result, flush=True)
    print("\n| run | GPU 0 h2d | GPU 0 d2h | GPU 1 h2d | GPU 1 d2h | host copy GB/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for label, r in rows:
        cells = [f"{r[(d, k)]:.1f}" if (d, k) in r else "" for d in (0, 1) for k in ("h2d", "d2h")]
        host = f"{r['host']:.1f}" if "host" in r else ""
        print(f"| {label} | {' | '.join(cells)} | {host} |")


if __name__ == "__main__":
    main()
