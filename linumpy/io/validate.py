"""Checks of what an image's metadata declares, when it is opened: shapes no real array has,
empty levels, axes that do not match the rank, scales not finite and positive; and a store that
opens only regular files (a FIFO in place of a chunk would block every read).
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Iterable, Sequence
from typing import Any

from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest
from zarr.storage import LocalStore

from linumpy.errors import ChunkDecodeError, LinumpyError

__all__: list[str] = []

#: An array of more bytes than this (8 PiB) is taken for corrupt metadata and refused when opened.
MAX_ARRAY_BYTES = 2**53


def check_array_shape(
    shape: Sequence[int], itemsize: int, source: str | os.PathLike[str], *, image: bool
) -> None:
    """Refuse, before any work starts, a shape no real array has (more than
    :data:`MAX_ARRAY_BYTES`), and for an OME-Zarr image level (``image``) an empty one."""
    shape = tuple(int(n) for n in shape)
    nbytes = math.prod(shape) * itemsize
    if nbytes > MAX_ARRAY_BYTES:
        raise LinumpyError(
            f"{os.fspath(source)}: shape {shape} holds {nbytes / 2**50:.1f} PiB (at most "
            f"{MAX_ARRAY_BYTES // 2**50} PiB are opened): corrupt metadata?"
        )
    if image and 0 in shape:
        raise LinumpyError(
            f"{os.fspath(source)}: shape {shape} holds no voxel: an image needs at least one "
            "along each axis"
        )


def check_level_axes(
    axes: Sequence[Any] | None, ndim: int, level: int, source: str | os.PathLike[str]
) -> None:
    """Refuse multiscales ``axes`` whose count is not the rank of level ``level``'s array."""
    if axes is not None and len(axes) != ndim:
        raise LinumpyError(
            f"{os.fspath(source)}: {len(axes)} axes for the {ndim}-D array of level {level}"
        )


def check_scale(scale: Sequence[float], level: int, source: str | os.PathLike[str]) -> None:
    """Refuse a level's scale unless every value is finite and positive."""
    if not all(math.isfinite(v) and v > 0 for v in scale):
        raise LinumpyError(
            f"{os.fspath(source)}: level {level}'s scale {list(scale)} must hold finite positive "
            "numbers"
        )


_METADATA_NAMES = ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata")


def check_regular_file(path: str | os.PathLike[str], key: str) -> None:
    """Refuse ``path`` (store key ``key``) when it exists but is not a regular file (a FIFO, a
    directory, a device), before anything opens it; a missing file passes."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if stat.S_ISREG(mode):
        return
    kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else None
    kind = kind or "not a regular file"
    if key.rpartition("/")[2] in _METADATA_NAMES:
        raise LinumpyError(f"{os.fspath(path)}: {kind}, not a metadata file")
    raise ChunkDecodeError(os.fspath(path), f"{kind}, not a chunk file")


class RegularFileStore(LocalStore):
    """zarr's :class:`~zarr.storage.LocalStore`, refusing a FIFO, a directory or a device in place
    of a chunk or metadata file (zarr would block on a FIFO, or read a directory as no chunk)."""

    async def get(
        self,
        key: str,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        check_regular_file(self.root / key, key)
        return await super().get(key, prototype, byte_range)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        key_ranges = list(key_ranges)
        for key, _ in key_ranges:
            check_regular_file(self.root / key, key)
        return await super().get_partial_values(prototype, key_ranges)
