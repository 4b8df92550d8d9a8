"""Dev benchmark: when each group of a GPU read is submitted, copied, decoded and scattered.

Writes a 1 GiB OCT-like volume in the given layouts, reads it with ``read_volume(gpu=True)``
(warm-up, then ``--rounds`` reads) and, for the last read, prints one line per group: on the
host, when the run loop handed it to the back end; on its stream (CUDA events, ms from the read's
start), when its host-to-device copy started, when nvCOMP started and ended, when its scatter
ended. The GPU back end is wrapped for this, not changed. ``--settings name=value ...`` as the
fields' environment variables take them (sizes in MiB).

    python3 benchmarks/read_timeline.py --layouts "sharded 64^3" 128^3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import cupy
import zarr

from linumpy.bench import oct_volume
from linumpy.gpu import backend as gpu_backend
from linumpy.io import read_volume
from linumpy.settings import ENV

LAYOUTS = {
    "128^3": {"chunks": (128, 128, 128)},
    "64^3": {"chunks": (64, 64, 64)},
    "sharded 128^3": {"chunks": (128, 128, 128), "shards": (128, 512, 512)},
    "sharded 64^3": {"chunks": (64, 64, 64), "shards": (128, 512, 512)},
}


class Timeline:
    """CUDA events around each group's work, recorded by wrapping the back end's calls."""

    def __init__(self) -> None:
        self.groups: list[dict[str, Any]] = []
        self.start: Any = None
        self.host_start = 0.0
        original_submit = gpu_backend.GpuBackend._submit_gpu
        original_decode = gpu_backend.nvcomp.decode
        original_scatter = gpu_backend.launch_scatter
        timeline = self

        def submit(backend: Any, fetched: Any, *more: Any) -> Any:
            stream = backend._slots[fetched.slot].stream
            record = {
                "n": len(fetched.group.entries),
                "mib": fetched.group.layout.nbytes / 2**20,
                "slot": fetched.slot,
                "host": (time.perf_counter() - timeline.host_start) * 1e3,
                "fetch": fetched.seconds * 1e3,
                "copy": stream.record(),
            }
            timeline.groups.append(record)
            result = original_submit(backend, fetched, *more)
            record["host_done"] = (time.perf_counter() - timeline.host_start) * 1e3
            return result

        def decode(*args: Any, stream: Any, **kwargs: Any) -> Any:
            timeline.groups[-1]["decode"] = stream.record()
            pending = original_decode(*args, stream=stream, **kwargs)
            timeline.groups[-1]["decoded"] = stream.record()
            return pending

        def scatter(geometry: Any, table: Any, stream: Any) -> None:
            original_scatter(geometry, table, stream)
            if timeline.groups:
                timeline.groups[-1]["scattered"] = stream.record()

        gpu_backend.GpuBackend._submit_gpu = submit  # type: ignore[method-assign]
        gpu_backend.nvcomp.decode = decode  # type: ignore[assignment]
        gpu_backend.launch_scatter = scatter  # type: ignore[assignment]

    def reset(self) -> None:
        self.groups = []
        self.host_start = time.perf_counter()
        self.start = cupy.cuda.Event()
        self.start.record()

    def lines(self) -> list[str]:
        def ms(event: Any) -> str:
            if event is None:
                return "-"
            return f"{cupy.cuda.get_elapsed_time(self.start, event):.1f}"

        out = [
            "| group | slot | chunks | MiB | fetch ms | host submit | copy start | decode start "
            "| decode end | scatter end |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for k, g in enumerate(self.groups):
            out.append(
                f"| {k} | {g['slot']} | {g['n']} | {g['mib']:.0f} | {g['fetch']:.1f} "
                f"| {g['host']:.1f}-{g.get('host_done', 0):.1f} | {ms(g['copy'])} "
                f"| {ms(g.get('decode'))} | {ms(g.get('decoded'))} | {ms(g.get('scattered'))} |"
            )
        return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layouts", nargs="*", default=list(LAYOUTS), choices=list(LAYOUTS))
    parser.add_argument("--settings", nargs="*", default=[], help="name=value")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    settings = {k: ENV[k][1](k, v) for k, v in (i.split("=") for i in args.settings)}
    volume = oct_volume((args.mib * 2**20 // (1024 * 1024 * 2), 1024, 1024), xp=cupy)
    host = volume.get()
    root = Path(args.workdir or tempfile.mkdtemp())
    timeline = Timeline()
    summary = []
    for name in args.layouts:
        path = root / f"{name.replace(' ', '_').replace('^', '')}.zarr"
        array = zarr.create_array(path, shape=host.shape, dtype=host.dtype, **LAYOUTS[name])
        array[:] = host
        times = []
        for round_ in range(args.rounds + 1):
            timeline.reset()
            started = time.perf_counter()
            out = read_volume(path, gpu=True, settings=settings)
            cupy.cuda.Device().synchronize()
            if round_:
                times.append(time.perf_counter() - started)
            if not bool(cupy.array_equal(out, volume)):
                raise SystemExit(f"{name}: wrong values")
            del out
        gbps = host.nbytes / statistics.median(times) / 1e9
        print(f"\n## {name}: {gbps:.2f} GB/s (median of {args.rounds}); last read's groups\n")
        print("\n".join(timeline.lines()), flush=True)
        summary.append((name, gbps, len(timeline.groups), times[-1] * 1e3))
    print("\n| layout | GB/s | groups | last read ms |\n| --- | ---: | ---: | ---: |")
    for name, gbps, groups, last in summary:
        print(f"| {name} | {gbps:.2f} | {groups} | {last:.1f} |")


if __name__ == "__main__":
    main()
