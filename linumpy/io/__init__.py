"""OME-Zarr I/O: writing, lazy opening, and batched reads with :func:`read_volume`."""

from linumpy.io.omezarr import (
    OmeZarrWriter,
    downsample_mean,
    open_array,
    read_omezarr,
    save_omezarr,
)
from linumpy.io.lazy import open_volume
from linumpy.io.reader import read_volume

__all__ = [
    "OmeZarrWriter",
    "downsample_mean",
    "open_array",
    "open_volume",
    "read_omezarr",
    "read_volume",
    "save_omezarr",
]
