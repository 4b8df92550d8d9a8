"""Exceptions raised by linumpy."""

from __future__ import annotations

__all__ = ["ChunkDecodeError", "GPUUnavailableError", "LinumpyError"]


class LinumpyError(Exception):
    """Base class of every error linumpy raises on purpose.

    Examples
    --------
    >>> from linumpy.io import read_volume
    >>> try:
    ...     read_volume("/no/such/volume.ome.zarr")
    ... except LinumpyError as exc:
    ...     print(exc)
    /no/such/volume.ome.zarr: no such file or directory
    """


class ChunkDecodeError(LinumpyError):
    """A stored chunk could not be decoded into valid data.

    Parameters
    ----------
    key
        The chunk's store key (for example ``"0/c/1/0/2"``), or a description of
        the chunk's location inside a shard.
    reason
        Why the chunk was rejected.

    Examples
    --------
    >>> from linumpy.io.zstd_frames import decode_zstd_cpu
    >>> try:
    ...     decode_zstd_cpu(b"junk", key="0/c/0")
    ... except ChunkDecodeError as exc:
    ...     print(exc.key, "|", exc.reason)
    0/c/0 | not zstd data: bad magic number 0x6B6E756A
    """

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"chunk {key!r}: {reason}")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.key, self.reason))


class GPUUnavailableError(LinumpyError):
    """A GPU code path was requested but the GPU, its driver or a library is missing.

    Examples
    --------
    Fall back to the CPU reader where there is no GPU:

    >>> import numpy as np, tempfile
    >>> from linumpy.io import read_volume, save_omezarr
    >>> path = tempfile.mkdtemp() + "/volume.ome.zarr"
    >>> save_omezarr(np.zeros((8, 8, 8), np.uint16), path, voxel_size=(1, 1, 1))
    >>> try:
    ...     volume = read_volume(path, gpu=True)
    ... except GPUUnavailableError:
    ...     volume = read_volume(path)
    >>> volume.shape
    (8, 8, 8)
    """
