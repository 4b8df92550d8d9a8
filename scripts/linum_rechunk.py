#!/usr/bin/env python3
"""Rewrite a zarr array or OME-Zarr image in the layout the GPU reads fastest, metadata kept.

Every array of the input (each pyramid level, labels too) is copied value for value into NGFF
0.5 shards of inner chunks of about 1 MiB: one tile per shard for a mosaic grid, else slabs of
whole planes. Group and array attributes are kept (moved to where NGFF 0.5 keeps them for an
NGFF 0.4 input); the pyramid levels are copied, not recomputed.

--chunks and --shards choose another layout (--no-shards: one file per chunk); --ngff-version
0.4 writes zarr v2. The copy runs out of core as dask tasks (--memory-limit, --scheduler); the
new image is written beside the output and moved into place once complete.
"""

from __future__ import annotations

from collections.abc import Sequence

from linumpy import cli
from linumpy.cli.cluster_args import add_cluster_args, cluster_from_args
from linumpy.cli.options import (
    add_layout_args,
    add_ngff_version_arg,
    add_zstd_level_arg,
    layout_shards,
)


def _build_arg_parser() -> cli.LinumArgumentParser:
    parser = cli.build_parser(__doc__, prog="linum-rechunk")
    parser.add_argument("input", help="zarr array or OME-Zarr image (NGFF 0.4 or 0.5).")
    parser.add_argument("output", help="The rewritten copy to create.")
    add_layout_args(
        parser,
        chunks_help="(Inner) chunk shape of every array (default: about 1 MiB, dividing a tile).",
        shards_help="Shard shape, a multiple of the chunks (default: a tile, or slabs of whole "
        "planes).",
    )
    add_ngff_version_arg(parser, "OME-NGFF version of the output")
    add_zstd_level_arg(parser)
    cli.add_gpu_arg(parser, "Read and encode")
    add_cluster_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``linum-rechunk`` with ``argv`` (the command line by default)."""
    parser = _build_arg_parser()
    args = cli.parse_args(parser, argv)
    cli.check_input(parser, args.input)
    output = cli.check_output(parser, args.output, args.overwrite, kind="directory")
    with cli.fail_on_errors(parser):
        from linumpy.io.rechunk import rechunk

        gpu = cli.resolve_gpu(args.use_gpu or args.gpus is not None)
        with cluster_from_args(args) as cluster, cli.output_path(output) as partial:
            done = rechunk(
                args.input,
                partial,
                chunks=args.chunks,
                shards=layout_shards(args),
                ngff_version=args.ngff_version,
                zstd_level=args.zstd_level,
                gpu=gpu,
                progress=True,
                cluster=cluster,
            )
    size = done.nbytes / 2**20
    amount = f"{size:.0f} MiB" if size >= 1 else f"{done.nbytes / 2**10:.0f} KiB"
    print(f"{output}: written, {amount} copied")
    print("\n".join("  " + line for line in done.describe().splitlines()))


if __name__ == "__main__":
    main()
