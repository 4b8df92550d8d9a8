"""Paths that dask tasks open, made the same on every worker: absolute on the client (a task
runs in its worker's working directory), and each worker's first task checks that it sees the
client's input (:func:`input_digest`, :func:`check_same_input`).
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from pathlib import Path

from linumpy.errors import InputMismatchError

__all__ = ["check_same_input", "input_digest", "on_dask_worker", "task_path", "worker_name"]

# ``scheme://`` at the start of a string: a URL (``file://`` names a local path)
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: Metadata files of a zarr array or group (v3 and v2), summarized by :func:`input_digest`.
METADATA_FILES = ("zarr.json", ".zarray", ".zgroup", ".zattrs")
# Digests this process has checked: the first task of a worker reads the metadata, the others not.
_CHECKED: dict[tuple[str, str], bool] = {}
_LOCK = threading.Lock()


def task_path(path: str | os.PathLike[str]) -> str:
    """``path`` made absolute against this process's working directory (links kept); a URL
    unchanged."""
    text = os.fspath(path)
    local = _local(text)
    if local is None:
        return text
    return "file://" + os.path.abspath(local) if _URL.match(text) else os.path.abspath(local)


def _local(path: str) -> Path | None:
    """The local path ``path`` names (a ``file://`` URL's too); None for another URL."""
    match = _URL.match(path)
    if match is None:
        return Path(path)
    return Path(path[len(match.group(0)) :]) if match.group(1).lower() == "file" else None


def input_digest(path: str | os.PathLike[str]) -> str | None:
    """A digest of a local zarr input's metadata files (bytes, sizes and modification times, at
    ``path`` and its level ``0``): None for a URL, ``"missing"`` where nothing is at ``path``."""
    local = _local(task_path(path))
    if local is None:
        return None
    if not local.exists():
        return "missing"
    digest = hashlib.sha256()
    for folder in (local, local / "0"):
        for name in METADATA_FILES:
            file = folder / name
            try:
                stat = file.stat()
                content = file.read_bytes()
            except (FileNotFoundError, NotADirectoryError):
                continue
            digest.update(f"{file.relative_to(local)}:{stat.st_size}:{stat.st_mtime_ns}:".encode())
            digest.update(content)
    if local.is_file():
        stat = local.stat()
        digest.update(f"file:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()


def on_dask_worker() -> bool:
    """Whether this runs in a task of a ``dask.distributed`` worker."""
    return worker_name() != "this process"


def worker_name() -> str:
    """The dask worker this runs in (its address), or ``"this process"`` outside one."""
    import sys

    if "distributed" in sys.modules:  # a worker has it loaded; elsewhere it is not imported
        from distributed import get_worker

        try:
            return f"dask worker {get_worker().address}"
        except ValueError:
            pass
    return "this process"


def check_same_input(path: str, digest: str | None) -> None:
    """Raise :class:`InputMismatchError` when this process sees another ``path`` than the client,
    whose :func:`input_digest` was ``digest``; checked once per process (None: not checked)."""
    if digest is None:
        return
    with _LOCK:
        if _CHECKED.get((path, digest)):
            return
    seen = input_digest(path)
    if seen != digest:
        if seen == "missing":
            raise InputMismatchError(
                f"{worker_name()} cannot see the input {path!r}: every worker needs the client's "
                "paths (a shared file system mounted at the same place) or URLs"
            )
        raise InputMismatchError(
            f"{worker_name()} sees another input at {path!r} than the client (its metadata "
            "differ): mount the same shared file system at the same path on every worker"
        )
    with _LOCK:
        _CHECKED[(path, digest)] = True
