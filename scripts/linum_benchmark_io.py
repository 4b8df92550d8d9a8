"""Measure how fast zstd zarr volumes are read and written, on the CPU and the GPU, beside the
same run's ceilings (file read, decode, host->device copy), in GB/s of decompressed volume.

An OCT-like volume is generated, or taken from --input (a zarr array, or an OME-Zarr image's
level 0), and written in each layout: 128^3 and 64^3 chunks, as chunk files and in 128x512x512
shards, each without and with linumpy's checksums. Every read is checked against the volume. The
table printed gives each row's GB/s and its fraction of its ceilings; OUT_DIR/benchmark_io.json
holds the run. Without a GPU, or with --cpu-only, the CPU rows and ceilings run; a quick run:
linum-benchmark-io OUT --shape 32 1024 1024 --chunks 64 --cpu-only --checksum on
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from linumpy.bench.report import summary_table
from linumpy.bench.rows import Layout
from linumpy.bench.run import BenchConfig, header, run_benchmark, write_result
from linumpy.cli import (
    build_parser,
    check_input,
    check_output,
    fail_on_errors,
    parse_args,
)
from linumpy.cli.options import positive_int
from linumpy.cli.parser import gpu_reason
from linumpy.io import open_array
from linumpy.io.engine.memory import available_memory, format_size


def _build_arg_parser() -> argparse.ArgumentParser:
    p = build_parser(__doc__, prog="linum-benchmark-io")
    p.add_argument("out_dir", type=Path, help="Folder for the JSON and the volumes measured.")
    p.add_argument(
        "--input", type=Path, help="Benchmark this zarr array or OME-Zarr image (level 0)."
    )
    p.add_argument(
        "--shape",
        type=positive_int,
        nargs=3,
        default=[512, 1024, 1024],
        metavar=("Z", "Y", "X"),
        help="Shape of the generated uint16 volume [512 1024 1024].",
    )
    p.add_argument(
        "--chunks",
        type=positive_int,
        nargs="+",
        default=[128, 64],
        help="Cubic chunk edges, each as chunk files and in 128x512x512 shards [128 64].",
    )
    p.add_argument(
        "--checksum",
        choices=("off", "on", "both"),
        default="both",
        help="Checksums as linumpy writes them by default (zstd content checksum, then a crc32c "
        "of each frame): on, off, or both: each layout twice, to measure their cost "
        "[%(default)s].",
    )
    p.add_argument(
        "--repeats", type=positive_int, default=3, help="Timed runs per row [%(default)s]."
    )
    p.add_argument("--cpu-only", action="store_true", help="Run the CPU rows only.")
    p.add_argument("--no-writes", action="store_true", help="Skip the write rows.")
    return p


def _layouts(args: argparse.Namespace) -> tuple[Layout, ...]:
    """Each layout without then with checksums, one after the other, so that a change in the
    machine's load between layouts does not show as the checksums' cost."""
    checksums = {"off": [False], "on": [True], "both": [False, True]}[args.checksum]
    return tuple(
        Layout.cubic(edge, shards, checksum=checksum)
        for shards in (None, (128, 512, 512))
        for edge in args.chunks
        for checksum in checksums
    )


#: Host memory a run needs, in volumes: the volume, a read's result, the files and decoded frames.
_VOLUMES_IN_MEMORY = 3.5


def _check_memory(parser: argparse.ArgumentParser, nbytes: int, option: str) -> None:
    """Refuse a volume that would not fit in the memory available."""
    available, needed = available_memory(), _VOLUMES_IN_MEMORY * nbytes
    if needed > available:
        parser.error(
            f"argument {option}: a volume of {format_size(nbytes)} needs about "
            f"{format_size(needed)} of memory; {format_size(available)} is available"
        )


def main(argv: list[str] | None = None) -> None:
    """Run ``linum-benchmark-io`` (see the module docstring)."""
    parser = _build_arg_parser()
    args = parse_args(parser, argv)
    nbytes, option = math.prod(args.shape) * 2, "--shape"  # uint16
    if args.input is not None:
        check_input(parser, args.input)
        with fail_on_errors(parser):
            nbytes, option = open_array(args.input, 0).nbytes, "--input"
    _check_memory(parser, nbytes, option)
    target = args.out_dir / "benchmark_io.json"
    check_output(parser, target, args.overwrite, make_parents=True)
    reason = None if args.cpu_only else gpu_reason()
    if reason is not None:
        print(f"no GPU ({reason}): running the CPU rows only", flush=True)
    config = BenchConfig(
        shape=tuple(args.shape),
        layouts=_layouts(args),
        input=args.input,
        gpu=not args.cpu_only and reason is None,
        writes=not args.no_writes,
        repeats=args.repeats,
        workdir=args.out_dir,
    )
    with fail_on_errors(parser):
        result = run_benchmark(config)
        write_result(result, target)
    print("\n".join(header(result)), "", summary_table(result.rows), sep="\n", flush=True)


if __name__ == "__main__":
    main()
