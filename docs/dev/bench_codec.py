"""Benchmark NvcompZstdCodec against zarr's own GPU read path on a 1 GiB OCT-like volume.

A 512 x 1024 x 1024 uint16 volume (exponential speckle under exp(-depth/50) attenuation below a
wavy surface, low-noise background above it: about half background, zstd level-3 ratio about 2.3,
like the volume of ../shared/GPU-FACTS.md) is written with zarr's CPU zstd codec in 128^3 and in
64^3 chunks, then read whole onto the GPU:

- ``enable_gpu``: ``zarr.config.enable_gpu()`` alone (libzstd decode, then a copy per chunk);
- ``nvcomp``: ``enable_gpu()`` plus ``gpu_zstd_config()`` (this codec, nvCOMP batches).

Each figure is the median of 3 timed reads after one warm-up read (page cache warm), in GB/s of
decompressed volume (10^9 bytes); every nvCOMP read is compared with the volume. Also timed:
writing the volume from the GPU with the codec (128^3 chunks). Options sweep the codec's batch
size and zarr's ``async.concurrency`` and log the codec's phase timings. Needs cupy, nvCOMP and a
CUDA device. Run: ``python3 docs/dev/bench_codec.py [--out FILE.json] [--help]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import cupy
import numpy as np
import zarr
from nvidia import nvcomp
from zarr.codecs import ZstdCodec

from linumpy.gpu.nvcomp_zstd import NvcompZstdCodec, gpu_zstd_config, register_nvcomp_zstd

SHAPE = (512, 1024, 1024)
RUNS = 3


def oct_volume(shape: tuple[int, int, int] = SHAPE, seed: int = 0) -> cupy.ndarray:
    """Generate the volume on the GPU: speckle x attenuation below a surface, noise above it."""
    rng = cupy.random.default_rng(seed)
    nz, ny, nx = shape
    y = cupy.arange(ny, dtype=cupy.float32)[:, None]
    x = cupy.arange(nx, dtype=cupy.float32)[None, :]
    surface = nz / 2 + 40 * cupy.sin(y / 97) * cupy.cos(x / 131)  # about half is background
    z = cupy.arange(nz, dtype=cupy.float32)[:, None, None]
    depth = z - surface[None]
    attenuation = cupy.exp(-cupy.maximum(depth, 0) / 50)
    speckle = rng.standard_exponential(shape, dtype=cupy.float32)
    background = 100 + 2 * rng.standard_normal(shape, dtype=cupy.float32)
    volume = cupy.where(depth >= 0, background + 1000 * attenuation * speckle, background)
    return cupy.clip(volume, 0, 65535).astype(cupy.uint16)


def timed(read: Callable[[], cupy.ndarray]) -> tuple[float, cupy.ndarray]:
    cupy.cuda.runtime.deviceSynchronize()
    start = time.perf_counter()
    result = read()
    cupy.cuda.runtime.deviceSynchronize()
    return time.perf_counter() - start, result


def median_rate(read: Callable[[], cupy.ndarray], nbytes: int) -> tuple[float, cupy.ndarray]:
    timed(read)  # warm-up
    times = []
    for _ in range(RUNS):
        seconds, result = timed(read)
        times.append(seconds)
    return nbytes / 1e9 / statistics.median(times), result


def read_whole(
    path: Path, *, codec: bool, batch_size: int | None = None, concurrency: int | None = None
) -> Callable[[], cupy.ndarray]:
    def read() -> cupy.ndarray:
        with contextlib.ExitStack() as stack:
            stack.enter_context(zarr.config.enable_gpu())
            if codec:
                stack.enter_context(zarr.config.set(gpu_zstd_config(batch_size=batch_size)))
            if concurrency is not None:
                stack.enter_context(zarr.config.set({"async.concurrency": concurrency}))
            return zarr.open_array(path, mode="r")[...]

    return read


def _ints(text: str) -> list[int | None]:
    return [None if item == "default" else int(item) for item in text.split(",")]


def main() -> None:
    logging.basicConfig(format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    parser.add_argument(
        "--batch-sizes", type=_ints, default=[None], help="comma-separated, or 'default'"
    )
    parser.add_argument(
        "--concurrency", type=_ints, default=[None], help="zarr async.concurrency values"
    )
    parser.add_argument("--chunk-sizes", type=_ints, default=[128, 64], help="e.g. 128,64")
    parser.add_argument("--phases", action="store_true", help="log the codec's phase timings")
    parser.add_argument(
        "--allocator-ab",
        action="store_true",
        help="also time nvCOMP reads with nvCOMP's device allocator set to CuPy's memory pool",
    )
    parser.add_argument("--no-write", action="store_true", help="skip the GPU write timing")
    args = parser.parse_args()
    if not register_nvcomp_zstd():
        raise SystemExit("needs cupy, nvCOMP and a CUDA device")
    if args.phases:
        logging.getLogger("linumpy.gpu.nvcomp_zstd").setLevel(logging.DEBUG)

    volume = oct_volume()
    host = cupy.asnumpy(volume)
    nbytes = host.nbytes
    results: dict[str, object] = {"shape": SHAPE, "dtype": "uint16", "runs": RUNS}
    with tempfile.TemporaryDirectory() as tmp:
        for chunk in args.chunk_sizes:
            path = Path(tmp) / f"c{chunk}.zarr"
            arr = zarr.create_array(
                path,
                shape=SHAPE,
                chunks=(chunk,) * 3,
                dtype=np.uint16,
                compressors=ZstdCodec(level=3),
                fill_value=0,
            )
            arr[...] = host
            stored = sum(p.stat().st_size for p in (path / "c").rglob("*") if p.is_file())
            entry: dict[str, object] = {"ratio": round(nbytes / stored, 3)}
            for concurrency in args.concurrency:
                baseline, _ = median_rate(
                    read_whole(path, codec=False, concurrency=concurrency), nbytes
                )
                entry[f"enable_gpu_GBps(concurrency={concurrency})"] = round(baseline, 2)
                for batch_size in args.batch_sizes:
                    read = read_whole(
                        path, codec=True, batch_size=batch_size, concurrency=concurrency
                    )
                    ours, result = median_rate(read, nbytes)
                    if not bool(cupy.array_equal(result, volume)):
                        raise SystemExit(f"{chunk}^3: the nvCOMP read differs from the volume")
                    label = f"nvcomp_GBps(batch={batch_size},concurrency={concurrency})"
                    entry[label] = round(ours, 2)
                    entry[f"speedup(batch={batch_size},concurrency={concurrency})"] = round(
                        ours / baseline, 2
                    )
            if args.allocator_ab:
                nvcomp.set_device_allocator(lambda nbytes, stream: cupy.cuda.alloc(nbytes))
                ours, result = median_rate(read_whole(path, codec=True), nbytes)
                nvcomp.set_device_allocator(None)
                if not bool(cupy.array_equal(result, volume)):
                    raise SystemExit(f"{chunk}^3: the nvCOMP read differs from the volume")
                entry["nvcomp_GBps(cupy allocator)"] = round(ours, 2)
            results[f"{chunk}^3"] = entry
            print(f"{chunk}^3 chunks: {json.dumps(entry, indent=1)}", flush=True)
        if args.no_write:
            if args.out:
                args.out.write_text(json.dumps(results, indent=2))
            return

        def write_gpu() -> cupy.ndarray:
            with zarr.config.enable_gpu(), zarr.config.set(gpu_zstd_config()):
                out = zarr.create_array(
                    Path(tmp) / "gpu_write.zarr",
                    shape=SHAPE,
                    chunks=(128,) * 3,
                    dtype=np.uint16,
                    compressors=NvcompZstdCodec(level=3),
                    fill_value=0,
                    overwrite=True,
                )
                out[...] = volume
            return volume

        write_rate, _ = median_rate(write_gpu, nbytes)
        check = zarr.open_array(Path(tmp) / "gpu_write.zarr", mode="r")[...]
        if not np.array_equal(check, host):
            raise SystemExit("the GPU-written array reads back wrong on the CPU")
        results["gpu_write_128^3_GBps"] = round(write_rate, 2)
        print(f"GPU write, 128^3 chunks, checksum off: {write_rate:.2f} GB/s", flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
