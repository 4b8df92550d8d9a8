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

# The inputs each parser's script checked, so that its outputs can be compared with them.
_INPUTS: weakref.WeakKeyDictionary[argparse.ArgumentParser, list[Path]] = (
    weakref.WeakKeyDictionary()
)
# The outputs each parser's script checked, so that no two of them are one path.
_OUTPUTS: weakref.WeakKeyDictionary[argparse.ArgumentParser, list[Path]] = (
    weakref.WeakKeyDictionary()
)


def check_input(parser: argparse.ArgumentParser, path: str | os.PathLike[str]) -> Path | str:
    """Exit with a one-line error when the input ``path`` does not exist.

    A remote URL (``http(s)://``, ``s3://``, ``gs://``) is returned as it is: its reader names
    it in any error; a ``file://`` URL is checked as the local path it names.

    Examples
    --------
    >>> import contextlib, sys, tempfile
    >>> from linumpy.cli import build_parser, check_input
    >>> parser = build_parser("Demo.", prog="linum-demo")
    >>> folder = tempfile.mkdtemp()
    >>> check_input(parser, folder).is_dir()
    True
    >>> try:
    ...     with contextlib.redirect_stderr(sys.stdout):
    ...         check_input(parser, "missing.ome.zarr")
    ... except SystemExit as exc:
    ...     print("exit status", exc.code)
    linum-demo: error: input 'missing.ome.zarr' does not exist
    exit status 2
    """
    from linumpy.io.remote import is_url, local_path, url_scheme

    if is_url(path):
        return os.fspath(path)
    path = local_path(os.fspath(path)) if url_scheme(path) == "file" else Path(path)
    if not path.exists():
        from linumpy.io.staging import staging_left

        # reading never writes: an interrupted write's staging is named, left to the writers
        left = staging_left(path)
        note = (
            f"; an interrupted write left {left[0]} (see linumpy.io.clean_staging)" if left else ""
        )
        parser.error(f"input {os.fspath(path)!r} does not exist{note}")
    _INPUTS.setdefault(parser, []).append(path)
    return path


@contextmanager
def output_folder(parser: argparse.ArgumentParser, path: str | os.PathLike[str]) -> Iterator[Path]:
    """Create the folder ``path`` that a script writes its outputs into (and its parents) and
    yield it, or exit with a one-line error when it is an input of the script or inside one, is
    a file, or cannot be created. A folder this call created is removed again when the block
    fails (an exit included) and leaves it empty. Its outputs are checked one by one with
    :func:`check_output`.

    Examples
    --------
    >>> import contextlib, sys, tempfile
    >>> from pathlib import Path
    >>> from linumpy.cli import build_parser, check_input, output_folder
    >>> parser = build_parser("Demo.", prog="linum-demo")
    >>> folder = Path(tempfile.mkdtemp())
    >>> with output_folder(parser, folder / "out" / "job") as job:
    ...     job.is_dir()
    True
    >>> try:
    ...     with output_folder(parser, folder / "new"):
    ...         raise RuntimeError("failed")
    ... except RuntimeError:
    ...     (folder / "new").exists()
    False
    >>> source = check_input(parser, folder / "out")
    >>> try:
    ...     with contextlib.redirect_stderr(sys.stdout):
    ...         with output_folder(parser, folder / "out" / "job"):
    ...             pass
    ... except SystemExit as exc:
    ...     print("exit status", exc.code)  # doctest: +ELLIPSIS
    linum-demo: error: output '.../job' is inside the input '.../out'; write to another path
    exit status 2
    """
    path = Path(path)
    for other in _INPUTS.get(parser, []):
        overlap = _overlap(path, other)
        if overlap in ("is", "is inside"):
            parser.error(
                f"output {os.fspath(path)!r} {overlap} the input {os.fspath(other)!r}; "
                "write to another path"
            )
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


def check_output(
    parser: argparse.ArgumentParser,
    path: str | os.PathLike[str],
    overwrite: bool,
    *,
    make_parents: bool = False,
    kind: Literal["file", "directory"] | None = None,
) -> Path:
    """Exit with a one-line error when ``path`` exists without ``-f`` (a dangling link too),
    cannot be created, or is an input of the script (checked with :func:`check_input` before) or
    another of its outputs (checked before), inside one or contains one.

    With ``make_parents``, missing parent directories are created. With ``kind``, an existing
    ``path`` of the other kind is never replaced, ``-f`` or not. What an interrupted earlier
    write of ``path`` left in staging is recovered or removed first.

    Examples
    --------
    >>> import contextlib, sys, tempfile
    >>> from pathlib import Path
    >>> from linumpy.cli import build_parser, check_output
    >>> parser = build_parser("Demo.", prog="linum-demo")
    >>> folder = Path(tempfile.mkdtemp())
    >>> check_output(parser, folder / "new" / "out.ome.zarr", False, make_parents=True).name
    'out.ome.zarr'
    >>> (folder / "new").is_dir()
    True
    >>> parser = build_parser("Demo.", prog="linum-demo")  # each run checks its outputs apart
    >>> try:
    ...     with contextlib.redirect_stderr(sys.stdout):
    ...         check_output(parser, folder / "new", overwrite=False)
    ... except SystemExit as exc:
    ...     print("exit status", exc.code)  # doctest: +ELLIPSIS
    linum-demo: error: output '.../new' exists; use -f to overwrite it
    exit status 2
    >>> check_output(parser, folder / "new", overwrite=True) == folder / "new"
    True
    >>> source = check_input(parser, folder / "new")
    >>> try:
    ...     with contextlib.redirect_stderr(sys.stdout):
    ...         check_output(parser, folder / "new", overwrite=True)
    ... except SystemExit as exc:
    ...     print("exit status", exc.code)  # doctest: +ELLIPSIS
    linum-demo: error: output '.../new' is the input '.../new'; write to another path
    exit status 2

    Two outputs of one run are never one path (nor one inside the other):

    >>> parser = build_parser("Demo.", prog="linum-demo")
    >>> _ = check_output(parser, folder / "a.png", overwrite=True)
    >>> try:
    ...     with contextlib.redirect_stderr(sys.stdout):
    ...         check_output(parser, folder / "a.png", overwrite=True)
    ... except SystemExit as exc:
    ...     print("exit status", exc.code)  # doctest: +ELLIPSIS
    linum-demo: error: output '.../a.png' is the output '.../a.png'; write to another path
    exit status 2

    Outputs are written on a file system (local or shared by a cluster's workers), not to an
    object store's URL:

    >>> try:
    ...     with contextlib.redirect_stderr(sys.stdout):
    ...         check_output(parser, "s3://lab/aip.ome.zarr", overwrite=True)
    ... except SystemExit as exc:
    ...     print("exit status", exc.code)  # doctest: +ELLIPSIS
    linum-demo: error: output 's3://lab/aip.ome.zarr': the scripts write outputs to a file ...
    exit status 2
    """
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
    for role, others in (("input", _INPUTS), ("output", _OUTPUTS)):
        for other in others.get(parser, []):
            overlap = _overlap(path, other)
            if overlap:
                parser.error(
                    f"output {os.fspath(path)!r} {overlap} the {role} {os.fspath(other)!r}; "
                    "write to another path"
                )
    if path.parent.is_dir():
        from linumpy.io.staging import recover_staging

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
    _OUTPUTS.setdefault(parser, []).append(path)
    return path


@contextmanager
def output_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path to write ``path``'s content to; move it into place on success.

    The temporary path has the same name, inside a hidden staging directory beside ``path`` (same
    file system, so the final move is a rename; see :func:`linumpy.io.staging.staged`). On an
    exception (Ctrl-C included) it is deleted and ``path`` is left as it was; a killed run leaves
    the staging directory, which the next write of ``path`` removes. An existing ``path`` is
    replaced only once the new one is complete, in one step. An OS error about the staging
    directory (a read-only folder), and a full disk, a quota or a file size limit met while
    writing, become a :class:`LinumpyError` naming ``path``.

    Examples
    --------
    >>> import os, tempfile
    >>> from pathlib import Path
    >>> from linumpy.cli import output_path
    >>> folder = Path(tempfile.mkdtemp())
    >>> with output_path(folder / "result.txt") as staging:
    ...     _ = staging.write_text("complete")
    ...     [p.name.endswith(".linumpy-staging") for p in folder.iterdir()]
    [True]
    >>> os.listdir(folder), (folder / "result.txt").read_text()
    (['result.txt'], 'complete')

    An interrupted run leaves the previous output in place:

    >>> try:
    ...     with output_path(folder / "result.txt") as staging:
    ...         _ = staging.write_text("half")
    ...         raise RuntimeError("interrupted")
    ... except RuntimeError:
    ...     pass
    >>> os.listdir(folder), (folder / "result.txt").read_text()
    (['result.txt'], 'complete')
    """
    from linumpy.io.staging import staged_output

    # absolute: a dask worker opens it in a working directory of its own
    with staged_output(os.path.abspath(path), os.fspath(path)) as staging:
        yield staging
