"""The parser of a ``linum-*`` script and the options every script shares: ``--version``,
``-f/--overwrite``, ``-v/--verbose`` and ``--use-gpu`` (with what it resolves to)."""

from __future__ import annotations

import argparse
import logging
from typing import NoReturn

__all__ = [
    "LinumArgumentParser",
    "add_gpu_arg",
    "build_parser",
    "gpu_reason",
    "resolve_gpu",
]

logger = logging.getLogger("linumpy.cli")


class LinumArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE`` (one line) and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def build_parser(
    doc: str | None, prog: str | None = None, *, overwrite: bool = True
) -> LinumArgumentParser:
    """A parser with ``doc`` (the script's module docstring) as its description, ``--version``,
    ``-v/--verbose`` (repeatable) and, for a script that writes (``overwrite``),
    ``-f/--overwrite``."""
    from linumpy import __version__

    parser = LinumArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    if overwrite:
        parser.add_argument(
            "-f", "--overwrite", action="store_true", help="Replace outputs that already exist."
        )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="Log progress details (-vv: debug)."
    )
    return parser


def add_gpu_arg(parser: argparse.ArgumentParser, what: str = "Read and compute") -> None:
    """Add ``--use-gpu`` (alias ``--use_gpu``) and ``--no-use-gpu``; off by default."""
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
    """Whether the GPU path runs: ``use_gpu`` and a usable GPU; without one, a warning says
    what is missing and the CPU path runs. Without the flag nothing GPU-related is imported."""
    if not use_gpu:
        return False
    reason = gpu_reason()
    if reason is None:
        return True
    logger.warning("--use-gpu: no usable GPU: %s; running on the CPU", reason)
    return False
