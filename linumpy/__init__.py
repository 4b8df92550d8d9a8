"""linumpy: serial-section OCT microscopy toolkit with GPU OME-Zarr I/O."""

from linumpy.errors import ChunkDecodeError, GPUUnavailableError, LinumpyError

__version__ = "0.1.0"

__all__ = ["ChunkDecodeError", "GPUUnavailableError", "LinumpyError", "__version__"]
