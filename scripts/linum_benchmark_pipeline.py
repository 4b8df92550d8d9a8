#!/usr/bin/env python3
"""Time the pipeline users run: linum-estimate-transform, linum-stitch-3d, linum-aip and
linum-mosaic-pipeline on demo mosaic grids, on the CPU and with --use-gpu, each run a separate
process, beside the same run's ceiling: linum-rechunk of the mosaic into the stitch's output
dtype and layout (one pass of read, decode, encode and durable write of the same bytes).

The mosaics (--mosaic) are given by size, e.g. 4gib or 32gib: grids of --tile tiles (uint16;
96x512x512, 256x256x256 or 512x256x256), as square as the size allows; or by name: 6x6, a 6 x 6
grid of (96, 512, 512) tiles (1.81 GB), 8x8, an 8 x 8 grid of 256^3 tiles (2 GiB). Each is made
by linum-make-demo-data and written in linumpy's default layout and with one chunk per tile, as
other tools write mosaics (--layout); --scale shrinks the tiles for a quick run. The page cache
is warm (as warm as the machine's memory allows).

Every command runs with -v; its table of phases (start-up and imports, metadata, level 0,
pyramid, final swap) goes into the results. The table gives, per
command, its seconds, its start-up apart, GB/s of mosaic through the job after start-up (the
steady state) and through level 0, and the fraction of the ceiling's GB/s. --dtypes uint16,float32
times the stitch (and the job) once per output dtype (--dtype), each against the ceiling in that
dtype (for a dtype other than the mosaic's, rechunking a copy of the mosaic in it). The GPU runs
use a cupy kernel cache in OUT_DIR/kernel_cache, empty before each command's first GPU run: that
run is what a fresh machine pays, reported apart from the next. Without a usable GPU, or with
--cpu-only, the GPU half is skipped with the reason.

Results: OUT_DIR/benchmark_pipeline.md (the tables), benchmark_pipeline.json (date, machine,
versions, command line and every run) and benchmark_pipeline.png (the chart needs matplotlib:
pip install -e ".[bench]"); each command's output in OUT_DIR/logs. The mosaics and outputs are
written in OUT_DIR/data (--keep keeps them): it needs free space for the mosaic, its outputs and
the ceiling's copy, about four times the mosaic's stored size.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path

from linumpy import cli
from linumpy.cli.options import number

#: The keys of linumpy.bench.pipeline_records.COMMANDS (a test keeps them equal), named here so
#: that parsing the command line imports no benchmark code.
_COMMANDS = ("estimate", "stitch", "aip", "job")

_MOSAICS = ("6x6", "8x8")


def _mosaic(value: str) -> str:
    """A mosaic's name, or a size (checked as linumpy.bench.pipeline_records.parse_size does)."""
    text = value.strip().lower()
    if text not in _MOSAICS and not re.fullmatch(r"\d+(\.\d*)?\s*([kmgt]i?)?b?", text):
        raise argparse.ArgumentTypeError(f"{value!r} is neither 6x6, 8x8 nor a size (4gib)")
    return text


def _tile(value: str) -> tuple[int, int, int]:
    sides = value.lower().split("x")
    if len(sides) != 3 or not all(side.isdigit() and int(side) >= 8 for side in sides):
        raise argparse.ArgumentTypeError(f"{value!r} is not a tile shape ZxYxX (sides >= 8)")
    return tuple(int(side) for side in sides)  # type: ignore[return-value]


def _dtypes(value: str) -> tuple[str, ...]:
    import numpy as np

    names = tuple(dict.fromkeys(name.strip() for name in value.split(",") if name.strip()))
    for name in names:
        try:
            np.dtype(name)
        except TypeError:
            raise argparse.ArgumentTypeError(f"{name!r} is not a numpy dtype") from None
    return names


def _build_arg_parser() -> cli.LinumArgumentParser:
    parser = cli.build_parser(__doc__, prog="linum-benchmark-pipeline")
    parser.add_argument("out_dir", type=Path, help="Folder for the results, logs and mosaics.")
    parser.add_argument(
        "--mosaic",
        nargs="+",
        type=_mosaic,
        default=["6x6", "8x8"],
        help="Mosaics to make and time: sizes (4gib, 32gib) or names (6x6, 8x8) [%(default)s].",
    )
    parser.add_argument(
        "--tile",
        type=_tile,
        default="512x256x256",
        help="Tile shape of the mosaics given by size: 96x512x512, 256x256x256, 512x256x256 "
        "or any ZxYxX [%(default)s].",
    )
    parser.add_argument(
        "--layout",
        nargs="+",
        choices=("default", "tile"),
        default=["default", "tile"],
        help="Layouts: linumpy's default, one chunk per tile [%(default)s].",
    )
    parser.add_argument(
        "--command",
        nargs="+",
        choices=_COMMANDS,
        default=list(_COMMANDS),
        help="Commands to time (job: linum-mosaic-pipeline, the other three in one process) "
        "[%(default)s].",
    )
    parser.add_argument(
        "--dtypes",
        type=_dtypes,
        default=(),
        help="Output dtypes of the stitch and the job, comma-separated, each timed apart "
        "(e.g. uint16,float32) [the stitch's default].",
    )
    parser.add_argument(
        "--no-ceiling", action="store_true", help="Do not time linum-rechunk, the ceiling."
    )
    parser.add_argument(
        "--scale",
        type=number(float, 0.01, 1),
        default=1.0,
        help="Tile sides times this, for a quick run [%(default)s].",
    )
    parser.add_argument("--cpu-only", action="store_true", help="Skip the GPU half.")
    parser.add_argument(
        "--timeout",
        type=number(float, 1),
        default=3600.0,
        help="Seconds one command may run [%(default)s].",
    )
    parser.add_argument(
        "--prepare-kernels",
        action="store_true",
        help="Also time each command's first GPU run after linum-gpu-info --prepare-kernels.",
    )
    parser.add_argument("--keep", action="store_true", help="Keep the mosaics and outputs.")
    cli.add_overwrite_arg(parser)
    cli.add_verbose_arg(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``linum-benchmark-pipeline`` with ``argv`` (the command line by default).

    Examples
    --------
    A CPU run of linum-aip on a tiny 6 x 6 mosaic; the tables are printed (not shown here):

    >>> import contextlib, io, os, tempfile
    >>> out = tempfile.mkdtemp() + "/bench"
    >>> argv = [out, "--mosaic", "6x6", "--layout", "tile", "--command", "aip", "--scale",
    ...         "0.05", "--cpu-only", "--no-ceiling"]
    >>> with contextlib.redirect_stdout(io.StringIO()) as printed:
    ...     main(argv)
    >>> sorted(os.listdir(out))[:2]  # and benchmark_pipeline.png, the chart, with matplotlib
    ['benchmark_pipeline.json', 'benchmark_pipeline.md']
    >>> "| linum-aip | 6x6 of 8x24x24, one chunk per tile | - | cpu |" in printed.getvalue()
    True
    """
    parser = _build_arg_parser()
    args = cli.parse_args(parser, argv)
    out_dir = args.out_dir
    if out_dir.exists() and not out_dir.is_dir():
        parser.error(f"output {str(out_dir)!r} is not a folder")
    if (out_dir / "benchmark_pipeline.json").exists() and not args.overwrite:
        parser.error(f"output {str(out_dir)!r} holds results; use -f to overwrite them")
    cli.check_output(parser, out_dir / "benchmark_pipeline.json", True, make_parents=True)
    with cli.fail_on_errors(parser):
        from linumpy.bench.pipeline import PipelineConfig, PipelineResult, run_pipeline_benchmark
        from linumpy.bench.pipeline_report import (
            pipeline_chart,
            pipeline_table,
            write_pipeline_json,
        )

        config = PipelineConfig(
            mosaics=tuple(dict.fromkeys(args.mosaic)),
            tile=args.tile,
            layouts=tuple(dict.fromkeys(args.layout)),
            dtypes=args.dtypes,
            scale=args.scale,
            gpu=not args.cpu_only,
            commands=tuple(dict.fromkeys(args.command)),
            ceiling=not args.no_ceiling,
            timeout=args.timeout,
            prepare_kernels=args.prepare_kernels,
        )

        def save(result: PipelineResult) -> tuple[str, str]:
            table = pipeline_table(result)
            machine = "; ".join(f"{k} {v}" for k, v in result.machine.items())
            (out_dir / "benchmark_pipeline.md").write_text(
                f"# Pipeline benchmark, {result.machine['date']}\n\nMachine: {machine}\n\n{table}\n"
            )
            write_pipeline_json(result, out_dir / "benchmark_pipeline.json")
            return table, machine

        result = run_pipeline_benchmark(
            config,
            out_dir,
            log=lambda line: print(line, flush=True),
            keep=args.keep,
            on_mosaic=save,  # a run cut short keeps the mosaics measured
        )
        table, machine = save(result)
        charted = pipeline_chart(result, out_dir / "benchmark_pipeline.png")
    print("", table, "", f"Machine: {machine}", sep="\n")
    if not charted:
        print("no chart: matplotlib is not installed (pip install -e '.[bench]')")


if __name__ == "__main__":
    main()
