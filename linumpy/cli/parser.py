"""The parser of a ``linum-*`` script and the options every script shares: ``--version``,
``-f/--overwrite``, ``-v/--verbose`` and ``--use-gpu`` (with what it resolves to)."""

from __future__ import annotations

import argparse
import logging
from typing import NoReturn

__all__ = [
    "EXIT_USAGE",
    "LinumArgumentParser",
    "add_gpu_arg",
    "add_overwrite_arg",
    "add_verbose_arg",
    "build_parser",
    "gpu_reason",
    "resolve_gpu",
]

logger = logging.getLogger("linumpy.cli")

#: Exit status of a run stopped by bad arguments or an unreadable input.
EXIT_USAGE = 2


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


def gpu_reason() -> str | None:
    """Why this process has no usable GPU, None when it has one (also run on dask workers)."""
    try:
        from linumpy.gpu.zarr_io import gpu_unavailable_reason

        return gpu_unavailable_reason()
    except ImportError as exc:
        return f"linumpy's GPU support cannot be imported ({exc})"


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
    reason = gpu_reason()
    if reason is None:
        return True
    logger.warning("--use-gpu: no usable GPU: %s; running on the CPU", reason)
    return False
