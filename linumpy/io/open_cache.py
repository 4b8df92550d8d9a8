"""Arrays opened once per path, handed out again while their metadata files stay the same.

Opening an OME-Zarr image's level with zarr (reading, parsing and validating its metadata) is most
of a small region's read, and a cost paid by every dask block. An opened array is kept (the last
:data:`LIMIT`) with the bytes of the metadata files it was opened from, and handed out again while
those bytes are the same; zarr reads chunks by path at every read, so a read always sees the chunk
files as they are now.

An array is trusted only once two openings, with the metadata read before and after each, agree:
metadata changed while zarr was reading it can then never pair an array with newer bytes.
"""

from __future__ import annotations

import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import zarr

__all__ = ["LIMIT", "clear", "metadata_bytes", "open_once"]

#: Opened arrays kept.
LIMIT = 64
_NAMES = ("zarr.json", ".zattrs", ".zarray", ".zgroup", ".zmetadata")


@dataclass(frozen=True, slots=True)
class _Entry:
    array: zarr.Array
    folders: tuple[str, ...]
    signature: tuple[bytes | None, ...]
    trusted: bool


_lock = threading.Lock()
_opened: OrderedDict[tuple[str, int], _Entry] = OrderedDict()


def metadata_bytes(folders: Sequence[str]) -> tuple[bytes | None, ...]:
    """The bytes of every zarr metadata file in ``folders`` (None where there is none).

    Examples
    --------
    >>> import tempfile, zarr
    >>> path = tempfile.mkdtemp() + "/a.zarr"
    >>> _ = zarr.create_array(path, shape=(4,), dtype="uint8")
    >>> [b is not None for b in metadata_bytes([path])]
    [True, False, False, False, False]
    """
    found: list[bytes | None] = []
    for folder in folders:
        for name in _NAMES:
            try:  # opened without blocking: a FIFO there is no metadata, and no hang
                fd = os.open(os.path.join(folder, name), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
            except OSError:  # not there
                found.append(None)
                continue
            with os.fdopen(fd, "rb") as file:
                found.append(file.read() if stat.S_ISREG(os.fstat(fd).st_mode) else None)
    return tuple(found)


def open_once(
    path: str | os.PathLike[str],
    level: int,
    open_fresh: Callable[[], tuple[zarr.Array, Sequence[str]]],
) -> zarr.Array:
    """``open_fresh()``'s array for ``(path, level)``, opened again only when needed.

    Parameters
    ----------
    path, level
        What is opened (the key).
    open_fresh
        Opens it: the array, and the folders whose metadata files it was opened from.

    Examples
    --------
    >>> import tempfile, zarr
    >>> path = tempfile.mkdtemp() + "/a.zarr"
    >>> _ = zarr.create_array(path, shape=(4,), dtype="uint8")
    >>> def fresh():
    ...     return zarr.open_array(path, mode="r"), [path]
    >>> first, second = open_once(path, 0, fresh), open_once(path, 0, fresh)
    >>> open_once(path, 0, fresh) is second, first is second  # trusted from the second opening
    (True, False)
    """
    key = (os.path.abspath(path), level)
    with _lock:
        entry = _opened.get(key)
    before = None
    if entry is not None:
        before = metadata_bytes(entry.folders)
        if entry.trusted and before == entry.signature:
            with _lock:
                if key in _opened:
                    _opened.move_to_end(key)
            return entry.array
    array, folders = open_fresh()
    folders = tuple(os.fspath(folder) for folder in folders)
    after = metadata_bytes(folders)
    trusted = entry is not None and folders == entry.folders and before == after == entry.signature
    with _lock:
        _opened[key] = _Entry(array, folders, after, trusted)
        _opened.move_to_end(key)
        while len(_opened) > LIMIT:
            _opened.popitem(last=False)
    return array


def clear() -> None:
    """Forget every opened array.

    Examples
    --------
    >>> clear()
    """
    with _lock:
        _opened.clear()
