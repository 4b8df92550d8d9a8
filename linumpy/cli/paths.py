"""The inputs and outputs of a ``linum-*`` script: inputs checked to exist, outputs checked
against ``-f``, the inputs and each other, and written in staging to be moved into place."""

from __future__ import annotations

import argparse
import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

__all__ = ["check_input", "check_output", "output_folder", "output_path"]

# The inputs and outputs each parser's script checked ("input" or "output", path), so that no
# output overlaps another path of the run.
_CHECKED: weakref.WeakKeyDictionary[argparse.ArgumentParser, list[tuple[str, Path]]] = (
    weakref.WeakKeyDictionary()
)


def check_input(parser: argparse.ArgumentParser, path: str | os.PathLike[str]) -> Path | str:
    """Exit with a one-line error when the input ``path`` does not exist; a remote URL is
    returned as it is (its reader names it in any error), a ``file://`` URL checked as its path."""
    from linumpy.io.remote import is_url, local_path, url_scheme

    if is_url(path):
        return os.fspath(path)
    path = local_path(os.fspath(path)) if url_scheme(path) == "file" else Path(path)
    if not path.exists():
        from linumpy.io.recovery import staging_left

        # reading never writes: an interrupted write's staging is named, left to the writers
        left = staging_left(path)
        note = (
            f"; an interrupted write left {left[0]} (see linumpy.io.clean_staging)" if left else ""
        )
        parser.error(f"input {os.fspath(path)!r} does not exist{note}")
    _CHECKED.setdefault(parser, []).append(("input", path))
    return path


@contextmanager
def output_folder(parser: argparse.ArgumentParser, path: str | os.PathLike[str]) -> Iterator[Path]:
    """Create the output folder ``path`` (and its parents) and yield it, or exit with a one-line
    error when it is an input or inside one, is a file, or cannot be created. The folders this
    call created are removed again when the block fails and leaves them empty."""
    path = Path(path)
    _refuse_overlaps(parser, path, ("is", "is inside"))
    if path.exists() and not path.is_dir():
        parser.error(f"output {os.fspath(path)!r} is a file; it is not replaced by a directory")
    missing = [folder for folder in (path, *path.parents) if not folder.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"cannot create {os.fspath(path)!r}: {exc.strerror}")
    try:
        yield path
    except BaseException:
        for folder in missing:  # innermost first; one still holding something stays
            try:
                folder.rmdir()
            except OSError:
                break
        raise


def _overlap(output: Path, source: Path) -> str | None:
    """How ``output`` overlaps ``source`` ("is", "is inside", "contains"), None if it does not."""
    out, src = output.resolve(), source.resolve()
    if out == src:
        return "is"
    if out.is_relative_to(src):
        return "is inside"
    if src.is_relative_to(out):
        return "contains"
    return None


def _refuse_overlaps(parser: argparse.ArgumentParser, path: Path, refused: tuple[str, ...]) -> None:
    """Exit when ``path`` overlaps a checked input or output in one of the ``refused`` ways."""
    for role, other in _CHECKED.get(parser, []):
        overlap = _overlap(path, other)
        if overlap in refused:
            parser.error(
                f"output {os.fspath(path)!r} {overlap} the {role} {os.fspath(other)!r}; "
                "write to another path"
            )


def check_output(
    parser: argparse.ArgumentParser,
    path: str | os.PathLike[str],
    overwrite: bool,
    *,
    make_parents: bool = False,
    kind: Literal["file", "directory"] | None = None,
) -> Path:
    """Exit with a one-line error when ``path`` exists without ``-f`` (a dangling link too),
    cannot be created, is a URL, or is (inside, or contains) an input or another output of the
    run. ``kind``: an existing path of the other kind is never replaced. What an interrupted write
    of ``path`` left in staging is recovered or removed first."""
    from linumpy.io.remote import local_path, url_scheme

    scheme = url_scheme(path)
    if scheme == "file":
        path = local_path(os.fspath(path))
    elif scheme is not None:
        parser.error(
            f"output {os.fspath(path)!r}: the scripts write outputs to a file system path "
            f"(local, or shared by the cluster's workers), not to {scheme}:// URLs; write it "
            "there and copy it to the store"
        )
    path = Path(path)
    _refuse_overlaps(parser, path, ("is", "is inside", "contains"))
    if path.parent.is_dir():
        from linumpy.io.recovery import recover_staging

        recover_staging(path)
    present = path.exists() or path.is_symlink()  # a dangling link is replaced only with -f
    if path.exists() and kind is not None and path.is_dir() != (kind == "directory"):
        found = "a directory" if path.is_dir() else "a file"
        parser.error(f"output {os.fspath(path)!r} is {found}; it is not replaced by a {kind}")
    if present and not overwrite:
        parser.error(f"output {os.fspath(path)!r} exists; use -f to overwrite it")
    if make_parents:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            parser.error(f"cannot create {os.fspath(path.parent)!r}: {exc.strerror}")
    if not path.parent.is_dir():
        parser.error(f"cannot create {os.fspath(path)!r}: no directory {os.fspath(path.parent)!r}")
    if not os.access(path.parent, os.W_OK | os.X_OK):  # a read-only file system too, for root
        parser.error(f"cannot create {os.fspath(path)!r}: {os.fspath(path.parent)!r} is read-only")
    _CHECKED.setdefault(parser, []).append(("output", path))
    return path


@contextmanager
def output_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a staging path beside ``path`` to write to, moved into place on success and deleted
    on an exception (see :func:`linumpy.io.staging.staged_output`)."""
    from linumpy.io.staging import staged_output

    # absolute: a dask worker opens it in a working directory of its own
    with staged_output(os.path.abspath(path), os.fspath(path)) as staging:
        yield staging
