#!/usr/bin/env python3
"""Run a mosaic grid's whole job in one process: its tile layout, the 3D stitch, the projection.

The steps of linum-estimate-transform, linum-stitch-3d and linum-aip (on the stitched image), one
after the other, into OUTPUT_DIR: transform.json, stitched.ome.zarr and stitched_aip.ome.zarr
(and, with --png, stitched_aip.png). One process pays Python's start-up and imports, and with
--use-gpu the CUDA context, kernels and staging buffers, once instead of three times. Each
output is moved into place once complete: an interrupted run leaves the outputs it finished.
"""

from __future__ import annotations

from collections.abc import Sequence

from linumpy import cli
from linumpy.cli.cluster_args import add_cluster_args, cluster_from_args, cluster_gpu
from linumpy.cli.options import (
    add_blending_args,
    add_layout_args,
    add_registration_args,
    add_zstd_level_arg,
    stitch_options,
)


def _build_arg_parser() -> cli.LinumArgumentParser:
    parser = cli.build_parser(__doc__, prog="linum-mosaic-pipeline")
    parser.add_argument("input", help="3D mosaic grid OME-Zarr image.")
    parser.add_argument("output_dir", help="Folder of the outputs (created if missing).")
    add_registration_args(parser)
    add_blending_args(parser, "the stitched image")
    add_layout_args(
        parser,
        chunks_help="(Inner) chunk shape of the stitched image (default: about 1 MiB each).",
        shards_help="Shard shape of the stitched image, a multiple of the chunks (default: "
        "slabs of whole planes).",
    )
    add_zstd_level_arg(parser)
    parser.add_argument(
        "--png", action="store_true", help="Also write stitched_aip.png, an 8-bit preview."
    )
    cli.add_gpu_arg(parser, "Read, register, stitch and encode")
    add_cluster_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``linum-mosaic-pipeline`` with ``argv`` (the command line by default)."""
    parser = _build_arg_parser()
    args = cli.parse_args(parser, argv)
    cli.check_input(parser, args.input)
    with cli.fail_on_errors(parser):
        from linumpy.io import open_array
        from linumpy.mosaic.job import JobOutputs, run_mosaic_job
        from linumpy.mosaic.stitch import stitch_dtype
        from linumpy.mosaic.transform import describe_fit

        source = open_array(args.input)  # malformed metadata: an error naming its file first
        if source.ndim != 3:
            parser.error(f"{args.input}: a 3D mosaic grid is needed, this one is {source.ndim}D")
        stitch_dtype(source.dtype, args.dtype, option="--dtype")
        with cli.output_folder(parser, args.output_dir) as folder:
            outputs = JobOutputs.in_folder(folder, png=args.png)
            for path, kind in zip(outputs.paths(), ("file", "directory", "directory", "file")):
                cli.check_output(parser, path, args.overwrite, kind=kind)
            with cluster_from_args(args) as cluster:
                gpu = cluster_gpu(args, cluster)  # under --scheduler, the workers' GPUs
                result = run_mosaic_job(
                    args.input,
                    outputs,
                    gpu=gpu,
                    tile_shape=args.tile_shape,
                    min_score=args.min_score,
                    progress=True,
                    cluster=cluster,
                    **stitch_options(args),
                )
    print(f"{outputs.transform}: {describe_fit(result.transform, result.pairs, args.min_score)}")
    print(
        f"{outputs.stitched}: stitched {result.transform.n_tiles} tiles ({args.blending} blending)"
    )
    preview = f", preview {outputs.png}" if outputs.png else ""
    print(f"{outputs.projection}: projection {result.projection_shape} float32{preview}")


if __name__ == "__main__":
    main()
