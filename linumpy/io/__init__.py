"""OME-Zarr I/O: writing, lazy opening, and batched reads with :func:`read_volume`."""

from linumpy.io.lazy import open_volume
from linumpy.io.metadata import Axis
from linumpy.io.omezarr import (
    OmeZarrWriter,
    downsample_mean,
    open_array,
    read_axes,
    read_omezarr,
    save_omezarr,
)
from linumpy.io.reader import read_volume
from linumpy.io.staging import clean_staging

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
