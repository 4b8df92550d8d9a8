#!/usr/bin/env python3
"""Convert a TIFF, a .npy file or any zarr array to a zstd-compressed OME-Zarr image.

A TIFF keeps the axes its metadata gives (channels and RGB samples become a channel axis c, a
stack of unnamed pages is z); --series picks one of its series. Voxel sizes come from
--voxel-size (micrometers, one per axis or per space axis), else from the input's metadata, else
are 1; the line printed at the end says which. By default the output is NGFF 0.5 with chunks of
about 1 MiB in shards of whole planes; --no-shards writes one file per chunk. linum-rechunk
rewrites a zarr or OME-Zarr image with its pyramid and metadata as they are.

The data goes through as dask tasks of whole output shards, so inputs larger than memory are
converted with bounded memory: --memory-limit sets the working set per worker, --scheduler runs
the tasks on an existing dask.distributed cluster, --gpus N on one dask-cuda worker per GPU.
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
    number,
    positive_int,
)


def _build_arg_parser() -> cli.LinumArgumentParser:
    parser = cli.build_parser(__doc__, prog="linum-convert-to-omezarr")
    parser.add_argument("input", help="TIFF (.tif/.tiff), .npy file or zarr array/image.")
    parser.add_argument("output", help="OME-Zarr image to create.")
    parser.add_argument(
        "--voxel-size",
        nargs="+",
        type=number(float, 0, strict=True),
        help="Voxel size per axis, or per space axis (micrometers) [the input's own, else 1].",
    )
    parser.add_argument(
        "--series",
        type=number(int, 0),
        help="The TIFF series to convert, from 0 [0].",
    )
    add_layout_args(
        parser, shards_help="Shard shape, NGFF 0.5 only (default: slabs of whole planes)."
    )
    parser.add_argument(
        "--n-levels", type=positive_int, default=1, help="Pyramid levels [%(default)s]."
    )
    add_zstd_level_arg(parser)
    add_ngff_version_arg(parser)
    cli.add_gpu_arg(parser, "Encode")
    add_cluster_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``linum-convert-to-omezarr`` with ``argv`` (the command line by default)."""
    parser = _build_arg_parser()
    args = cli.parse_args(parser, argv)
    cli.check_input(parser, args.input)
    output = cli.check_output(parser, args.output, args.overwrite, kind="directory")
    with cli.fail_on_errors(parser):
        from linumpy.errors import SeriesError
        from linumpy.mosaic.convert import convert_to_omezarr

        gpu = cli.resolve_gpu(args.use_gpu or args.gpus is not None)
        with cluster_from_args(args) as cluster, cli.output_path(output) as partial:
            try:
                done = convert_to_omezarr(
                    args.input,
                    partial,
                    voxel_size=args.voxel_size,
                    series=args.series,
                    chunks=args.chunks,
                    shards=layout_shards(args),
                    n_levels=args.n_levels,
                    zstd_level=args.zstd_level,
                    ngff_version=args.ngff_version,
                    gpu=gpu,
                    progress=True,
                    cluster=cluster,
                )
            except SeriesError as exc:
                parser.error(f"argument --series: {exc}")
    print(f"{output}: written ({done.describe(given='--voxel-size')})")


if __name__ == "__main__":
    main()
