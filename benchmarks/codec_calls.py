"""Dev benchmark: the nvCOMP calls behind a zarr read inside ``gpu_zarr_context``.

Writes a 1 GiB OCT-like volume (zstd level 3) in the given layouts, then reads it whole with
zarr inside ``gpu_zarr_context`` and with ``zarr.config.enable_gpu()`` alone, in interleaved
rounds, for each ``--concurrency`` / ``--batch`` / ``--settle-ms`` / ``--in-flight`` /
``--buffers`` configuration (zarr's ``async.concurrency`` and ``codec_pipeline.batch_size``; how
long the codec's call merger waits for more shards' calls, ``CallMerger.settle_seconds``; how many
merged calls it runs at once, ``CallMerger.max_in_flight``; zarr's byte buffers on the host, as in
``gpu_zarr_context``, or on the device: ``enable_gpu()`` with the codec's config). For the last
codec read of each configuration it prints the codec's calls from its debug log: how many, chunks
per call, and the ms the log gives per call.

    python3 benchmarks/codec_calls.py --layouts "sharded 128^3" --concurrency 32 64 --batch 1024
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import tempfile
import time
from pathlib import Path

import cupy
import numpy as np
import zarr
from zarr.codecs import ZstdCodec

from linumpy.bench import Layout, oct_volume, write_volume
from linumpy.gpu import codec_staging, nvcomp_zstd
from linumpy.gpu.zarr_context import gpu_zarr_context

LAYOUTS = {
    "128^3": Layout.cubic(128, 3),
    "64^3": Layout.cubic(64, 3),
    "sharded 128^3": Layout.cubic(128, 3, shards=(128, 512, 512)),
    "sharded 64^3": Layout.cubic(64, 3, shards=(128, 512, 512)),
}


class Calls(logging.Handler):
    """The codec's "decoded ..." debug records."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[float, tuple]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("decoded"):
            self.records.append((time.perf_counter(), record.args))


def codec_context(where: str) -> contextlib.AbstractContextManager[None]:
    """gpu_zarr_context (host byte buffers), or enable_gpu() with the codec's config."""
    if where == "host":
        return gpu_zarr_context()
    assert nvcomp_zstd.register_nvcomp_zstd()
    stack = contextlib.ExitStack()
    stack.enter_context(zarr.config.enable_gpu())
    stack.enter_context(zarr.config.set(nvcomp_zstd.gpu_zstd_config()))
    return stack


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", nargs="*", default=["sharded 128^3"], choices=list(LAYOUTS))
    parser.add_argument("--concurrency", type=int, nargs="*", default=[32])
    parser.add_argument("--batch", type=int, nargs="*", default=[1024])
    parser.add_argument("--settle-ms", type=float, nargs="*", default=[0.0])
    parser.add_argument("--piece-mib", type=int, help="codec_staging.PIECE_BYTES in MiB")
    parser.add_argument("--copy-threads", type=int, help="codec_staging.COPY_THREADS")
    parser.add_argument(
        "--busy-settle-ms",
        type=float,
        default=None,
        help="CallMerger.busy_settle_seconds, in ms (default: the codec's)",
    )
    parser.add_argument("--in-flight", type=int, nargs="*", default=[1])
    parser.add_argument(
        "--buffers",
        nargs="*",
        default=["host"],
        choices=["host", "device"],
        help="zarr's byte buffers: host (gpu_zarr_context) or device (enable_gpu() + the codec)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    if args.piece_mib is not None:
        codec_staging.PIECE_BYTES = args.piece_mib * 2**20
    if args.copy_threads is not None:
        codec_staging.COPY_THREADS = args.copy_threads
    if args.busy_settle_ms is not None:
        nvcomp_zstd._DECODES.busy_settle_seconds = args.busy_settle_ms / 1e3
    calls = Calls()
    logger = logging.getLogger("linumpy.gpu.codec_batches")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(calls)
    volume = oct_volume((512, 1024, 1024))
    nbytes = volume.nbytes
    table = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as folder:
        for name in args.layouts:
            path = Path(folder) / f"{name.replace(' ', '_').replace('^', '')}.zarr"
            write_volume(path, volume, LAYOUTS[name], ZstdCodec(level=3))
            configs = [
                (c, b, ms, k, where)
                for c in args.concurrency
                for b in args.batch
                for ms in args.settle_ms
                for k in args.in_flight
                for where in args.buffers
            ]
            times: dict[object, list[float]] = {key: [] for key in [*configs, "enable_gpu"]}
            last: dict[object, list[tuple[float, tuple]]] = {}
            for _ in range(args.rounds + 1):  # the first round warms up
                for config in configs:
                    concurrency, batch, settle, in_flight, where = config
                    settings = {"async.concurrency": concurrency}
                    settings["codec_pipeline.batch_size"] = batch
                    nvcomp_zstd._DECODES.settle_seconds = settle / 1e3
                    nvcomp_zstd._DECODES.max_in_flight = in_flight
                    with codec_context(where), zarr.config.set(settings):
                        calls.records.clear()
                        start = time.perf_counter()
                        out = zarr.open_array(path, mode="r")[...]
                        cupy.cuda.Device().synchronize()
                        times[config].append(time.perf_counter() - start)
                        last[config] = [(t - start, a) for t, a in calls.records]
                    assert np.array_equal(cupy.asnumpy(out), volume)
                    del out
                with zarr.config.enable_gpu():
                    start = time.perf_counter()
                    out = zarr.open_array(path, mode="r")[...]
                    cupy.cuda.Device().synchronize()
                    times["enable_gpu"].append(time.perf_counter() - start)
                    del out
            base = statistics.median(times["enable_gpu"][1:])
            for key in configs:
                seconds = statistics.median(times[key][1:])
                records = last[key]
                chunks = [a[0] for _, a in records]
                print(f"\n{name}, concurrency {key[0]}, batch {key[1]}, settle {key[2]} ms, "
                      f"in flight {key[3]}, {key[4]} buffers: {len(records)} calls")  # fmt: skip
                for at, a in records:
                    print(f"  at {at * 1e3:7.1f} ms: {a[0]} chunks; " + ", ".join(
                        f"{v:.1f}" for v in a[2:]) + " ms (decode)")  # fmt: skip
                table.append((name, key, nbytes / seconds / 1e9, nbytes / base / 1e9, chunks))
    print(
        "\n| layout | (concurrency, batch, settle ms, in flight, buffers) | codec GB/s "
        "| enable_gpu GB/s | ratio |",
        end="",
    )
    print(" calls |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for name, key, codec, base, chunks in table:
        ratio = codec / base
        print(f"| {name} | {key} | {codec:.2f} | {base:.2f} | {ratio:.2f}x | {len(chunks)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
