#!/usr/bin/env python3
"""Stitch a 2D mosaic grid (for instance the AIP of a 3D grid) into one image with a tile transform.

Every tile of the grid (rows * tile_h, cols * tile_w) is placed at the pixel position the transform
(from linum-estimate-transform) gives it; overlaps are blended ("none": later tiles overwrite,
"average": mean, "linear": feathered ramps across the overlaps). The result is an OME-Zarr image
with a pyramid, in the tiles' dtype unless --dtype says otherwise (a projection's float32 stays
float32): values are blended in float32 and, for an integer dtype, rounded to the nearest integer.
"""

from __future__ import annotations

from collections.abc import Sequence

from linumpy.cli import LinumArgumentParser
from linumpy.scripts.linum_stitch_3d import _build_arg_parser as _stitch_parser
from linumpy.scripts.linum_stitch_3d import run

NDIM = 2


def _build_arg_parser() -> LinumArgumentParser:
    return _stitch_parser(NDIM, __doc__)


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``linum-stitch-2d`` with ``argv`` (the command line by default)."""
    run(_build_arg_parser(), argv, NDIM)


if __name__ == "__main__":
    main()
