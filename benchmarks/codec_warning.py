"""Dev check on a GPU: where zarr warns about a slow copy under gpu_zarr_context, and the codec
against zarr.config.enable_gpu() on small arrays of each layout (prints a table last)."""

from __future__ import annotations

import statistics
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import cupy
import zarr

from linumpy.bench import oct_volume
from linumpy.gpu.zarr_io import gpu_zarr_context

LAYOUTS = {
    "128^3": {"chunks": (128, 128, 128)},
    "64^3": {"chunks": (64, 64, 64)},
    "sharded 128^3": {"chunks": (128, 128, 128), "shards": (128, 512, 512)},
    "sharded 64^3": {"chunks": (64, 64, 64), "shards": (128, 512, 512)},
}


def timed(fn, repeat: int = 3) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        cupy.cuda.Device().synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    vol = oct_volume((256, 1024, 1024), xp=cupy).get()
    root = Path(tempfile.mkdtemp())
    rows = []
    for name, kw in LAYOUTS.items():
        path = root / f"{name}.zarr"
        array = zarr.create_array(path, shape=vol.shape, dtype=vol.dtype, **kw)
        array[:] = vol
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                with gpu_zarr_context():
                    zarr.open_array(path, mode="r")[:8]
            except Warning:
                print(f"--- {name}: warning raised at")
                traceback.print_exc(limit=-8)

        def codec(p: Path = path) -> None:
            with gpu_zarr_context():
                zarr.open_array(p, mode="r")[...]

        def enable_gpu(p: Path = path) -> None:
            with zarr.config.enable_gpu():
                zarr.open_array(p, mode="r")[...]

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tc, te = timed(codec), timed(enable_gpu)
        rows.append((name, vol.nbytes / tc / 1e9, vol.nbytes / te / 1e9))
    print("| layout | gpu_zarr_context GB/s | enable_gpu GB/s | ratio |")
    print("| --- | --- | --- | --- |")
    for name, c, e in rows:
        print(f"| {name} | {c:.2f} | {e:.2f} | {c / e:.2f} |")


if __name__ == "__main__":
    main()
