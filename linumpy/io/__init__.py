"""OME-Zarr I/O: writing, lazy opening, and batched reads with :func:`read_volume`."""

from linumpy.io.downsample import downsample_mean
from linumpy.io.lazy import open_volume
from linumpy.io.metadata import Axis
from linumpy.io.omezarr import open_array, read_axes, read_omezarr
from linumpy.io.reader import read_volume
from linumpy.io.recovery import clean_staging
from linumpy.io.save import save_omezarr
from linumpy.io.writer import OmeZarrWriter

__all__ = [
    "Axis",
    "OmeZarrWriter",
    "clean_staging",
    "downsample_mean",
    "open_array",
    "open_volume",
    "read_axes",
    "read_omezarr",
    "read_volume",
    "save_omezarr",
]
