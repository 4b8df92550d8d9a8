"""Flushing what a write produced to stable storage, so that it survives a power loss: one
``syncfs`` on Linux (faster than an ``fsync`` per file), else ``fsync`` of every file and folder.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

__all__ = ["flush_file", "flush_folder", "flush_on_worker", "flush_tree", "start_writeback"]

logger = logging.getLogger(__name__)

# fsync of a directory is refused by some file systems; the entries are then flushed with it
_UNSUPPORTED = (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF, errno.EISDIR)


def _fsync(path: str | os.PathLike[str], directory: bool) -> None:
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if not (directory and exc.errno in _UNSUPPORTED):
            raise
    finally:
        os.close(fd)


def flush_file(path: str | os.PathLike[str]) -> None:
    """Flush one file's data and metadata to stable storage (``fsync``)."""
    _fsync(path, directory=False)


def flush_folder(path: str | os.PathLike[str]) -> None:
    """Flush a folder's entries (files created, renamed or removed in it) to stable storage (where
    the file system refuses, ``EINVAL``, its entries are flushed with the files)."""
    _fsync(path, directory=True)


_SYNC_FILE_RANGE_WRITE = 2  # start writing the dirty pages out, without waiting for them


@functools.cache
def _sync_file_range() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    function = getattr(ctypes.CDLL(None, use_errno=True), "sync_file_range", None)
    if function is not None:
        function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
        function.restype = ctypes.c_int
    return function


def start_writeback(fd: int) -> None:
    """Start writing a just-written file's data to disk without waiting (Linux
    ``sync_file_range``), so that the flush before a swap finds little left to write."""
    function = _sync_file_range()
    if function is not None:
        function(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)  # a failure here is the flush's to report


def _syncfs(path: Path) -> bool:
    """One ``syncfs`` of the file system holding ``path``; False where there is none."""
    if not sys.platform.startswith("linux"):
        return False
    syncfs = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    if syncfs is None:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        if syncfs(fd) != 0:
            code = ctypes.get_errno()
            if code in (errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                return False
            raise OSError(code, os.strerror(code), os.fspath(path))
    finally:
        os.close(fd)
    return True


def flush_tree(path: str | os.PathLike[str]) -> str:
    """Flush ``path`` and all under it to stable storage; how: ``"syncfs"`` or ``"fsync"``."""
    path = Path(path)
    if _syncfs(path):
        return "syncfs"
    files: list[str] = []
    folders: list[str] = []
    if path.is_dir() and not path.is_symlink():
        for root, _, names in os.walk(path):
            folders.append(root)
            files += [os.path.join(root, name) for name in names]
    else:
        files.append(os.fspath(path))
    regular = [f for f in files if not os.path.islink(f)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(flush_file, regular))
        list(pool.map(flush_folder, folders))
    return "fsync"


def flush_on_worker(path: str | os.PathLike[str]) -> bool:
    """In a dask worker process, ``syncfs`` the file system holding ``path``, so that a task's
    files are durable before it reports done (the client's flush reaches its own host only);
    elsewhere, or with the ``durable`` setting off, nothing and False."""
    from linumpy import settings
    from linumpy.parallel.task_inputs import on_dask_worker

    if not on_dask_worker() or not settings.get().durable:
        return False
    return _syncfs(Path(path))
