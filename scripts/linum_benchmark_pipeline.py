#!/usr/bin/env python3
"""Time the pipeline users run: linum-estimate-transform, linum-stitch-3d and linum-aip on demo
mosaic grids, on the CPU and with --use-gpu, each run a separate process.

The mosaics (--mosaic): 6x6, a 6 x 6 grid of (96, 512, 512) uint16 tiles (1.81 GB); 8x8, an
8 x 8 grid of 256^3 tiles (2 GiB); 8gib, an 8 x 8 grid of (256, 512, 512) tiles for linum-aip
alone. Each is written in linumpy's default layout and with one chunk per tile, as other tools
write mosaics (--layout); --scale shrinks the tiles for a quick run. The page cache is warm.

Every command runs with -v; its table of phases (start-up and imports, CUDA context, kernel
compilation, metadata, level 0, pyramid, final swap) goes into the results. The GPU runs use a
cupy kernel cache in OUT_DIR/kernel_cache, empty before each command's first GPU run: that run
is what a fresh machine pays, reported apart from the next. read_volume of each mosaic (CPU and
GPU, in this process) gives the read ceiling. Without a usable GPU, or with --cpu-only, the GPU
half is skipped with the reason.

Results: OUT_DIR/benchmark_pipeline.md (the tables), benchmark_pipeline.json (date, machine,
versions, commit, command line and every run) and benchmark_pipeline.png (the chart needs
matplotlib: pip install -e ".[bench]"); each command's output in OUT_DIR/logs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from linumpy import cli
from linumpy.cli.options import number

#: The keys of linumpy.bench.pipeline_records.COMMANDS (a test keeps them equal), named here so
#: that parsing the command line imports no benchmark code.
_COMMANDS = ("estimate", "stitch", "aip", "job")

_MOSAICS = ("6x6", "8x8", "8gib")


def _build_arg_parser() -> cli.LinumArgumentParser:
    parser = cli.build_parser(__doc__, prog="linum-benchmark-pipeline")
    parser.add_argument("out_dir", type=Path, help="Folder for the results, logs and mosaics.")
    parser.add_argument(
        "--mosaic",
        nargs="+",
        choices=(*_MOSAICS, "all"),
        default=["6x6", "8x8"],
        help="Mosaics to make and time [%(default)s].",
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
        "--scale",
        type=number(float, 0.01, 1),
        default=1.0,
        help="Tile sides times this, for a quick run [%(default)s].",
    )
    parser.add_argument("--cpu-only", action="store_true", help="Skip the GPU half.")
    parser.add_argument(
        "--no-compile",
        action="store_true",
        help="Do not compile the Python sources to bytecode first.",
    )
    parser.add_argument(
        "--timeout",
        type=number(float, 1),
        default=600.0,
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
    ...         "0.05", "--cpu-only", "--no-compile"]
    >>> with contextlib.redirect_stdout(io.StringIO()) as printed:
    ...     main(argv)
    >>> sorted(os.listdir(out))[:2]  # and benchmark_pipeline.png, the chart, with matplotlib
    ['benchmark_pipeline.json', 'benchmark_pipeline.md']
    >>> "| linum-aip | 6x6 of 8x24x24, one chunk per tile |" in printed.getvalue()
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

        mosaics = _MOSAICS if "all" in args.mosaic else tuple(dict.fromkeys(args.mosaic))
        config = PipelineConfig(
            mosaics=mosaics,
            layouts=tuple(dict.fromkeys(args.layout)),
            scale=args.scale,
            gpu=not args.cpu_only,
            commands=tuple(dict.fromkeys(args.command)),
            compile_sources=not args.no_compile,
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
