#!/usr/bin/env python3
"""Estimate the tile layout of a mosaic grid by phase correlation of overlapping tile pairs.

The input is a mosaic grid (Z, rows * tile_h, cols * tile_w) or its 2D projection; the tile shape
comes from the image's attributes, else its chunks (one chunk per tile), else --tile-shape. Each
pair of adjacent tiles is registered on the projection along z; pairs scoring below --min-score
(no tissue) are ignored. The result, an affine map from tile index (row, col) to the tile's
pixel position, is saved as JSON for linum-stitch-3d/2d. --use-gpu projects and registers on
the GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

from linumpy import cli
from linumpy.cli.options import add_registration_args


def _build_arg_parser() -> cli.LinumArgumentParser:
    parser = cli.build_parser(__doc__, prog="linum-estimate-transform")
    parser.add_argument("input", help="Mosaic grid OME-Zarr image (3D, or its 2D projection).")
    parser.add_argument("output", help="JSON file to write the tile transform to.")
    add_registration_args(parser)
    cli.add_gpu_arg(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``linum-estimate-transform`` with ``argv`` (the command line by default)."""
    parser = _build_arg_parser()
    args = cli.parse_args(parser, argv)
    cli.check_input(parser, args.input)
    output = cli.check_output(parser, args.output, args.overwrite, kind="file")
    with cli.fail_on_errors(parser):
        from linumpy.io import open_array
        from linumpy.mosaic.attrs import read_linumpy_attrs
        from linumpy.mosaic.pipeline import estimate_transform_omezarr
        from linumpy.mosaic.transform import TileTransform, describe_fit

        open_array(args.input)  # malformed metadata: an error naming its file, before any work

        transform, pairs = estimate_transform_omezarr(
            args.input,
            tile_shape=args.tile_shape,
            gpu=cli.resolve_gpu(args.use_gpu),
            progress=True,
            min_score=args.min_score,
        )
        with cli.output_path(output) as partial:
            transform.save(partial)
        truth = read_linumpy_attrs(args.input).get("demo", {}).get("transform")
    print(f"{output}: {describe_fit(transform, pairs, args.min_score)}")
    if truth is not None:
        error = transform.max_position_error(TileTransform.from_dict(truth))
        print(f"largest tile position error against the demo's ground truth: {error:.3f} px")


if __name__ == "__main__":
    main()
