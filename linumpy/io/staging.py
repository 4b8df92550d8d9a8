"""Atomic, durable replacement of files and directories through a staging folder beside them.

A write of ``TARGET`` goes to a hidden sibling ``.PREFIX.<token>.linumpy-staging/`` (the same
file system, so every move is a rename; ``PREFIX`` is short, so long names still fit). It holds
``owner`` (the target's name, the writer's pid, host and start time; the writer holds a
``flock`` on it), the new content as ``new/TARGET`` and, once the commit begins, ``state``,
which records the identity (device, inode) of the complete new content before each step. The
commit flushes the folder (:mod:`linumpy.io.durable`), renames the new content to ``ready``,
swaps it with ``TARGET`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``, else two renames),
then deletes the old content and the folder.

Recovery (:mod:`linumpy.io.recovery`), at every write of ``TARGET`` and by
:func:`clean_staging`, never by a reader: a staging folder whose writer is gone gives its complete
new content to a missing ``TARGET``; the rest is deleted. An interrupted write therefore leaves
the whole old content or the whole new one.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import os
import secrets
import sys
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from linumpy import phases
from linumpy.errors import LinumpyError
from linumpy.io.durable import flush_file, flush_folder, flush_tree
from linumpy.io.recovery import (
    ACTIVE,
    HOST,
    PREFIX_CHARS,
    STAGING_SUFFIX,
    exists,
    identity,
    recover_staging,
    remove_tree,
    started,
)

__all__: list[str] = []

logger = logging.getLogger(__name__)

_exchange_supported = sys.platform.startswith("linux")

#: Called with each commit step's name (those ``state`` records: ``"ready"``, ``"swap"``,
#: ``"swapped"``, ``"trash"``, ``"remove"``; and ``"flush"``, ``"swap-half"``, ``"exchanged"``)
#: before the step is taken; the kill tests stop a writer there.
step_hook: Callable[[str], None] | None = None


# Set by discard_quietly(): uncommitted writes are then deleted without a warning each.
_quiet_discards = False

# Staging folders of open writes that flush on commit: what is written inside them is flushed
# then, so a writer working there need not flush it first (see flushed_on_commit).
_FLUSHING: set[Path] = set()


def flushed_on_commit(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` lies in the staging folder of an open durable :class:`StagedWrite`,
    whose commit will flush it (so flushing it before is work done twice)."""
    resolved = Path(os.path.abspath(path))
    return any(folder == resolved or folder in resolved.parents for folder in set(_FLUSHING))


def _step(name: str) -> None:
    if step_hook is not None:
        step_hook(name)


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


def _write_json(path: Path, value: dict[str, Any], durable: bool) -> None:
    """Replace ``path`` by ``value`` as JSON in one rename (flushed first when ``durable``)."""
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(json.dumps(value))
    if durable:
        flush_file(partial)
    os.replace(partial, path)
    if durable:
        flush_folder(path.parent)


class StagedWrite:
    """A write of ``target`` built at :attr:`path` in a staging folder beside it, moved into
    place by :meth:`commit` in one step, or thrown away by :meth:`abort`. ``durable`` (default:
    the setting) flushes the new content before the swap and the folder after it."""

    def __init__(self, target: str | os.PathLike[str], *, durable: bool | None = None) -> None:
        from linumpy import settings

        self.target = Path(target)
        if not self.target.name or self.target.name in (".", ".."):
            raise LinumpyError(f"{target}: not a file or directory name to write")
        self.durable = settings.get().durable if durable is None else bool(durable)
        recover_staging(self.target)
        # what the target is now: another writer's commit before this one's is not replaced
        self._found = identity(self.target)
        name = f".{self.target.name[:PREFIX_CHARS]}.{secrets.token_hex(4)}{STAGING_SUFFIX}"
        self.staging = self.target.parent / name
        self.staging.mkdir(parents=True)
        ACTIVE.add(self.staging)
        self._lock: list[int | None] = [None]  # shared with the finalizer
        # A write dropped without commit or abort is discarded at garbage collection or exit.
        self._finalizer = weakref.finalize(self, _discard, self.staging, self._lock)
        try:
            self._lock[0] = _hold(self.staging / "owner")
            owner = {"target": self.target.name, "pid": os.getpid(), "host": HOST}
            owner["started"] = started(os.getpid())
            (self.staging / "owner").write_text(json.dumps(owner))
            (self.staging / "new").mkdir()
        except BaseException:
            self._finish()
            raise
        self.path = self.staging / "new" / self.target.name
        self._done = False
        if self.durable:  # after the owner file: nothing widens the window before it
            _FLUSHING.add(Path(os.path.abspath(self.staging)))

    def _record(self, step: str, state: dict[str, Any]) -> None:
        _write_json(self.staging / "state", {**state, "step": step}, self.durable)
        _step(step)

    @phases.recorded("final swap")
    def commit(self) -> None:
        """Move the new content into place and delete the old. A LinumpyError when nothing
        was written, or when another writer changed the target since this write began (its
        output is kept, this one thrown away); on an OSError the target is left as it was."""
        if self._done:
            return
        if not exists(self.path):
            raise LinumpyError(f"{self.target}: nothing was written to replace it with")
        if identity(self.target) != self._found:
            self.abort()
            raise LinumpyError(
                f"{self.target}: changed by another writer while this one ran; kept as that "
                "writer left it, this write thrown away (run it again to replace it)"
            )
        _step("flush")
        if self.durable and not flushed_on_commit(self.staging.parent):  # else the outer write's
            flush_tree(self.staging)
        ready, old = self.staging / "ready", self.staging / "old"
        state = {"target": self.target.name, "new": identity(self.path)}
        state["old"] = identity(self.target)
        self._record("ready", state)
        os.rename(self.path, ready)
        self._record("swap", state)
        if state["old"] is None:
            os.rename(ready, self.target)
        elif not _exchange(ready, self.target):
            if ready.is_dir() or (self.target.is_dir() and not self.target.is_symlink()):
                os.rename(self.target, old)
                _step("swap-half")
                try:
                    os.rename(ready, self.target)
                except OSError:
                    os.rename(old, self.target)  # put the old content back
                    raise
            else:
                os.replace(ready, self.target)  # files replace each other in one step
        _step("exchanged")
        self._record("swapped", state)
        self._record("trash", state)
        for leftover in (ready, old):
            if exists(leftover):
                os.rename(leftover, self.staging / "trash")
        if self.durable:
            try:
                flush_folder(self.target.parent)
            except OSError as exc:  # the swap is done: say so, and that it may not be on disk
                logger.warning("%s: its folder could not be flushed to disk: %s", self.target, exc)
        self._record("remove", state)
        self._finish()

    def abort(self) -> None:
        """Delete the staged content; the target stays as it was."""
        if not self._done:
            from linumpy._compat import wait_for_zarr_io

            wait_for_zarr_io()  # writes an error or Ctrl-C left running would recreate files
            self._finish()

    def _finish(self) -> None:
        self._done = True
        self._finalizer.detach()
        ACTIVE.discard(self.staging)
        _FLUSHING.discard(Path(os.path.abspath(self.staging)))
        failed = remove_tree(self.staging)
        if failed:
            logger.warning("%s: cannot delete the staging folder: %s", self.staging, failed)
        if self._lock[0] is not None:
            os.close(self._lock[0])
            self._lock[0] = None


def _hold(path: Path) -> int | None:
    """Create ``path`` and hold an exclusive lock on it; None where the system has no locks."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (ImportError, OSError):
        pass  # no locks here (another OS, some network file systems): liveness by pid then
    return fd


def discard_quietly() -> None:
    """Delete the staged content of writes left uncommitted without a warning for each: for a
    run stopped by Ctrl-C, which has said so."""
    global _quiet_discards
    _quiet_discards = True


def _discard(staging: Path, lock: list[int | None]) -> None:
    if staging in ACTIVE:
        if not _quiet_discards:
            logger.warning("%s: a write never committed; its staged content is deleted", staging)
        ACTIVE.discard(staging)
        remove_tree(staging)
    if lock[0] is not None:
        with contextlib.suppress(OSError):
            os.close(lock[0])


@contextlib.contextmanager
def staged(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a path to write ``target``'s new content to; move it into place on success, and
    on an exception (Ctrl-C included) delete it, leaving ``target`` as it was."""
    write = StagedWrite(target)
    try:
        yield write.path
    except BaseException:
        write.abort()
        raise
    write.commit()


#: The OS errors of an output that does not fit: a full disk, a quota, a file size limit.
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


@contextlib.contextmanager
def staged_output(target: str | os.PathLike[str], name: str | None = None) -> Iterator[Path]:
    """:func:`staged`, where an output that does not fit (a full disk, a quota, a file size
    limit) or an OS error in its staging folder is a :class:`LinumpyError` naming the output."""
    try:
        with staged(target) as staging:
            yield staging
    except OSError as exc:
        full = exc.errno in _FULL
        if not full and STAGING_SUFFIX not in f"{exc.filename} {exc.filename2}":
            raise
        reason = exc.strerror or type(exc).__name__
        raise LinumpyError(f"cannot write {name or os.fspath(target)!r}: {reason}") from exc
