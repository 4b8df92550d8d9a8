#!/usr/bin/env python3
"""Time the pipeline users run: linum-estimate-transform, linum-stitch-3d, linum-aip and
linum-mosaic-pipeline on demo mosaic grids, on the CPU and with --use-gpu, each run a separate
process, beside the same run's ceiling: linum-rechunk of the mosaic into the stitch's output
layout (one pass of read, decode, encode and durable write of the same bytes).

The mosaics (--mosaic) are given by size, e.g. 4gib or 32gib: grids of --tile tiles (uint16), as
square as the size allows, made by linum-make-demo-data. The table printed gives, per command,
its seconds, its start-up apart, GB/s of mosaic after start-up and through level 0 (from its -v
phases), and the fraction of the ceiling's GB/s. On the GPU each command runs once untimed
first, which compiles its kernels. Results: OUT_DIR/benchmark_pipeline.json, each command's
output in OUT_DIR/logs; the mosaics are written in OUT_DIR/data and removed once measured (free
space for about four times the mosaic's stored size is needed).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from linumpy import cli
from linumpy.bench.pipeline import (
    COMMANDS,
    PipelineConfig,
    pipeline_table,
    run_pipeline_benchmark,
    write_pipeline_json,
)
from linumpy.errors import LinumpyError
from linumpy.parallel import parse_size


def _size(value: str) -> str:
    try:
        parse_size(value)
    except LinumpyError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value.strip().lower()


def _tile(value: str) -> tuple[int, int, int]:
    sides = value.lower().split("x")
    if len(sides) != 3 or not all(side.isdigit() and int(side) >= 8 for side in sides):
        raise argparse.ArgumentTypeError(f"{value!r} is not a tile shape ZxYxX (sides >= 8)")
    return tuple(int(side) for side in sides)  # type: ignore[return-value]


def _build_arg_parser() -> cli.LinumArgumentParser:
    parser = cli.build_parser(__doc__, prog="linum-benchmark-pipeline")
    parser.add_argument("out_dir", type=Path, help="Folder for the results, logs and mosaics.")
    parser.add_argument(
        "--mosaic",
        nargs="+",
        type=_size,
        default=["4gib"],
        help="Sizes of the mosaics to make and time (4gib, 32gib) [%(default)s].",
    )
    parser.add_argument(
        "--tile",
        type=_tile,
        default="512x256x256",
        help="Tile shape of the mosaics, ZxYxX [%(default)s].",
    )
    parser.add_argument(
        "--command",
        nargs="+",
        choices=tuple(COMMANDS),
        default=list(COMMANDS),
        help="Commands to time (job: linum-mosaic-pipeline, the other three in one process) "
        "[%(default)s].",
    )
    parser.add_argument("--cpu-only", action="store_true", help="Skip the GPU half.")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``linum-benchmark-pipeline`` with ``argv`` (the command line by default)."""
    parser = _build_arg_parser()
    args = cli.parse_args(parser, argv)
    target = args.out_dir / "benchmark_pipeline.json"
    cli.check_output(parser, target, args.overwrite, make_parents=True)
    with cli.fail_on_errors(parser):
        config = PipelineConfig(
            mosaics=tuple(dict.fromkeys(args.mosaic)),
            tile=args.tile,
            gpu=not args.cpu_only,
            commands=tuple(dict.fromkeys(args.command)),
        )
        result = run_pipeline_benchmark(config, args.out_dir, log=lambda x: print(x, flush=True))
        write_pipeline_json(result, target)
    machine = "; ".join(f"{k} {v}" for k, v in result.machine.items())
    print("", pipeline_table(result), "", f"Machine: {machine}", sep="\n")


if __name__ == "__main__":
    main()
