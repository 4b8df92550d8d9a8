"""Exceptions raised by linumpy."""

from __future__ import annotations

__all__ = ["ChunkDecodeError", "GPUUnavailableError", "LinumpyError"]


class LinumpyError(Exception):
    """Base class of every error linumpy raises on purpose."""


class ChunkDecodeError(LinumpyError):
    """A stored chunk could not be decoded into valid data.

    Parameters
    ----------
    key
        The chunk's store key (for example ``"0/c/1/0/2"``), or a description of
        the chunk's location inside a shard.
    reason
        Why the chunk was rejected.
    """

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"chunk {key!r}: {reason}")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.key, self.reason))


class GPUUnavailableError(LinumpyError):
    """A GPU code path was requested but the GPU, its driver or a library is missing."""
