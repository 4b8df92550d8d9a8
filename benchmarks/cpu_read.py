"""Quick local benchmark of the CPU read path against its decode ceiling and other readers.

Builds the OCT-like benchmark volume (zstd level 3) in the four benchmark layouts, then times,
per layout: ``linumpy.io.read_volume`` (CPU), the numcodecs N-thread decode ceiling as
``cpu_decode_ceiling`` times it (frames already in memory, output reused),
the same decode into a new output each run (``ceiling+alloc``: what page faults add), the
N-thread read of the stored files alone (``files``, in GB/s of decoded bytes: what the ceiling
leaves out),
the CPU back end into one output reused run after run (``linumpy+out``: the engine without the new
output's page faults),
tensorstore and zarr with the ``zarrs`` codec pipeline (each when importable), and optionally
an older ``linumpy/io/engine/cpu.py`` (``--baseline``: ``git show REV:linumpy/io/engine/cpu.py``).

The readers are timed in interleaved rounds (each round runs every reader once), so that a noisy
shared machine slows them alike; the table gives the median and the best round in GB/s of
decoded bytes. Every reader's first result is checked against the volume.

Usage::

    .venv/bin/python benchmarks/cpu_read.py --mib 256 --threads 2 --rounds 9
    .venv/bin/python benchmarks/cpu_read.py --mib 1024 --layouts 1,3 --skip tstore,zarrs
    git show HEAD~1:linumpy/io/engine/cpu.py > /tmp/cpu_before.py
    .venv/bin/python benchmarks/cpu_read.py --baseline /tmp/cpu_before.py
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import zarr

from linumpy.bench.files import in_threads, read_files, stored_files
from linumpy.bench.rows import Layout, _installed, _tensorstore_read, _zarrs_read, write_volume
from linumpy.bench.volume import oct_volume
from linumpy.io import read_volume
from linumpy.io.engine.plan import plan_read

LAYOUTS = (
    Layout.cubic(128),
    Layout.cubic(64),
    Layout.cubic(128, (128, 512, 512)),
    Layout.cubic(64, (128, 512, 512)),
)


def ceiling_reader(path: Path, threads: int, *, fresh: bool) -> Callable[[], np.ndarray]:
    """One run of the numcodecs N-thread decode of the stored frames (read into memory once),
    as ``cpu_decode_ceiling`` times it: into one output reused run after run
    (its repeats, after a warm-up), or, ``fresh``, into a new output each run (as any reader
    returning a new array must: page faults included)."""
    files = stored_files(zarr.open_array(path, mode="r"))
    buffer = np.empty(max(files.nbytes, 1), np.uint8)
    read_files(files, buffer, threads=threads)
    files = files.with_frames(buffer)
    codec, size, n = numcodecs.Zstd(), files.frame_nbytes, len(files.frame_sizes)
    view = memoryview(buffer)
    reused = np.empty(max(n * size, 1), np.uint8)

    def run() -> np.ndarray:
        out = np.empty_like(reused) if fresh else reused

        def task(run: np.ndarray) -> None:
            for i in run:
                start, length = int(files.frame_offsets[i]), int(files.frame_sizes[i])
                codec.decode(view[start : start + length], out=out[i * size : (i + 1) * size])

        in_threads(task, n, threads)
        return out

    return run


def files_reader(path: Path, threads: int) -> Callable[[], np.ndarray]:
    """The N-thread read of the stored files into memory (what the ceiling leaves out)."""
    files = stored_files(zarr.open_array(path, mode="r"))
    buffer = np.empty(max(files.nbytes, 1), np.uint8)
    return lambda: read_files(files, buffer, threads=threads)


def _run_backend(backend: type, plan: Any, out: np.ndarray | None, threads: int) -> np.ndarray:
    """A CPU back end class run on ``plan`` alone, without the read orchestrator."""
    opened = backend(plan, threads=threads, out=out, reader="pread")
    try:
        opened.execute()
    finally:
        opened.close()
    return opened.out


def reused_reader(path: Path, threads: int) -> Callable[[], np.ndarray]:
    """The CPU engine (``CpuBackend``) into one output reused run after run."""
    from linumpy.io.engine.cpu import CpuBackend

    plan = plan_read(zarr.open_array(path, mode="r"))
    out = np.empty(plan.shape, plan.dtype)
    return lambda: _run_backend(CpuBackend, plan, out, threads)


def baseline_reader(source: str, path: Path, threads: int) -> Callable[[], np.ndarray]:
    """``CpuBackend`` of an older ``cpu.py`` (loaded from ``source``) on the array at ``path``."""
    spec = importlib.util.spec_from_file_location("linumpy_cpu_baseline", source)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]  # dataclasses look it up
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    array = zarr.open_array(path, mode="r")
    return lambda: _run_backend(module.CpuBackend, plan_read(array), None, threads)


def readers(path: Path, args: argparse.Namespace) -> dict[str, tuple[Callable[[], Any], bool]]:
    """The timed readers of one layout: name -> (run, whether its result is checked)."""
    threads = args.threads
    runs: dict[str, tuple[Callable[[], Any], bool]] = {
        "ceiling": (ceiling_reader(path, threads, fresh=False), False),
        "ceiling+alloc": (ceiling_reader(path, threads, fresh=True), False),
        "files": (files_reader(path, threads), False),
        "linumpy": (lambda: read_volume(path, settings={"io_threads": threads}), True),
        "linumpy+out": (reused_reader(path, threads), True),
    }
    if args.baseline:
        runs["before"] = (baseline_reader(args.baseline, path, threads), True)
    if _installed("tensorstore"):
        runs["tstore"] = (lambda: _tensorstore_read(path), True)
    if _installed("zarrs"):
        runs["zarrs"] = (lambda: _zarrs_read(path), True)
    skip = set(args.skip.split(",")) if args.skip else set()
    return {name: run for name, run in runs.items() if name not in skip}


def time_layout(path: Path, volume: np.ndarray, args: argparse.Namespace) -> dict[str, list[float]]:
    """Seconds of every reader, over interleaved rounds, after one checked warm-up each."""
    runs = readers(path, args)
    for name, (run, check) in runs.items():
        result = run()
        if check and not np.array_equal(np.asarray(result), volume):
            raise AssertionError(f"{name} read differs from the volume at {path}")
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    faults: dict[str, int] = dict.fromkeys(runs, 0)
    for _ in range(args.rounds):
        for name, (run, _check) in runs.items():
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - start)
            faults[name] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    print("  minor page faults per run: " + ", ".join(
        f"{name} {count // args.rounds}" for name, count in faults.items()))  # fmt: skip
    return seconds


def main() -> None:
    """Build the volume, time every reader per layout, print a table of GB/s."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="volume size (about)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--layouts", default="0,1,2,3", help="indices into the four layouts")
    parser.add_argument("--baseline", default=None, help="an older cpu.py to time as 'before'")
    parser.add_argument("--skip", default="", help="readers not to time, e.g. tstore,zarrs")
    parser.add_argument("--workdir", default=None, help="keeps the arrays between runs")
    parser.add_argument("--run-bytes", type=int, help="linumpy.io.engine.cpu.RUN_BYTES (0: off)")
    args = parser.parse_args()
    if args.run_bytes is not None:
        import linumpy.io.engine.cpu

        linumpy.io.engine.cpu.RUN_BYTES = args.run_bytes
    depth = 128
    # Sides in multiples of 64 (whole 64^3 chunks); 1 MiB makes a (128, 64, 64) smoke-test volume.
    side = max(64, round((args.mib * 2**20 / 2 / depth) ** 0.5 / 64) * 64)
    shape = (depth, side, side)
    volume = oct_volume(shape)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="cpu_read_"))
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    print(
        f"volume {shape} uint16 ({volume.nbytes / 2**20:.0f} MiB), {args.threads} threads, "
        f"{args.rounds} interleaved rounds; GB/s of decoded bytes, median (best); "
        f"transparent huge pages: {thp.read_text().strip() if thp.exists() else 'unknown'}"
    )
    for index in (int(i) for i in args.layouts.split(",")):
        layout = LAYOUTS[index]
        path = workdir / f"{shape[1]}-{index}.zarr"
        if not path.exists():
            write_volume(path, volume, layout, zarr.codecs.ZstdCodec(level=3))
        ratio = volume.nbytes / stored_files(zarr.open_array(path, mode="r")).nbytes
        seconds = time_layout(path, volume, args)
        gbps = {k: volume.nbytes / statistics.median(v) / 1e9 for k, v in seconds.items()}
        best = {k: volume.nbytes / min(v) / 1e9 for k, v in seconds.items()}
        cells = "  ".join(f"{k} {gbps[k]:.2f} ({best[k]:.2f})" for k in seconds)
        fraction = gbps["linumpy"] / gbps["ceiling"]
        print(f"{layout.name} (ratio {ratio:.2f}): {cells}  linumpy/ceiling {fraction:.2f}")


if __name__ == "__main__":
    main()
