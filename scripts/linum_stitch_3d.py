#!/usr/bin/env python3
"""Stitch a 3D mosaic grid into one volume with a tile transform.

Every tile of the grid (Z, rows * tile_h, cols * tile_w) is placed at the pixel position the
transform (from linum-estimate-transform) gives it; overlaps are blended ("none": later tiles
overwrite, "average": mean, "linear": feathered ramps across the overlaps). The result is an
OME-Zarr image with a pyramid, in the tiles' dtype unless --dtype says otherwise (values are
blended in float32, then rounded for an integer dtype). With --use-gpu the grid is read,
stitched and encoded on the GPU.

The work runs out of core as dask tasks, so grids larger than memory are stitched with bounded
memory: --memory-limit sets the working set per worker, --scheduler runs the tasks on an
existing dask.distributed cluster, --gpus N on one dask-cuda worker per GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

from linumpy import cli
from linumpy.cli.cluster_args import add_cluster_args, cluster_from_args, cluster_gpu
from linumpy.cli.options import (
    add_blending_args,
    add_layout_args,
    add_zstd_level_arg,
    stitch_options,
)

#: Dimensionality of the mosaic grid this script stitches.
NDIM = 3


def _build_arg_parser(ndim: int = NDIM, doc: str | None = __doc__) -> cli.LinumArgumentParser:
    parser = cli.build_parser(doc, prog=f"linum-stitch-{ndim}d")
    parser.add_argument("input", help=f"{ndim}D mosaic grid OME-Zarr image.")
    parser.add_argument("transform", help="Tile transform JSON (linum-estimate-transform).")
    parser.add_argument("output", help="Stitched OME-Zarr image to create.")
    add_blending_args(parser)
    add_layout_args(
        parser,
        chunks_help="(Inner) chunk shape of the output (default: about 1 MiB each).",
        shards_help="Shard shape of the output, a multiple of the chunks (default: slabs of "
        "whole planes).",
    )
    add_zstd_level_arg(parser)
    cli.add_gpu_arg(parser, "Read, stitch and encode")
    add_cluster_args(parser)
    return parser


def run(parser: cli.LinumArgumentParser, argv: Sequence[str] | None, ndim: int) -> None:
    """Parse ``argv`` and stitch a ``ndim``-D mosaic grid (shared by linum-stitch-2d)."""
    args = cli.parse_args(parser, argv)
    cli.check_input(parser, args.input)
    cli.check_input(parser, args.transform)
    output = cli.check_output(parser, args.output, args.overwrite, kind="directory")
    with cli.fail_on_errors(parser):
        from linumpy.io import open_array
        from linumpy.mosaic.pipeline import stitch_omezarr
        from linumpy.mosaic.stitch import stitch_dtype
        from linumpy.mosaic.transform import TileTransform

        transform = TileTransform.load(args.transform)
        source = open_array(args.input)
        if source.ndim != ndim:
            parser.error(
                f"{args.input}: a {ndim}D mosaic grid is needed, this one is {source.ndim}D"
            )
        stitch_dtype(source.dtype, args.dtype, option="--dtype")
        with cluster_from_args(args) as cluster, cli.output_path(output) as partial:
            gpu = cluster_gpu(args, cluster)  # under --scheduler, the workers' GPUs
            stitch_omezarr(
                args.input,
                partial,
                transform,
                gpu=gpu,
                progress=True,
                cluster=cluster,
                **stitch_options(args),
            )
    print(f"{output}: stitched {transform.n_tiles} tiles ({args.blending} blending)")


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``linum-stitch-3d`` with ``argv`` (the command line by default)."""
    run(_build_arg_parser(), argv, NDIM)


if __name__ == "__main__":
    main()
