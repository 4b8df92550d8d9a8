#!/usr/bin/env python3
"""Average intensity projection (AIP) of a 3D OME-Zarr volume along z.

Writes the 2D float32 projection as an OME-Zarr image (a mosaic grid's tile layout attributes are
kept, so the projection can be stitched with linum-stitch-2d) and, with --png, an 8-bit preview.
"""

from __future__ import annotations

from collections.abc import Sequence

from linumpy import cli


def _build_arg_parser() -> cli.LinumArgumentParser:
    parser = cli.build_parser(__doc__, prog="linum-aip")
    parser.add_argument("input", help="3D OME-Zarr image (z, y, x).")
    parser.add_argument("output", help="2D OME-Zarr image to create.")
    parser.add_argument("--png", help="Also write an 8-bit PNG preview here.")
    parser.add_argument(
        "--n-levels", type=int, default=1, help="Pyramid levels of the output [%(default)s]."
    )
    cli.add_overwrite_arg(parser)
    cli.add_verbose_arg(parser)
    cli.add_gpu_arg(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = _build_arg_parser()
    args = cli.parse_args(parser, argv)
    cli.check_input(parser, args.input)
    output = cli.check_output(parser, args.output, args.overwrite)
    png = cli.check_output(parser, args.png, args.overwrite) if args.png else None
    with cli.fail_on_errors(parser):
        from linumpy.io import read_omezarr, save_omezarr
        from linumpy.mosaic.pipeline import (
            average_intensity_projection,
            read_linumpy_attrs,
            save_png,
            write_linumpy_attrs,
        )

        array, voxel_size = read_omezarr(args.input)
        if array.ndim != 3:
            parser.error(f"{args.input}: need a 3D volume, got shape {array.shape}")
        gpu = cli.resolve_gpu(args.use_gpu)
        aip = average_intensity_projection(args.input, gpu=gpu, progress=True)
        mosaic = read_linumpy_attrs(args.input).get("mosaic")
        chunks = mosaic["tile_shape"] if mosaic else None
        with cli.output_path(output) as partial:
            save_omezarr(
                aip, partial, voxel_size=voxel_size[1:], chunks=chunks, n_levels=args.n_levels
            )
            if mosaic:
                write_linumpy_attrs(partial, {"mosaic": mosaic})
        if png is not None:
            with cli.output_path(png) as partial:
                save_png(aip, partial)
    print(f"{output}: projection {tuple(aip.shape)} float32" + (f", preview {png}" if png else ""))


if __name__ == "__main__":
    main()
