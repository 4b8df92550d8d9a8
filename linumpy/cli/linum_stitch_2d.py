#!/usr/bin/env python3
"""Stitch a 2D mosaic grid (for instance the AIP of a 3D grid) into one image with a tile transform.

Every tile of the grid (rows * tile_h, cols * tile_w) is placed at the pixel position the transform
(from linum-estimate-transform) gives it; overlaps are blended ("none": later tiles overwrite,
"average": mean, "linear": feathered ramps across the overlaps). The result is a float32 OME-Zarr
image with a pyramid.
"""

from __future__ import annotations

from collections.abc import Sequence

from linumpy.cli import LinumArgumentParser
from linumpy.cli.linum_stitch_3d import _build_arg_parser as _stitch_parser
from linumpy.cli.linum_stitch_3d import run

NDIM = 2


def _build_arg_parser() -> LinumArgumentParser:
    return _stitch_parser(NDIM, __doc__)


def main(argv: Sequence[str] | None = None) -> None:
    run(_build_arg_parser(), argv, NDIM)


if __name__ == "__main__":
    main()
