"""Atomic replacement of files and directories through a staging entry beside the target.

A write of ``TARGET`` goes to a hidden sibling directory
``.TARGET.<pid>@<host>-<token>.linumpy-staging/`` (same directory, so the same file system and
every move is a rename). The new content is built in it as ``new/TARGET``; once complete it is
renamed to ``ready``, then swapped with ``TARGET`` in one step (Linux ``renameat2`` with
``RENAME_EXCHANGE``) or, where the file system cannot exchange, in two renames (``TARGET`` to
``old``, ``ready`` to ``TARGET``); the staging directory, which then holds the old content, is
deleted last.

Recovery rule, applied to staging directories whose writer is gone (its process no longer
exists) at the start of every write of ``TARGET``, when ``TARGET`` is opened for reading while
missing, and by :func:`clean_staging`:

- ``TARGET`` missing and ``ready`` present: the write had completed and was interrupted between
  the two renames; ``ready`` is moved to ``TARGET`` (the new version wins).
- ``TARGET`` missing and only ``old`` present: ``old`` is moved back to ``TARGET``.
- Anything else (a half-written ``new``, the old content after the swap): deleted.

An interrupted write therefore never leaves ``TARGET`` half-written: it holds the old content
(interrupted before the swap) or the new one (after it). Staging directories of live processes
(or of another host, whose processes cannot be checked) are left alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import secrets
import shutil
import socket
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path

from linumpy import phases
from linumpy.errors import LinumpyError

__all__ = ["STAGING_SUFFIX", "StagedWrite", "clean_staging", "recover_staging", "staged"]

logger = logging.getLogger(__name__)

#: Name suffix of the staging directories (hidden siblings of their target).
STAGING_SUFFIX = ".linumpy-staging"
_LEGACY_SUFFIX = ".partial"  # the scripts' staging before linumpy 0.3: ``.NAME.<random>.partial``
_HOST = socket.gethostname()
_ACTIVE: set[Path] = set()  # this process's staging directories still being written
_exchange_supported = sys.platform.startswith("linux")


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False if unsupported."""
    global _exchange_supported
    if not _exchange_supported:
        return False
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        _exchange_supported = False
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange):
        code = ctypes.get_errno()
        if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            return False  # this file system (or kernel) cannot exchange: rename twice
        raise OSError(code, os.strerror(code), os.fspath(first), None, os.fspath(second))
    return True


def _sync_dir(folder: Path) -> None:
    """Flush a directory's entries (the renames) to disk; best effort."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


class StagedWrite:
    """A write of ``target`` built in a staging directory beside it, moved into place by
    :meth:`commit` in one step, or thrown away by :meth:`abort`.

    Parameters
    ----------
    target
        The file or directory to create or replace.

    Attributes
    ----------
    path
        Where to write the new content (``<staging>/new/<target name>``; it does not exist yet).

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "result.txt").write_text("old")
    >>> write = StagedWrite(folder / "result.txt")
    >>> _ = write.path.write_text("new")
    >>> (folder / "result.txt").read_text()  # untouched until the commit
    'old'
    >>> write.commit()
    >>> (folder / "result.txt").read_text(), sorted(p.name for p in folder.iterdir())
    ('new', ['result.txt'])
    """

    def __init__(self, target: str | os.PathLike[str]) -> None:
        self.target = Path(target)
        if not self.target.name or self.target.name in (".", ".."):
            raise LinumpyError(f"{target}: not a file or directory name to write")
        recover_staging(self.target)
        name = f".{self.target.name}.{os.getpid()}@{_HOST}-{secrets.token_hex(4)}{STAGING_SUFFIX}"
        self.staging = self.target.parent / name
        (self.staging / "new").mkdir(parents=True)
        _ACTIVE.add(self.staging)
        self.path = self.staging / "new" / self.target.name
        self._done = False
        # A write dropped without commit or abort is discarded at garbage collection or exit.
        self._finalizer = weakref.finalize(self, _discard, self.staging)

    @property
    def done(self) -> bool:
        """Whether the write was committed or aborted."""
        return self._done

    @phases.recorded("final swap")
    def commit(self) -> None:
        """Move the new content into place; the old content is deleted afterwards.

        Raises
        ------
        LinumpyError
            When nothing was written at :attr:`path`.
        """
        if self._done:
            return
        if not _exists(self.path):
            raise LinumpyError(f"{self.target}: nothing was written to replace it with")
        ready = self.staging / "ready"
        os.rename(self.path, ready)
        if not _exists(self.target):
            os.rename(ready, self.target)
        elif not _exchange(ready, self.target):
            if ready.is_dir() or (self.target.is_dir() and not self.target.is_symlink()):
                os.rename(self.target, self.staging / "old")
                try:
                    os.rename(ready, self.target)
                except OSError:
                    os.rename(self.staging / "old", self.target)  # put the old content back
                    raise
            else:
                os.replace(ready, self.target)  # files replace each other in one step
        _sync_dir(self.target.parent)
        self._finish()

    def abort(self) -> None:
        """Delete the staged content; the target stays as it was."""
        if not self._done:
            self._finish()

    def _finish(self) -> None:
        self._done = True
        self._finalizer.detach()
        _ACTIVE.discard(self.staging)
        _remove(self.staging)


def _discard(staging: Path) -> None:
    if staging in _ACTIVE:
        logger.warning("%s: a write never committed; its staged content is deleted", staging)
        _ACTIVE.discard(staging)
        _remove(staging)


@contextlib.contextmanager
def staged(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a path to write ``target``'s new content to; move it into place on success.

    On an exception (Ctrl-C included) the staged content is deleted and ``target`` is left as it
    was; a killed process leaves a staging directory that the next write removes (see the module
    documentation for the recovery rule).

    Examples
    --------
    >>> import os, tempfile
    >>> from pathlib import Path
    >>> folder = Path(tempfile.mkdtemp())
    >>> with staged(folder / "result.txt") as path:
    ...     _ = path.write_text("complete")
    >>> os.listdir(folder), (folder / "result.txt").read_text()
    (['result.txt'], 'complete')
    >>> try:
    ...     with staged(folder / "result.txt") as path:
    ...         _ = path.write_text("half")
    ...         raise RuntimeError("interrupted")
    ... except RuntimeError:
    ...     pass
    >>> os.listdir(folder), (folder / "result.txt").read_text()
    (['result.txt'], 'complete')
    """
    write = StagedWrite(target)
    try:
        yield write.path
    except BaseException:
        write.abort()
        raise
    write.commit()


def _owner(entry: str, target: str) -> tuple[int, str] | None:
    """``(pid, host)`` of a staging directory of ``target``, None for any other name."""
    prefix = f".{target}."
    if not (entry.startswith(prefix) and entry.endswith(STAGING_SUFFIX)):
        return None
    pid, _, rest = entry[len(prefix) : -len(STAGING_SUFFIX)].partition("@")
    host = rest.rpartition("-")[0]
    return (int(pid), host) if pid.isdigit() and host else None


def _alive(pid: int, host: str, staging: Path) -> bool:
    if host != _HOST:
        return True  # another machine's process: it cannot be checked from here
    if pid == os.getpid():
        return staging in _ACTIVE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _staging_dirs(target: Path, legacy: bool) -> list[tuple[Path, bool]]:
    """The staging directories of ``target`` as ``(path, stale)``, oldest name first."""
    try:
        entries = sorted(os.listdir(target.parent or "."))
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        owner = _owner(entry, target.name)
        path = target.parent / entry
        if owner is not None:
            found.append((path, not _alive(*owner, path)))
        elif legacy and entry.startswith(f".{target.name}.") and entry.endswith(_LEGACY_SUFFIX):
            found.append((path, True))
    return found


def _restore_candidates(staging: Path, target: Path) -> list[Path]:
    if staging.name.endswith(_LEGACY_SUFFIX):
        # the new output there may be incomplete: only the old one moved aside is known whole
        return [staging / (target.name + ".old")]
    return [staging / "ready", staging / "old"]


def recover_staging(target: str | os.PathLike[str], *, legacy: bool = False) -> list[str]:
    """Finish or undo the interrupted writes of ``target`` and delete their staging directories.

    Applies the module's recovery rule to every staging directory of ``target`` whose process is
    gone; those of running writers are left alone.

    Parameters
    ----------
    target
        The file or directory whose staging to clean.
    legacy
        Also handle the ``.NAME.*.partial`` directories of linumpy 0.2's scripts (they carry no
        process id: only clean them when no script is writing ``target``).

    Returns
    -------
    list of str
        What was done, one line per action (empty when there was nothing to do).

    Examples
    --------
    >>> import os, tempfile
    >>> from pathlib import Path
    >>> folder = Path(tempfile.mkdtemp())
    >>> stale = folder / ".image.ome.zarr.999999999@nohost-0000.linumpy-staging"
    >>> (stale / "old").mkdir(parents=True)  # a replacement killed between its two renames
    >>> recover_staging(folder / "image.ome.zarr", legacy=True)  # doctest: +ELLIPSIS
    ['...linumpy-staging: left alone: its writer runs on nohost']
    """
    target = Path(target)
    actions = []
    for staging, stale in _staging_dirs(target, legacy):
        if not stale:
            owner = _owner(staging.name, target.name)
            if owner is not None and owner[1] != _HOST:
                actions.append(f"{staging}: left alone: its writer runs on {owner[1]}")
            continue
        if not _exists(target):
            for candidate in _restore_candidates(staging, target):
                if _exists(candidate):
                    try:
                        os.rename(candidate, target)
                    except OSError as exc:
                        logger.warning("%s: cannot restore %s: %s", staging, target, exc)
                        continue
                    actions.append(f"{target}: restored from {candidate}")
                    break
        _remove(staging)
        actions.append(f"{staging}: removed")
    for action in actions:
        logger.info("%s", action)
    return actions


def clean_staging(path: str | os.PathLike[str]) -> list[str]:
    """Recover or delete what interrupted writes left beside ``path`` (documented cleanup).

    ``path`` is a written file or image (its own staging directories are handled) or a folder
    (the staging directories of every entry in it). Writes still running are left alone; the
    ``.NAME.*.partial`` directories of linumpy 0.2's scripts are handled too.

    Returns
    -------
    list of str
        What was done, one line per action.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> folder = Path(tempfile.mkdtemp())
    >>> stale = folder / ".out.ome.zarr.x1y2.partial"
    >>> (stale / "out.ome.zarr.old").mkdir(parents=True)  # old output moved aside, then killed
    >>> [line.split(": ")[1] for line in clean_staging(folder)]  # doctest: +ELLIPSIS
    ['restored from ...out.ome.zarr.old', 'removed']
    >>> sorted(p.name for p in folder.iterdir())
    ['out.ome.zarr']
    """
    path = Path(path)
    targets = {path}
    if path.is_dir() and not path.is_symlink():
        for entry in os.listdir(path):
            if entry.endswith(_LEGACY_SUFFIX) and entry.startswith("."):
                targets.add(path / entry[1:].rsplit(".", 2)[0])
            elif entry.endswith(STAGING_SUFFIX) and entry.startswith(".") and "@" in entry:
                head = entry[1 : -len(STAGING_SUFFIX)]
                targets.add(path / head[: head.rfind(".", 0, head.find("@"))])
    actions = []
    for target in sorted(targets):
        actions += recover_staging(target, legacy=True)
    return actions
