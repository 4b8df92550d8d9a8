#!/usr/bin/env python3
"""Average intensity projection (AIP) of a 3D OME-Zarr volume along z.

Writes the 2D float32 projection as an OME-Zarr image (a mosaic grid's tile layout attributes are
kept, so the projection can be stitched with linum-stitch-2d) and, with --png, an 8-bit preview.
The volume is read out of core, so volumes larger than memory are projected with bounded memory
(--memory-limit, --scheduler, --gpus N).
"""

from __future__ import annotations

from collections.abc import Sequence

from linumpy import cli
from linumpy.cli.cluster_args import add_cluster_args, cluster_from_args, cluster_gpu
from linumpy.cli.options import png_name, positive_int


def _build_arg_parser() -> cli.LinumArgumentParser:
    parser = cli.build_parser(__doc__, prog="linum-aip")
    parser.add_argument("input", help="3D OME-Zarr image (z, y, x).")
    parser.add_argument("output", help="2D OME-Zarr image to create.")
    parser.add_argument(
        "--png", type=png_name, help="Also write an 8-bit PNG preview here (a .png file)."
    )
    parser.add_argument(
        "--n-levels",
        type=positive_int,
        default=1,
        help="Pyramid levels of the output [%(default)s].",
    )
    cli.add_gpu_arg(parser)
    add_cluster_args(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``linum-aip`` with ``argv`` (the command line by default)."""
    parser = _build_arg_parser()
    args = cli.parse_args(parser, argv)
    cli.check_input(parser, args.input)
    output = cli.check_output(parser, args.output, args.overwrite, kind="directory")
    png = cli.check_output(parser, args.png, args.overwrite, kind="file") if args.png else None
    with cli.fail_on_errors(parser):
        from linumpy.io import read_volume
        from linumpy.mosaic.pipeline import projection_omezarr, save_png

        with cluster_from_args(args) as cluster, cli.output_path(output) as partial:
            gpu = cluster_gpu(args, cluster)  # under --scheduler, the workers' GPUs
            shape = projection_omezarr(
                args.input,
                partial,
                gpu=gpu,
                n_levels=args.n_levels,
                progress=True,
                cluster=cluster,
            )
            if png is not None:  # before the projection moves into place: a failure leaves neither
                with cli.output_path(png) as partial_png:
                    save_png(read_volume(partial), partial_png)
    print(f"{output}: projection {shape} float32" + (f", preview {png}" if png else ""))


if __name__ == "__main__":
    main()
