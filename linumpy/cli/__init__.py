"""Shared conventions of the ``linum-*`` scripts.

- The module docstring is the parser's description; inputs and outputs are positional.
- ``-f/--overwrite`` replaces existing outputs; without it an existing output is an error.
- ``-v/--verbose`` logs what happens (``-vv`` for debug details) and ends with a table of where
  the time went (start-up and imports, CUDA context, kernel compilation, metadata, level 0,
  pyramid, the final swap, other: see :mod:`linumpy.phases`).
- ``--use-gpu/--no-use-gpu`` (alias ``--use_gpu``, off by default): without a usable GPU, a warning
  says what is missing and the CPU path runs.
- Bad arguments, unreadable or corrupt inputs, malformed metadata and unwritable outputs end with
  exit code 2 and a one-line error naming the file, option or chunk (``-v`` adds the traceback);
  exit code 1 (a traceback) is a bug.
- An output is never one of the inputs, nor another output of the same run (nor inside one, nor
  containing one): such a run stops before anything is touched.
- Ctrl-C ends a run with ``PROG: interrupted`` and exit status 130; a full disk, a quota or a file
  size limit ends it with an error naming the output.
- Outputs are written in a staging directory beside them and moved into place at the end (see
  :mod:`linumpy.io.staging`): an interrupted run leaves the previous output intact, and the next
  run removes what it left.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
import traceback
import warnings
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, NoReturn

from linumpy import phases
from linumpy.errors import LinumpyError

__all__ = [
    "LinumArgumentParser",
    "add_gpu_arg",
    "add_overwrite_arg",
    "add_verbose_arg",
    "build_parser",
    "check_input",
    "check_output",
    "fail_on_errors",
    "output_path",
    "parse_args",
    "resolve_gpu",
    "setup_logging",
]

logger = logging.getLogger("linumpy.cli")

#: Exit status of a run stopped by bad arguments or an unreadable input.
EXIT_USAGE = 2

# The inputs each parser's script checked, so that its outputs can be compared with them.
_INPUTS: weakref.WeakKeyDictionary[argparse.ArgumentParser, list[Path]] = (
    weakref.WeakKeyDictionary()
)
# The outputs each parser's script checked, so that no two of them are one path.
_OUTPUTS: weakref.WeakKeyDictionary[argparse.ArgumentParser, list[Path]] = (
    weakref.WeakKeyDictionary()
)
#: Exit status of a run stopped by Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130
# The -v count each parser parsed: fail_on_errors shows tracebacks with -v.
_VERBOSE: weakref.WeakKeyDictionary[argparse.ArgumentParser, int] = weakref.WeakKeyDictionary()
# With -v: [recorder, depth of fail_on_errors blocks, whether the start-up counts]; the recorder
# runs from the outermost fail_on_errors block's start to its end, which prints its table.
_PHASES: weakref.WeakKeyDictionary[argparse.ArgumentParser, list[Any]] = weakref.WeakKeyDictionary()


class LinumArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr and exit status 2.

    Examples
    --------
    >>> import contextlib, sys
    >>> from linumpy.cli import LinumArgumentParser
    >>> parser = LinumArgumentParser(prog="linum-demo")
    >>> _ = parser.add_argument("input")
    >>> try:
    ...     with contextlib.redirect_stderr(sys.stdout):
    ...         parser.parse_args(["a.zarr", "b.zarr"])
    ... except SystemExit as exc:
    ...     print("exit status", exc.code)
    linum-demo: error: unrecognized arguments: b.zarr
    exit status 2
    """

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE`` (one line) and exit with status 2."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {' '.join(message.split())}\n")


def build_parser(doc: str | None, prog: str | None = None) -> LinumArgumentParser:
    """A parser with ``doc`` (the script's module docstring) as its description.

    Examples
    --------
    >>> from linumpy.cli import build_parser
    >>> parser = build_parser("Stitch a mosaic grid.", prog="linum-demo")
    >>> _ = parser.add_argument("input")
    >>> print(parser.format_help())
    usage: linum-demo [-h] [--version] input
    <BLANKLINE>
    Stitch a mosaic grid.
    <BLANKLINE>
    positional arguments:
      input
    <BLANKLINE>
    options:
      -h, --help  show this help message and exit
      --version   show program's version number and exit
    <BLANKLINE>
    """
    from linumpy import __version__

    parser = LinumArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def add_overwrite_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``-f/--overwrite``.

    Examples
    --------
    >>> from linumpy.cli import add_overwrite_arg, build_parser
    >>> parser = build_parser("Demo.", prog="linum-demo")
    >>> add_overwrite_arg(parser)
    >>> parser.parse_args([]).overwrite, parser.parse_args(["-f"]).overwrite
    (False, True)
    """
    parser.add_argument(
        "-f", "--overwrite", action="store_true", help="Replace outputs that already exist."
    )


def add_verbose_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``-v/--verbose`` (repeatable).

    Examples
    --------
    >>> from linumpy.cli import add_verbose_arg, build_parser
    >>> parser = build_parser("Demo.", prog="linum-demo")
    >>> add_verbose_arg(parser)
    >>> [parser.parse_args(argv).verbose for argv in ([], ["-v"], ["-vv"])]
    [0, 1, 2]
    """
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="Log progress details (-vv: debug)."
    )


def add_gpu_arg(parser: argparse.ArgumentParser, what: str = "Read and compute") -> None:
    """Add ``--use-gpu`` (alias ``--use_gpu``) and ``--no-use-gpu``; off by default.

    Examples
    --------
    >>> from linumpy.cli import add_gpu_arg, build_parser
    >>> parser = build_parser("Demo.", prog="linum-demo")
    >>> add_gpu_arg(parser, "Stitch")
    >>> [parser.parse_args(argv).use_gpu for argv in ([], ["--use-gpu"], ["--use_gpu"])]
    [False, True, True]
    >>> parser.parse_args(["--no-use-gpu"]).use_gpu
    False
    """
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--use-gpu",
        "--use_gpu",
        dest="use_gpu",
        action="store_true",
        help=f"{what} on the GPU (cupy, nvCOMP); without a usable GPU, warn and use the CPU.",
    )
    group.add_argument(
        "--no-use-gpu", dest="use_gpu", action="store_false", help="Run on the CPU (the default)."
    )
    parser.set_defaults(use_gpu=False)


def setup_logging(verbose: int, prog: str) -> None:
    """Send linumpy's log records to stderr: warnings always, info with -v, debug with -vv.

    Examples
    --------
    Here stderr is redirected to stdout to show the records; the last two lines put the
    ``linumpy`` logger back as it was.

    >>> import contextlib, logging, sys
    >>> from linumpy.cli import setup_logging
    >>> root = logging.getLogger("linumpy")
    >>> handlers, level, propagate = root.handlers[:], root.level, root.propagate
    >>> with contextlib.redirect_stderr(sys.stdout):
    ...     setup_logging(1, "linum-demo")
    >>> logging.getLogger("linumpy.mosaic").info("stitched 6 tiles")
    linum-demo: INFO: stitched 6 tiles
    >>> logging.getLogger("linumpy.mosaic").debug("shown with -vv only")
    >>> root.handlers[:], root.propagate = handlers, propagate
    >>> root.setLevel(level)
    """
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{prog}: %(levelname)s: %(message)s"))
    root = logging.getLogger("linumpy")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def resolve_gpu(use_gpu: bool) -> bool:
    """Whether the GPU path runs: ``use_gpu`` and a usable GPU (cupy, nvCOMP, a CUDA device).

    Without the flag nothing GPU-related is imported. With it and no usable GPU, a warning says
    what is missing and False is returned (the CPU path runs).

    Examples
    --------
    >>> from linumpy.cli import resolve_gpu
    >>> resolve_gpu(False)
    False
    """
    if not use_gpu:
        return False
    try:
        from linumpy.gpu.zarr_io import gpu_unavailable_reason

        reason = gpu_unavailable_reason()
    except ImportError as exc:
        reason = f"linumpy's GPU support cannot be imported ({exc})"
    if reason is None:
        phases.gpu_started()  # with -v: the CUDA context timed as its own phase
        return True
    logger.warning("--use-gpu: no usable GPU: %s; running on the CPU", reason)
    return False


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
        from linumpy.io.staging import recover_staging

        recover_staging(path)  # an interrupted replacement of it may have left it in staging
    if not path.exists():
        parser.error(f"input {os.fspath(path)!r} does not exist")
    _INPUTS.setdefault(parser, []).append(path)
    return path


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
    """
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
    from linumpy.io.staging import STAGING_SUFFIX, staged

    try:
        with staged(path) as staging:
            yield staging
    except OSError as exc:
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
        if not full and STAGING_SUFFIX not in f"{exc.filename} {exc.filename2}":
            raise
        reason = exc.strerror or type(exc).__name__
        raise LinumpyError(f"cannot write {os.fspath(path)!r}: {reason}") from exc


@contextmanager
def fail_on_errors(parser: argparse.ArgumentParser) -> Iterator[None]:
    """Turn linumpy's errors and OS errors (unreadable input, unwritable output) into a one-line
    error and exit status 2; with ``-v`` (see :func:`parse_args`) the traceback comes first.
    Ctrl-C ends the run with ``PROG: interrupted`` and exit status 130 (what was being written is
    thrown away, its previous version kept).

    Any other exception is a bug: it propagates (a traceback and exit status 1).

    Examples
    --------
    >>> import contextlib, sys
    >>> from linumpy.cli import build_parser, fail_on_errors
    >>> from linumpy.mosaic.transform import parse_tile_shape
    >>> parser = build_parser("Demo.", prog="linum-demo")
    >>> try:
    ...     with contextlib.redirect_stderr(sys.stdout), fail_on_errors(parser):
    ...         parse_tile_shape((0, 64))
    ... except SystemExit as exc:
    ...     print("exit status", exc.code)
    linum-demo: error: tile shape must be two positive integers (height, width), got (0, 64)
    exit status 2
    """
    timing = _PHASES.get(parser)
    if timing is not None:
        if timing[1] == 0 and phases.active() is None:
            timing[0] = phases.PhaseRecorder(startup=None if timing[2] else 0.0).start()
        timing[1] += 1
    finished = False
    try:
        yield
        finished = True
    except (LinumpyError, OSError, ValueError) as exc:
        if _VERBOSE.get(parser, 0) > 0:
            traceback.print_exc(file=sys.stderr)
        parser.error(str(exc) or type(exc).__name__)
    except KeyboardInterrupt:
        if _VERBOSE.get(parser, 0) > 0:
            traceback.print_exc(file=sys.stderr)
        else:  # zarr's event loop, stopped mid-write, would report its pending tasks at exit
            logging.getLogger("asyncio").setLevel(logging.CRITICAL)
            warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
        parser.exit(EXIT_INTERRUPTED, f"{parser.prog}: interrupted\n")
    finally:
        if timing is not None:
            timing[1] -= 1
            if timing[1] == 0 and timing[0] is not None:
                _PHASES.pop(parser, None)
                result = timing[0].stop()
                if finished:
                    print(phases.format_table(result, parser.prog), file=sys.stderr, flush=True)


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse ``argv`` and set up logging from ``-v`` (and tracebacks in :func:`fail_on_errors`).

    Examples
    --------
    The last two lines put the ``linumpy`` logger back as it was (see :func:`setup_logging`).

    >>> import logging
    >>> from linumpy.cli import add_verbose_arg, build_parser, parse_args
    >>> parser = build_parser("Demo.", prog="linum-demo")
    >>> _ = parser.add_argument("input")
    >>> add_verbose_arg(parser)
    >>> root = logging.getLogger("linumpy")
    >>> handlers, level, propagate = root.handlers[:], root.level, root.propagate
    >>> parse_args(parser, ["mosaic.ome.zarr", "-v"])
    Namespace(input='mosaic.ome.zarr', verbose=1)
    >>> logging.getLevelName(root.level)
    'INFO'
    >>> root.handlers[:], root.propagate = handlers, propagate
    >>> root.setLevel(level)
    """
    args = parser.parse_args(argv)
    _VERBOSE[parser] = getattr(args, "verbose", 0)
    setup_logging(_VERBOSE[parser], parser.prog)
    if _VERBOSE[parser] > 0:
        # the interpreter's start-up counts for a command, not for main(argv) called from Python
        _PHASES[parser] = [None, 0, argv is None]
    if argv is None and _VERBOSE[parser] == 0:
        sys.excepthook = _interrupted_hook(parser.prog, sys.excepthook)
    return args


def _interrupted_hook(prog: str, previous: Any) -> Any:
    """An excepthook printing ``PROG: interrupted`` for a Ctrl-C outside :func:`fail_on_errors`
    (the interpreter then ends as killed by SIGINT: status 130 in a shell)."""

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if issubclass(kind, KeyboardInterrupt):
            print(f"{prog}: interrupted", file=sys.stderr)
        else:
            previous(kind, value, tb)

    return hook
