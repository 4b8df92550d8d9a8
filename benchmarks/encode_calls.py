"""Dev: what one nvCOMP zstd encode call costs against its batch size, and two calls at once.

On OCT-like data (``linumpy.bench.oct_volume``) already on the device, per chunk size: one
batched encode of n chunks for several n (median of 3 after a warm-up: queue to stream sync),
with nvCOMP's work-space size; then the whole batch as two calls on two streams at once.

Usage (GPU host)::

    python benchmarks/encode_calls.py
"""

from __future__ import annotations

import ctypes
import statistics
import time

import numpy as np


def measure(volume, chunk: int) -> None:
    """Print the lines of one chunk size."""
    import cupy

    from linumpy.gpu import nvcomp
    from linumpy.io.engine.write_plan import gather_chunks

    rows = gather_chunks(cupy, volume, (chunk,) * 3, 0).view(np.uint8)
    total, nbytes = rows.shape
    capacity = -(-nvcomp.max_encoded_size(nbytes) // 8) * 8
    out = cupy.empty(total * capacity, np.uint8)
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]

    def call(first: int, n: int, stream: cupy.cuda.Stream) -> nvcomp.PendingStatuses:
        index = np.arange(first, first + n, dtype=np.int64)
        return nvcomp.encode(
            int(rows.data.ptr) + index * nbytes,
            np.full(n, nbytes, np.int64),
            int(out.data.ptr) + index * capacity,
            stream=stream,
        )

    def timed(parts: list[tuple[int, int]]) -> float:
        seconds = []
        for _ in range(4):
            cupy.cuda.Device().synchronize()
            start = time.perf_counter()
            pending = [call(a, n, streams[i % 2]) for i, (a, n) in enumerate(parts)]
            for stream in streams:
                stream.synchronize()
            seconds.append(time.perf_counter() - start)
            for p in pending:
                p.check(None)
        return statistics.median(seconds[1:])

    for n in (1, total):  # where the time of one call goes: host side, then the device's wait
        library, opts, needed = nvcomp._library(), nvcomp._CompressOpts(), ctypes.c_size_t()
        library.nvcompBatchedZstdCompressGetTempSize(
            n, nbytes, opts, ctypes.byref(needed), n * nbytes, streams[0].ptr
        )
        for _ in range(3):
            cupy.cuda.Device().synchronize()
            start = time.perf_counter()
            pending = call(0, n, streams[0])
            queued = time.perf_counter()
            streams[0].synchronize()
            done = time.perf_counter()
            pending.check(None)
        print(
            f"{chunk}^3, {n} chunk(s): work space {needed.value / 2**20:.1f} MiB; call returns "
            f"after {(queued - start) * 1e3:.1f} ms, stream done {(done - queued) * 1e3:.1f} ms "
            "later",
            flush=True,
        )
    for n in sorted({1, 16, 64, 256, 1024, total} & set(range(1, total + 1))):
        s = timed([(0, n)])
        print(
            f"{chunk}^3 chunks ({nbytes >> 10} KiB): one call of {n:5}: {s * 1e3:7.1f} ms, "
            f"{n * nbytes / s / 1e9:6.2f} GB/s",
            flush=True,
        )
    half = total // 2
    s = timed([(0, half), (half, total - half)])
    print(
        f"{chunk}^3: two calls of {half} on two streams at once: {s * 1e3:7.1f} ms, "
        f"{total * nbytes / s / 1e9:6.2f} GB/s",
        flush=True,
    )


def main() -> None:
    """Print one line per (chunk size, batch size)."""
    import cupy

    from linumpy.bench import oct_volume

    volume = cupy.asarray(oct_volume((512, 1024, 1024)))
    for chunk in (64, 128):
        measure(volume, chunk)


if __name__ == "__main__":
    main()
