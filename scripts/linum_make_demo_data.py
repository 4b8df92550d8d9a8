#!/usr/bin/env python3
"""Write a synthetic serial-OCT mosaic grid (the demo data) as a zstd OME-Zarr image.

The grid (Z, rows * tile_h, cols * tile_w) holds overlapping 3D tiles of a tissue section with
speckle, depth attenuation and empty background tiles; the true tile layout is stored in the
image's attributes ("linumpy.demo"), so linum-estimate-transform can be checked against it. One
shard per tile of inner chunks of about 1 MiB; --no-shards writes one chunk per tile instead (the
layout of most acquisition software), --chunks and --shards choose other shapes.
"""

from __future__ import annotations

from collections.abc import Sequence

from linumpy import cli
from linumpy.cli.options import number, positive_int


def _build_arg_parser() -> cli.LinumArgumentParser:
    parser = cli.build_parser(__doc__, prog="linum-make-demo-data")
    parser.add_argument("output", help="OME-Zarr image to create (e.g. mosaic.ome.zarr).")
    parser.add_argument(
        "--grid",
        nargs=2,
        type=positive_int,
        default=(4, 5),
        metavar=("ROWS", "COLS"),
        help="Tiles along y and x [%(default)s].",
    )
    parser.add_argument(
        "--tile-shape",
        nargs=3,
        type=positive_int,
        default=(64, 128, 128),
        metavar=("Z", "H", "W"),
        help="Voxels of one tile [%(default)s].",
    )
    parser.add_argument(
        "--overlap",
        type=number(float, 0, 0.5),
        default=0.2,
        help="Fraction of a tile shared with its neighbour, 0 to 0.5 [%(default)s].",
    )
    parser.add_argument(
        "--rotation", type=float, default=1.5, help="Camera rotation against the stage, degrees."
    )
    parser.add_argument("--seed", type=int, default=0, help="Random seed [%(default)s].")
    parser.add_argument(
        "--chunks",
        nargs=3,
        type=positive_int,
        metavar=("Z", "Y", "X"),
        help="Inner chunk shape (default: about 1 MiB, dividing a tile).",
    )
    shards = parser.add_mutually_exclusive_group()
    shards.add_argument(
        "--shards",
        nargs=3,
        type=positive_int,
        metavar=("Z", "Y", "X"),
        help="Shard shape, a multiple of the chunks (default: one tile).",
    )
    shards.add_argument(
        "--no-shards",
        action="store_true",
        help="No shards: one file per chunk (by default one chunk per tile).",
    )
    cli.add_gpu_arg(parser, "Generate the data")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``linum-make-demo-data`` with ``argv`` (the command line by default)."""
    parser = _build_arg_parser()
    args = cli.parse_args(parser, argv)
    with cli.fail_on_errors(parser):  # before anything is written, the parent folders included
        from linumpy.mosaic.demo import check_demo_space

        check_demo_space(args.output, tuple(args.grid), tuple(args.tile_shape))
    output = cli.check_output(
        parser, args.output, args.overwrite, make_parents=True, kind="directory"
    )
    with cli.fail_on_errors(parser):
        from linumpy._numpy_or_cupy import gpu_module
        from linumpy.mosaic.demo import make_demo_data

        xp = gpu_module(cli.resolve_gpu(args.use_gpu))
        with cli.output_path(output) as partial:
            demo = make_demo_data(
                partial,
                grid_shape=tuple(args.grid),
                tile_shape=tuple(args.tile_shape),
                overlap=args.overlap,
                rotation_deg=args.rotation,
                seed=args.seed,
                chunks=args.chunks,
                shards=None if args.no_shards else args.shards or "auto",
                xp=xp,
                progress=True,
            )
    size = demo.mosaic.nbytes / 2**20
    print(
        f"{output}: mosaic grid {demo.mosaic.shape} uint16 ({size:.0f} MiB), "
        f"{args.grid[0]}x{args.grid[1]} tiles"
    )


if __name__ == "__main__":
    main()
