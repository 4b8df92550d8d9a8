"""Recovery of interrupted staged writes (:mod:`linumpy.io.staging`): a writer is alive while
it holds the ``flock`` on its staging folder's ``owner`` file (a killed writer, a zombie, a
reused pid hold none); without locks its pid, host and start time decide, and a writer on
another host cannot be checked and is left alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["STAGING_SUFFIX", "clean_staging", "recover_staging", "staging_left"]

logger = logging.getLogger("linumpy.io.staging")

#: Name suffix of the staging folders (hidden siblings of their target).
STAGING_SUFFIX = ".linumpy-staging"
#: Characters of the target's name that start its staging folder's name.
PREFIX_CHARS = 40
#: This host's name, recorded by writers.
HOST = socket.gethostname()
#: This process's staging folders still being written.
ACTIVE: set[Path] = set()

_YOUNG_S = 60.0  # a staging folder without an owner this recent may be being created


def exists(path: Path) -> bool:
    """Whether ``path`` is there (a dangling symbolic link is)."""
    return path.exists() or path.is_symlink()


def identity(path: Path) -> list[int] | None:
    """``[device, inode]`` of ``path`` itself (links not followed), None if it does not exist."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    return [info.st_dev, info.st_ino]


def started(pid: int) -> int | None:
    """A process's start time (clock ticks after boot, from ``/proc``); -1 for a zombie, None
    where unknown or for a process that does not exist."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (OSError, ValueError):
        return None
    if fields and fields[0] in ("Z", "X"):  # a zombie or a dead process: it writes nothing more
        return -1
    return int(fields[19]) if len(fields) > 19 else None


def read_json(path: Path) -> dict[str, Any] | None:
    """A small JSON object file, None when it is missing, unreadable or not an object."""
    try:
        value = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


_REMOVE_ATTEMPTS = 6  # about a second in all


def remove_tree(path: Path) -> str | None:
    """Delete a file or folder tree; what could not be deleted, None when all of it went."""
    failed: list[str] = []

    def note(_function: Any, where: str, exc: BaseException) -> None:
        if not isinstance(exc, FileNotFoundError):  # gone already: what was wanted
            failed.append(f"{where}: {getattr(exc, 'strerror', None) or exc}")

    if path.is_dir() and not path.is_symlink():
        # A writer stopped by an error or Ctrl-C may still finish a file in it (zarr's own
        # writes run on its event loop thread): try again while entries keep appearing.
        for attempt in range(_REMOVE_ATTEMPTS):
            failed.clear()  # only the last attempt's failures are reported
            shutil.rmtree(path, onexc=note)
            if not path.exists():
                break
            time.sleep(0.05 * (attempt + 1))
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            failed.append(f"{path}: {exc.strerror or exc}")
    if not failed:
        return None
    return failed[0] + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else "")


@dataclass(frozen=True)
class _Found:
    """A staging folder: its path, its target's name (None when unknown) and its owner."""

    path: Path
    target: str | None
    owner: dict[str, Any]


def _found(folder: Path, entry: str) -> _Found | None:
    if not (entry.startswith(".") and entry.endswith(STAGING_SUFFIX)):
        return None
    path = folder / entry
    owner = read_json(path / "owner") or {}
    target = owner.get("target")
    if not isinstance(target, str):
        target = (read_json(path / "state") or {}).get("target")
    return _Found(path, target if isinstance(target, str) and target else None, owner)


def _pid_state(owner: dict[str, Any], path: Path) -> str:
    """``"live"``, ``"stale"`` or why it cannot be told, from the owner's pid, host, start."""
    pid, host = owner.get("pid"), owner.get("host")
    if not isinstance(pid, int):
        return "stale"
    if host != HOST:
        return f"its writer runs on {host}"
    if pid == os.getpid():
        return "live" if path in ACTIVE else "stale"
    now = started(pid)
    if now is None and Path("/proc/self/stat").exists():
        return "stale"  # no such process
    if now is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return "stale"
        except PermissionError:
            pass
        return "live"
    if now == -1 or (isinstance(owner.get("started"), int) and owner["started"] != now):
        return "stale"  # a zombie, or the pid now belongs to a process started later
    return "live"


@contextlib.contextmanager
def _claimed(found: _Found) -> Iterator[str]:
    """Whether the folder's writer is gone (``"stale"``: the lock is held until the block ends),
    alive (``"live"``), or why it cannot be told."""
    if found.path in ACTIVE:
        yield "live"
        return
    try:
        fd = os.open(found.path / "owner", os.O_RDWR)
    except FileNotFoundError:
        try:
            age = time.time() - found.path.stat().st_mtime
        except OSError:
            age = 0.0
        yield "live" if age < _YOUNG_S else "stale"  # a writer creates its owner first thing
        return
    except OSError as exc:
        yield f"its owner file cannot be opened ({exc.strerror})"
        return
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        state = "live"
    except (ImportError, OSError):
        state = _pid_state(found.owner, found.path)  # no locks here
    else:
        host = found.owner.get("host", HOST)
        # a lock taken on another host may not show here (network file systems without locks)
        state = "stale" if host == HOST else f"its writer runs on {host}"
    try:
        yield state
    finally:
        os.close(fd)


def _complete(found: _Found, target: Path) -> Path | None:
    """The complete new version in a stale staging folder, None if there is none."""
    state = read_json(found.path / "state") or {}
    new = state.get("new")
    if not new:
        return None  # the commit never began: the new content may be incomplete
    for name in ("ready", f"new/{target.name}", "old", "trash"):
        if identity(found.path / name) == new:
            return found.path / name
    return None


def _recover(found: _Found, target: Path) -> list[str]:
    """Apply the recovery rule to one stale staging folder."""
    actions = []
    if found.target is not None and not exists(target):
        complete = _complete(found, target)
        if complete is not None:
            try:
                os.rename(complete, target)
            except OSError as exc:
                return [f"{found.path}: cannot restore {target}: {exc.strerror or exc}"]
            actions.append(f"{target}: restored from {complete}")
    failed = remove_tree(found.path)
    actions.append(f"{found.path}: cannot delete: {failed}" if failed else f"{found.path}: removed")
    return actions


def _process(found: _Found, target: Path) -> list[str]:
    with _claimed(found) as state:
        if state == "stale":
            return _recover(found, target)
        if state == "live":
            return []
        return [f"{found.path}: left alone: {state}"]


def _report(actions: list[str]) -> list[str]:
    for action in actions:
        cleaned = action.endswith(": removed") or ": restored from " in action
        logger.log(logging.INFO if cleaned else logging.WARNING, "%s", action)
    return actions


def _staging_of(target: Path) -> Iterator[_Found]:
    """The staging folders of ``target`` in its folder."""
    folder = target.parent
    try:
        entries = sorted(os.listdir(folder or "."))
    except (FileNotFoundError, NotADirectoryError):
        return
    head = f".{target.name[:PREFIX_CHARS]}"
    for entry in entries:
        if not entry.startswith(head):
            continue
        found = _found(folder, entry)
        if found is None:
            continue
        exact = re.fullmatch(re.escape(f".{target.name}.") + r"[0-9a-f]+" + STAGING_SUFFIX, entry)
        if found.target == target.name or (found.target is None and exact):
            yield found


def staging_left(target: str | os.PathLike[str]) -> list[Path]:
    """The staging folders that writes of ``target`` left beside it, found without touching them
    (a reader names them and leaves the recovery to the next write and :func:`clean_staging`)."""
    return [found.path for found in _staging_of(Path(target))]


def recover_staging(target: str | os.PathLike[str]) -> list[str]:
    """Apply the recovery rule to every staging folder of ``target`` whose writer is gone; what
    was done and what could not be cleaned, one line each (logged too)."""
    target = Path(target)
    actions: list[str] = []
    for found in list(_staging_of(target)):
        actions += _process(found, target)
    return _report(actions)


def clean_staging(path: str | os.PathLike[str]) -> list[str]:
    """Recover or delete what interrupted writes left beside ``path`` (documented cleanup).

    ``path`` is a written file or image (its own staging folders are handled) or a folder (the
    staging folders of every entry in it). Writes still running are left alone.

    Returns
    -------
    list of str
        What was done, and what could not be cleaned (a writer on another host, a folder that
        cannot be deleted), one line each.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> folder = Path(tempfile.mkdtemp())
    >>> stale = folder / ".out.ome.zarr.0a1b.linumpy-staging"
    >>> (stale / "new" / "out.ome.zarr").mkdir(parents=True)  # a write killed before its commit
    >>> _ = (stale / "owner").write_text('{"target": "out.ome.zarr"}')
    >>> [line.split(": ")[1] for line in clean_staging(folder)]
    ['removed']
    >>> list(folder.iterdir())
    []
    """
    path = Path(path)
    actions = recover_staging(path)
    if path.is_dir() and not path.is_symlink():
        found = [_found(path, entry) for entry in sorted(os.listdir(path))]
        for item in found:
            if item is not None:
                target = path / (item.target or item.path.name)
                actions += _report(_process(item, target))
    return actions
