#!/usr/bin/env python3
"""Where the GPU read's time goes: nvCOMP settings, host-side file reads, zarr's own ceiling.

On the 1 GiB OCT-like benchmark volume, printing one line per measurement (median of 3 after a
warm-up):

- default: for 128^3 and 64^3 chunks, the fast path with its phase timings, the host side
  (``plan_read``; sizing with ``os.stat`` then reading, against reading each file into a slot
  of the frame's size bound, with 1 to 16 threads), and for 64^3 nvCOMP's zstd decode of the
  chunks already on the GPU under ``ExecutionPolicy.CONCURRENCY`` (nvCOMP's default) and
  ``LATENCY``, in one call, in calls of 64 and 256 chunks, split over 4 streams, with nvCOMP's
  own allocator and with CuPy's pool;
- ``--host``: the host side only, with the fast path at 2 to 16 ``io_threads``;
- ``--codec``: the codec in zarr (``gpu_zarr_context``, also at ``async.concurrency`` 16, 32
  and 64) against ``zarr.config.enable_gpu()`` alone, and ``enable_gpu()`` reading the same
  array stored without compression (the most any codec in zarr's pipeline can reach), for
  sharded, 128^3 and 64^3 layouts.

    python docs/dev/bench_nvcomp_policy.py [--workdir DIR] [--host | --codec]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import cupy
import numpy as np
import zarr
from nvidia import nvcomp

from linumpy.cli.linum_benchmark_io import oct_like_volume
from linumpy.gpu._fetch import align_up, chunk_sizes, read_into
from linumpy.gpu.zarr_io import (
    GpuReadSettings,
    gpu_zarr_context,
    last_read_report,
    read_zarr_to_gpu,
)
from linumpy.io.plan import plan_read


def timed(run, repeats: int = 3) -> float:
    run()
    cupy.cuda.runtime.deviceSynchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        cupy.cuda.runtime.deviceSynchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def load(path: Path) -> tuple[cupy.ndarray, list[int], list[int], int]:
    plan = plan_read(zarr.open_array(path, mode="r"))
    blobs = [np.fromfile(r.path, dtype=np.uint8) for r in plan.reads if os.path.exists(r.path)]
    offsets, total = [], 0
    for blob in blobs:
        offsets.append(total)
        total += align_up(blob.nbytes)
    host = np.zeros(total, np.uint8)
    for blob, offset in zip(blobs, offsets):
        host[offset : offset + blob.nbytes] = blob
    return cupy.asarray(host), offsets, [b.nbytes for b in blobs], plan.chunk_nbytes


def decode_rows(path: Path, label: str) -> None:
    device, offsets, sizes, chunk = load(path)
    n = len(sizes)
    out = cupy.empty(n * chunk, np.uint8)
    gb = n * chunk / 1e9
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(4)]
    for policy_name in ("CONCURRENCY", "LATENCY"):
        policy = getattr(nvcomp.ExecutionPolicy, policy_name)
        codecs = [
            nvcomp.Codec(
                algorithm="Zstd",
                bitstream_kind=nvcomp.BitstreamKind.RAW,
                cuda_stream=s.ptr,
                execution_policy=policy,
            )
            for s in streams
        ]

        def run(batch: int, parts: int = 1, codecs: list = codecs) -> None:
            per = -(-n // parts)
            for p in range(parts):
                lo, hi = p * per, min(n, (p + 1) * per)
                stream, codec = streams[p], codecs[p]
                for first in range(lo, hi, batch):
                    last = min(hi, first + batch)
                    codec.decode(
                        nvcomp.as_arrays(
                            device, offsets[first:last], sizes[first:last], stream.ptr
                        ),
                        out=nvcomp.as_arrays(
                            out,
                            [k * chunk for k in range(first, last)],
                            [chunk] * (last - first),
                            stream.ptr,
                        ),
                    )
            for s in streams:
                s.synchronize()

        for allocator in ("nvcomp", "cupy"):
            if allocator == "cupy":
                nvcomp.set_device_allocator(lambda nbytes, stream: cupy.cuda.alloc(nbytes))
            for batch, parts in ((n, 1), (64, 1), (256, 1), (-(-n // 4), 4)):
                seconds = timed(lambda b=batch, p=parts: run(b, p))
                print(
                    f"{label} {n} chunks: policy {policy_name:11s} allocator {allocator:6s} "
                    f"batch {batch:5d} streams {parts}: {gb / seconds:6.2f} GB/s "
                    f"({seconds * 1e3:.1f} ms)",
                    flush=True,
                )
            nvcomp.set_device_allocator(None)


def host_rows(path: Path, label: str) -> None:
    plan = plan_read(zarr.open_array(path, mode="r"))
    reads = [r for r in plan.reads if os.path.exists(r.path)]  # missing chunks read as fill
    bound = align_up(plan.chunk_nbytes + plan.chunk_nbytes // 128 + 1024)
    staging = np.empty(len(reads) * bound, np.uint8)
    print(f"{label}: plan_read {timed(lambda: plan_read(zarr.open_array(path))) * 1e3:.1f} ms")
    for threads in (1, 2, 4, 8, 16):
        with ThreadPoolExecutor(threads) as pool:

            def stat_then_read(pool=pool, threads=threads) -> None:
                sizes = chunk_sizes(reads)
                offsets = np.concatenate([[0], np.cumsum([align_up(s) for s in sizes[:-1]])])
                read_into(
                    staging, reads, sizes, offsets, reader="pread", pool=pool, threads=threads
                )

            def slots(pool=pool, threads=threads) -> None:
                view = memoryview(staging)

                def run(group: range) -> list[int]:
                    got = []
                    for i in group:
                        fd = os.open(reads[i].path, os.O_RDONLY)
                        try:
                            got.append(os.preadv(fd, [view[i * bound : (i + 1) * bound]], 0))
                        finally:
                            os.close(fd)
                    return got

                step = -(-len(reads) // threads)
                groups = [range(k, min(len(reads), k + step)) for k in range(0, len(reads), step)]
                list(pool.map(run, groups))

            sizes_s = timed(lambda: chunk_sizes(reads))
            both = timed(stat_then_read)
            slot = timed(slots)
            print(
                f"{label} threads {threads}: stat {sizes_s * 1e3:.1f} ms, stat+read "
                f"{both * 1e3:.1f} ms, slot reads {slot * 1e3:.1f} ms",
                flush=True,
            )


def _write(path: Path, volume: np.ndarray, chunks: int, shards: Any, compressors: Any) -> None:
    if not path.exists():
        array = zarr.create_array(
            path,
            shape=volume.shape,
            chunks=(chunks,) * 3,
            shards=shards,
            dtype=volume.dtype,
            compressors=compressors,
            fill_value=0,
        )
        array[...] = volume


def _read(path: Path, *configs: Any) -> Callable[[], object]:
    def run() -> object:
        with contextlib.ExitStack() as stack:
            for config in configs:
                stack.enter_context(config() if callable(config) else zarr.config.set(config))
            return zarr.open_array(path, mode="r")[...]

    return run


def codec_rows(volume: np.ndarray, workdir: Path) -> None:
    """The codec in zarr (gpu_zarr_context) against enable_gpu() alone, and zarr's pipeline
    reading the same array stored without compression under enable_gpu(): the most any codec
    inside zarr's pipeline can reach."""
    gb = volume.nbytes / 1e9
    layouts = (
        ("sharded 128x512x512", 128, (128, 512, 512)),
        ("128^3", 128, None),
        ("64^3", 64, None),
    )
    for name, chunks, shards in layouts:
        path = workdir / f"codec-{name.split()[0]}.zarr"
        raw = workdir / f"raw-{name.split()[0]}.zarr"
        _write(path, volume, chunks, shards, zarr.codecs.ZstdCodec(level=3))
        _write(raw, volume, chunks, shards, None)
        rates = {
            "gpu_zarr_context": gb / timed(_read(path, gpu_zarr_context)),
            "enable_gpu()": gb / timed(_read(path, zarr.config.enable_gpu)),
            **{
                f"gpu_zarr_context, async.concurrency {n}": gb
                / timed(_read(path, gpu_zarr_context, {"async.concurrency": n}))
                for n in (16, 32, 64)
            },
            "enable_gpu(), uncompressed copy": gb / timed(_read(raw, zarr.config.enable_gpu)),
        }
        ratio = rates["gpu_zarr_context"] / rates["enable_gpu()"]
        listed = ", ".join(f"{k} {v:.2f}" for k, v in rates.items())
        print(f"codec {name}: {listed} GB/s; codec/enable_gpu {ratio:.2f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_policy"))
    parser.add_argument("--codec", action="store_true", help="only the codec-in-zarr rows")
    parser.add_argument(
        "--host", action="store_true", help="only the host-side rows and an io_threads sweep"
    )
    args = parser.parse_args()
    volume = oct_like_volume((512, 1024, 1024), np.dtype(np.uint16), cupy).get()
    if args.codec:
        codec_rows(volume, args.workdir)
        return
    for edge in (128, 64):
        path = args.workdir / f"v{edge}.zarr"
        _write(path, volume, edge, None, zarr.codecs.ZstdCodec(level=3))
        label = f"{edge}^3"
        if args.host:
            for threads in (2, 4, 8, 16):
                settings = GpuReadSettings.from_env(io_threads=threads)
                seconds = timed(lambda s=settings, p=path: read_zarr_to_gpu(p, settings=s))
                phases = {k: round(v * 1e3, 1) for k, v in last_read_report().phases.items()}
                print(
                    f"{label} fast path, io_threads {threads}: "
                    f"{volume.nbytes / 1e9 / seconds:.2f} GB/s, ms {phases}",
                    flush=True,
                )
            host_rows(path, label)
            continue
        for _ in range(3):
            read_zarr_to_gpu(path)
        start = time.perf_counter()
        read_zarr_to_gpu(path)
        cupy.cuda.runtime.deviceSynchronize()
        report = last_read_report()
        print(
            f"{label} fast path now: {volume.nbytes / 1e9 / (time.perf_counter() - start):.2f}"
            f" GB/s, phases {report.phases}",
            flush=True,
        )
        host_rows(path, label)
        if edge == 64:
            decode_rows(path, label)


if __name__ == "__main__":
    main()
