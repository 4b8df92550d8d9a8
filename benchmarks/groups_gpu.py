"""Dev benchmark: GPU reads with the engine's grouping against an older one, and settings sweeps.

Writes a 1 GiB OCT-like volume in the issue's four layouts, then times ``read_volume(gpu=True)``
in interleaved rounds: the current code, the ``make_groups`` of an older ``run.py`` (``--baseline``,
from ``git show REV:linumpy/io/engine/run.py``) patched in, and each ``--sweep`` configuration
(``name=value,...`` settings), and each ``--patch`` (a module constant set for those reads).
Every read is compared with the volume. Prints a table last.

    python3 benchmarks/groups_gpu.py --baseline .whl/run_head.py --sweep gpu_streams=8 \
        --patch linumpy.gpu.backend.SIZE_ORDER_MIN_CHUNK=1099511627776
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib.util
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from unittest import mock

import cupy
import zarr

from linumpy.bench import oct_volume
from linumpy.gpu.zarr_io import last_read_report
from linumpy.io import read_volume
from linumpy.settings import ENV

LAYOUTS = {
    "128^3": {"chunks": (128, 128, 128)},
    "64^3": {"chunks": (64, 64, 64)},
    "sharded 128^3": {"chunks": (128, 128, 128), "shards": (128, 512, 512)},
    "sharded 64^3": {"chunks": (64, 64, 64), "shards": (128, 512, 512)},
}


def _settings(config: str) -> dict[str, object]:
    """``name=value,...`` read as the fields' environment variables are (sizes in MiB)."""
    pairs = (item.split("=") for item in config.split(",") if item)
    return {name: ENV[name][1](name, value) for name, value in pairs}


def _baseline(source: str) -> Callable[[], AbstractContextManager[object]]:
    spec = importlib.util.spec_from_file_location("linumpy_run_baseline", source)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]  # its dataclasses look it up
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return lambda: mock.patch("linumpy.io.engine.run.make_groups", module.make_groups)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--layouts", nargs="*", default=list(LAYOUTS), choices=list(LAYOUTS))
    parser.add_argument("--baseline", default=None, help="an older run.py whose groups to time")
    parser.add_argument("--sweep", nargs="*", default=[], help="'name=value,...' settings")
    parser.add_argument(
        "--patch", nargs="*", default=[], help="'module.NAME=value': a module constant changed"
    )
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    depth = args.mib * 2**20 // (1024 * 1024 * 2)
    volume = oct_volume((depth, 1024, 1024), xp=cupy)
    host = volume.get()
    root = Path(args.workdir or tempfile.mkdtemp())
    runs: dict[str, tuple[dict[str, int], Callable[[], AbstractContextManager[object]]]] = {
        "engine": ({}, nullcontext)
    }
    if args.baseline:
        runs["before"] = ({}, _baseline(args.baseline))
    for config in args.sweep:
        runs[config] = (_settings(config), nullcontext)
    for change in args.patch:
        target, value = change.split("=")
        runs[change] = ({}, functools.partial(mock.patch, target, ast.literal_eval(value)))
    rows = []
    for name in args.layouts:
        path = root / f"{name.replace(' ', '_').replace('^', '')}.zarr"
        array = zarr.create_array(path, shape=host.shape, dtype=host.dtype, **LAYOUTS[name])
        array[:] = host
        times: dict[str, list[float]] = {label: [] for label in runs}
        reports: dict[str, object] = {}
        for round_ in range(args.rounds + 1):  # round 0 warms up
            for label, (settings, patch) in runs.items():
                with patch():
                    started = time.perf_counter()
                    out = read_volume(path, gpu=True, settings=settings)
                    cupy.cuda.Device().synchronize()
                    seconds = time.perf_counter() - started
                if not bool(cupy.array_equal(out, volume)):
                    raise SystemExit(f"{name} {label}: wrong values")
                del out
                if round_:
                    times[label].append(seconds)
                    reports[label] = last_read_report()
        for label in runs:
            report = reports[label]
            gbps = host.nbytes / statistics.median(times[label]) / 1e9
            phases = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in report.phases.items())  # type: ignore[attr-defined]
            rows.append((name, label, gbps, report.n_batches, phases))  # type: ignore[attr-defined]
            print(f"{name} | {label} | {gbps:.2f} GB/s | {phases}", flush=True)
    print()
    print(f"1 GiB = {host.nbytes} bytes, medians of {args.rounds} interleaved rounds, all equal")
    print("| layout | run | GB/s | groups | last run's phases (ms) |")
    print("| --- | --- | ---: | ---: | --- |")
    for name, label, gbps, groups, phases in rows:
        print(f"| {name} | {label} | {gbps:.2f} | {groups} | {phases} |")


if __name__ == "__main__":
    main()
