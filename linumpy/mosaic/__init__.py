"""Mosaic grids of serial-OCT tiles: their layout, stitching and projection, on numpy or cupy.

A mosaic grid is a ``([Z,] rows * tile_h, cols * tile_w)`` image of tiles side by side, as
:func:`make_demo_data` writes one. :func:`estimate_transform_omezarr` finds the
:class:`TileTransform` that places each tile, :func:`stitch_omezarr` stitches the grid into one
image out of core, :func:`projection_omezarr` writes its average intensity projection, and
:func:`run_mosaic_job` does all three in one process. :func:`stitch` and
:func:`estimate_transform` work on arrays in memory.
"""

from linumpy.mosaic.convert import Converted, convert_to_omezarr
from linumpy.mosaic.demo import DemoMosaic, generate_demo_mosaic, make_demo_data, read_demo_truth
from linumpy.mosaic.job import JobOutputs, JobResult, run_mosaic_job
from linumpy.mosaic.pipeline import (
    average_intensity_projection,
    estimate_transform_omezarr,
    projection_omezarr,
    stitch_omezarr,
)
from linumpy.mosaic.registration import estimate_transform
from linumpy.mosaic.stitch import BLENDING_MODES, stitch
from linumpy.mosaic.transform import PairMeasurement, TileTransform

__all__ = [
    "BLENDING_MODES",
    "Converted",
    "DemoMosaic",
    "JobOutputs",
    "JobResult",
    "PairMeasurement",
    "TileTransform",
    "average_intensity_projection",
    "convert_to_omezarr",
    "estimate_transform",
    "estimate_transform_omezarr",
    "generate_demo_mosaic",
    "make_demo_data",
    "projection_omezarr",
    "read_demo_truth",
    "run_mosaic_job",
    "stitch",
    "stitch_omezarr",
]
