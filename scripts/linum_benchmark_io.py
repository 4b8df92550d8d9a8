"""Measure how fast zstd zarr volumes are read and written, on the CPU and the GPU, side by side
with the same run's ceilings.

An OCT-like volume (speckle under depth attenuation, a noise floor everywhere: no all-zero
chunks) is generated, or taken from --input (a zarr array, or an OME-Zarr image's level 0), and
written in each layout: 128^3 and 64^3 chunks, and both in 128x512x512 shards by default,
each twice: without checksums and with linumpy's (zstd's content checksum and a crc32c, what
linumpy writes by default; --checksum on or off for one of them).
For each layout, in GB/s of decompressed volume (a warm-up run, then medians of repeats, page
cache warm):

- CPU reads: linumpy read_volume, zarr, tensorstore and zarr with the zarrs codec pipeline (these
  two when installed);
- GPU reads: read_volume(gpu=True), zarr in gpu_zarr_context (nvCOMP codec), zarr enable_gpu();
- writes: zarr's CPU write, linumpy's write engine, and the GPU writes (nvCOMP encode);
  --no-writes skips them;
- ceilings: N-thread os.preadv of the stored files (into pinned memory with a GPU), numcodecs
  decode of the frames in memory (N threads), pinned host->device copy, nvCOMP decode of all
  frames on the device in one call.

Every read is checked against the volume. The table printed last gives each row's GB/s and its
fraction of its ceilings; OUT_DIR/benchmark_io.json holds the run (machine, versions, every row).
Without a GPU, or with --cpu-only, the CPU rows and ceilings run; e.g. a quick CPU run:
linum-benchmark-io OUT --size-mib 64 --chunks 64 --no-shard --cpu-only --checksum on
"""

from __future__ import annotations

import argparse
import functools
import math
import tempfile
from pathlib import Path

import numpy as np

from linumpy import settings
from linumpy.bench import BenchConfig, BenchResult, Layout, run_benchmark
from linumpy.bench.report import header, summary_table, write_json
from linumpy.bench.run import gpu_reason
from linumpy.cli import (
    add_overwrite_arg,
    add_verbose_arg,
    build_parser,
    check_input,
    fail_on_errors,
    parse_args,
)
from linumpy.cli.options import add_zstd_level_arg, positive_int
from linumpy.io import open_array

_DEFAULT_SHARD = BenchConfig().layouts[-1].shards


def _build_arg_parser() -> argparse.ArgumentParser:
    p = build_parser(__doc__, prog="linum-benchmark-io")
    p.add_argument("out_dir", type=Path, help="Folder for the JSON and the volumes measured.")
    p.add_argument(
        "--input", type=Path, help="Benchmark this zarr array or OME-Zarr image (level 0)."
    )
    volume = p.add_argument_group("generated volume")
    volume.add_argument(
        "--size-mib",
        type=positive_int,
        default=1024,
        help="Volume size: Z x 1024 x 1024 voxels [%(default)s].",
    )
    volume.add_argument(
        "--shape", type=positive_int, nargs=3, metavar=("Z", "Y", "X"), help="Volume shape."
    )
    volume.add_argument("--dtype", default="uint16", help="Volume dtype [%(default)s].")
    add_zstd_level_arg(volume)
    layout = p.add_argument_group("layouts")
    layout.add_argument(
        "--chunks",
        type=positive_int,
        nargs="+",
        default=[128, 64],
        help="Cubic chunk edges [128 64].",
    )
    layout.add_argument(
        "--shard",
        type=positive_int,
        nargs=3,
        default=list(_DEFAULT_SHARD),
        metavar=("Z", "Y", "X"),
        help="Shard shape of the sharded layouts [128 512 512].",
    )
    layout.add_argument(
        "--shard-chunks",
        "--shard-chunk",
        dest="shard_chunks",
        type=positive_int,
        nargs="+",
        default=[128, 64],
        help="Inner chunk edges of the sharded layouts [128 64].",
    )
    layout.add_argument("--no-shard", action="store_true", help="Skip the sharded layouts.")
    layout.add_argument(
        "--checksum",
        choices=("off", "on", "both"),
        default="both",
        help="Checksums as linumpy writes them by default (zstd content checksum, then a crc32c "
        "of each frame; reads verify both): on, off, or both: each layout twice, to measure "
        "their cost [%(default)s].",
    )
    rows = p.add_argument_group("rows")
    rows.add_argument(
        "--repeats", type=positive_int, default=3, help="Timed runs per row [%(default)s]."
    )
    rows.add_argument("--cpu-only", action="store_true", help="Run the CPU rows only.")
    rows.add_argument("--no-writes", action="store_true", help="Skip the write rows.")
    add_overwrite_arg(p)
    add_verbose_arg(p)
    return p


def _layouts(args: argparse.Namespace, ndim: int) -> tuple[Layout, ...]:
    """The layouts to measure; with ``--checksum both`` each without then with checksums, one
    after the other, so that a change in the machine's load between layouts does not show as
    the checksums' cost."""
    checksums = {"off": [False], "on": [True], "both": [False, True]}[args.checksum]
    shapes = [(edge, None) for edge in args.chunks]
    if not args.no_shard:
        shapes += [(edge, args.shard) for edge in args.shard_chunks]
    return tuple(
        Layout.cubic(edge, ndim, shards=shards, checksum=checksum)
        for edge, shards in shapes
        for checksum in checksums
    )


def _config(parser: argparse.ArgumentParser, args: argparse.Namespace) -> BenchConfig:
    try:
        dtype = np.dtype(args.dtype)
    except TypeError:
        parser.error(f"argument --dtype: not a numpy dtype: {args.dtype!r}")
    if dtype.kind not in "iuf":
        parser.error(f"argument --dtype: an integer or float type is needed, got {args.dtype!r}")
    shape = tuple(args.shape) if args.shape else None
    if shape is None:
        depth = args.size_mib * 2**20 // (1024 * 1024 * dtype.itemsize)
        if depth < 1:
            parser.error(f"argument --size-mib: {args.size_mib} MiB is less than one 1024^2 slice")
        shape = (depth, 1024, 1024)
    nbytes = math.prod(shape) * dtype.itemsize
    option = "--shape" if args.shape else "--size-mib"
    if args.input is not None:
        check_input(parser, args.input)
        with fail_on_errors(parser):
            array = open_array(args.input, 0)
        nbytes, option = array.nbytes, "--input"
    _check_memory(parser, nbytes, option)
    gpu = not args.cpu_only
    if gpu:
        reason = gpu_reason()
        if reason is not None:
            print(f"no GPU ({reason}): running the CPU rows only", flush=True)
            gpu = False
    return BenchConfig(
        shape=shape,
        dtype=dtype.name,
        zstd_level=settings.get().zstd_level if args.zstd_level is None else args.zstd_level,
        layouts=_layouts(args, len(shape)),
        input=args.input,
        gpu=gpu,
        writes=not args.no_writes,
        repeats=args.repeats,
        workdir=args.out_dir,
    )


#: Host memory a run needs, in volumes: the volume, a read's result, the files and decoded frames.
_VOLUMES_IN_MEMORY = 3.5


def _check_memory(parser: argparse.ArgumentParser, nbytes: int, option: str) -> None:
    """Refuse a volume that would not fit in the memory available (Linux's MemAvailable)."""
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        available = int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return
    needed = _VOLUMES_IN_MEMORY * nbytes
    if needed > available:
        parser.error(
            f"argument {option}: a volume of {nbytes / 2**30:.1f} GiB needs about "
            f"{needed / 2**30:.1f} GiB of memory; {available / 2**30:.1f} GiB is available"
        )


def _check_out_dir(parser: argparse.ArgumentParser, out_dir: Path, overwrite: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        parser.error(f"output {str(out_dir)!r} is not a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        parser.error(f"output {str(out_dir)!r} exists and is not empty; use -f to overwrite")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    except OSError as exc:
        parser.error(f"cannot write to output {str(out_dir)!r}: {exc.strerror or exc}")


def main(argv: list[str] | None = None) -> None:
    """Run ``linum-benchmark-io`` (see the module docstring).

    Examples
    --------
    A CPU run on a tiny volume in 16^3 chunks; the table is printed (not shown here):

    >>> import contextlib, io, os, tempfile
    >>> out = tempfile.mkdtemp() + "/bench"
    >>> argv = [out, "--shape", "16", "32", "32", "--chunks", "16", "--no-shard", "--cpu-only"]
    >>> with contextlib.redirect_stdout(io.StringIO()) as printed:
    ...     main([*argv, "--repeats", "1"])
    >>> os.listdir(out)
    ['benchmark_io.json']
    >>> "| 16^3 | linumpy read_volume (CPU) |" in printed.getvalue()
    True
    """
    parser = _build_arg_parser()
    args = parse_args(parser, argv)
    config = _config(parser, args)
    _check_out_dir(parser, args.out_dir, args.overwrite)
    target = args.out_dir / "benchmark_io.json"
    with fail_on_errors(parser):
        # saved after each layout too: a run cut short keeps the layouts measured
        result = run_benchmark(config, on_layout=functools.partial(_saved, target))
        write_json(result, target)
    print("\n".join(header(result)), "", summary_table(result.rows), sep="\n", flush=True)


def _saved(target: Path, result: BenchResult) -> None:
    write_json(result, target)
    print(f"{result.rows[-1].layout}: measured", flush=True)


if __name__ == "__main__":
    main()
