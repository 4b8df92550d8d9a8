"""Dev check of the engine on a GPU: correctness on several layouts, then speed on 1 GiB.

python3 benchmarks/engine_gpu.py [--size-mib 1024] [--streams 4] [--scratch-mib 1024]
Prints a table last. Volumes are OCT-like noise (no all-zero regions).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import cupy
import numpy as np
import zarr

from linumpy.bench import oct_volume
from linumpy.gpu.zarr_io import last_read_report
from linumpy.io import read_volume


def volume(shape: tuple[int, int, int]) -> np.ndarray:
    return oct_volume(shape, xp=cupy).get()


LAYOUTS = {
    "128^3": {"chunks": (128, 128, 128)},
    "64^3": {"chunks": (64, 64, 64)},
    "sharded 128^3": {"chunks": (128, 128, 128), "shards": (128, 512, 512)},
    "sharded 64^3": {"chunks": (64, 64, 64), "shards": (128, 512, 512)},
}


def timed(fn, repeat: int) -> tuple[float, object]:
    result = fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeat):
        del result
        t = time.perf_counter()
        result = fn()
        cupy.cuda.Device().synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def _value(name: str, text: str) -> object:
    if name == "fetch":
        return text
    return float(text) if "." in text else int(text)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--layouts", nargs="*", default=list(LAYOUTS), choices=list(LAYOUTS))
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU read_volume rows")
    parser.add_argument("--settings", nargs="*", default=[], help="name=value")
    parser.add_argument(
        "--sweep", nargs="*", default=[], help="extra GPU-only configurations: 'a=1,b=2' each"
    )
    args = parser.parse_args()
    settings = {}
    for item in args.settings:
        name, value = item.split("=")
        settings[name] = _value(name, value)
    depth = args.size_mib * 2**20 // (1024 * 1024 * 2)
    vol = volume((depth, 1024, 1024))
    root = Path(tempfile.mkdtemp())
    rows = []
    sweeps = []
    # correctness on small odd shapes first
    small = vol[:70, :300, :260]
    for name, kw in LAYOUTS.items():
        kw_small = {k: tuple(min(v, 64) for v in val) for k, val in kw.items()}
        if "shards" in kw_small:
            kw_small["chunks"] = tuple(c // 2 for c in kw_small["chunks"])
        a = zarr.create_array(
            root / f"s{name}.zarr", shape=small.shape, dtype=small.dtype, **kw_small
        )
        a[:] = small
        for region in (None, (slice(3, 61), slice(17, 290), slice(1, 259))):
            got = read_volume(
                root / f"s{name}.zarr", gpu=True, region=region, settings=settings
            ).get()
            want = small if region is None else small[region]
            assert np.array_equal(got, want), (name, region)
    print("correctness ok")
    for name in args.layouts:
        kw = LAYOUTS[name]
        path = root / f"{name}.zarr"
        a = zarr.create_array(path, shape=vol.shape, dtype=vol.dtype, **kw)
        a[:] = vol
        stored = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        t, out = timed(lambda p=path: read_volume(p, gpu=True, settings=settings), args.repeat)
        ok = bool(cupy.array_equal(out, cupy.asarray(vol)))
        del out
        report = last_read_report()
        tc = float("nan") if args.no_cpu else timed(lambda p=path: read_volume(p), 1)[0]
        rows.append((name, vol.nbytes / stored, t, ok, report, tc))
        print(name, report)
        for config in args.sweep:
            extra = dict(settings)
            for item in config.split(","):
                key, value = item.split("=")
                extra[key] = _value(key, value)
            ts, out = timed(lambda p=path, e=extra: read_volume(p, gpu=True, settings=e), 3)
            ok = bool(cupy.array_equal(out, cupy.asarray(vol)))
            del out
            report = last_read_report()
            sweeps.append((name, config, vol.nbytes / ts / 1e9, ok, report))
    print()
    print("| layout | settings | GPU GB/s | ok | groups | phases (ms) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, config, gbps, ok, report in sweeps:
        phases = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in report.phases.items())
        print(f"| {name} | {config} | {gbps:.1f} | {ok} | {report.n_batches} | {phases} |")
    print()
    print("| layout | ratio | GPU GB/s | ok | groups | CPU GB/s | phases (ms) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, ratio, t, ok, report, tc in rows:
        phases = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in report.phases.items())
        print(
            f"| {name} | {ratio:.2f} | {vol.nbytes / t / 1e9:.1f} | {ok} | {report.n_batches} "
            f"| {vol.nbytes / tc / 1e9:.1f} | {phases} |"
        )


if __name__ == "__main__":
    main()
