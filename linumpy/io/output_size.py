"""The size of an image about to be written, checked before any work: a transform off by a
factor of 1000 must end in one line, not in hours of planning or a full disk.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from linumpy.errors import DiskSpaceError, LinumpyError
from linumpy.io.engine.memory import format_size

__all__ = ["COMPRESSION_ALLOWANCE", "MAX_OUTPUT_BYTES", "check_output_size"]

#: The largest output (uncompressed, full resolution) written without ``max_bytes``: 64 TiB.
MAX_OUTPUT_BYTES = 64 * 2**40
#: An output is refused when even compressed this many times it would not fit on its disk.
COMPRESSION_ALLOWANCE = 4


def _named(target: str | os.PathLike[str]) -> str:
    """The path a user gave for ``target``: a script's staging copy is named by its output."""
    from linumpy.io.recovery import STAGING_SUFFIX

    path = Path(target)
    for folder in path.parents:
        if folder.name.endswith(STAGING_SUFFIX):
            return os.fspath(folder.parent / path.name)
    return os.fspath(target)


def check_output_size(
    shape: Sequence[int],
    dtype: np.typing.DTypeLike,
    target: str | os.PathLike[str],
    *,
    max_bytes: int | None = None,
    what: str = "output",
    hint: str = "check the transform",
    compression: float = COMPRESSION_ALLOWANCE,
    free_bytes: int | None = None,
) -> int:
    """Refuse, in one line with the size and ``hint``, an output larger than ``max_bytes`` (by
    default :data:`MAX_OUTPUT_BYTES`), or (DiskSpaceError) than the disk of ``target`` can hold
    compressed ``compression`` times (``free_bytes`` by default measured); return its size in
    bytes (uncompressed)."""
    shape = tuple(int(n) for n in shape)
    size = math.prod(shape) * np.dtype(dtype).itemsize
    limit = MAX_OUTPUT_BYTES if max_bytes is None else int(max_bytes)
    where = _named(target)
    start = f"{where}: the {what} of shape {shape} would hold {format_size(size)}"
    if size > limit:
        raise LinumpyError(f"{start}, more than the {format_size(limit)} allowed; {hint}")
    folder = Path(where).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if free_bytes is None:
        try:
            usage = shutil.disk_usage(folder)
        except OSError:  # a folder that cannot be checked: the write will say what fails
            return size
        # nor can one not writable, or a file system of no size (sysfs, some network mounts)
        if usage.total == 0 or not os.access(folder, os.W_OK):
            return size
        free_bytes = usage.free
    if size > free_bytes * compression:
        times = f"{compression:g} times " if compression != 1 else ""
        raise DiskSpaceError(
            f"{start}, more than {times}the {format_size(free_bytes)} free in {folder}; "
            f"free space, or {hint}"
        )
    return size
