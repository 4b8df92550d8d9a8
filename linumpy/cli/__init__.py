"""Shared conventions of the ``linum-*`` scripts (docs/scripts.md, "Conventions"): positional
inputs and outputs, ``-f``, ``-v``, ``--use-gpu``, one-line errors with exit status 2 (130 on
Ctrl-C), outputs checked against the inputs and each other and written in staging.
"""

from __future__ import annotations

from linumpy.cli.parser import (
    LinumArgumentParser,
    add_gpu_arg,
    build_parser,
    resolve_gpu,
)
from linumpy.cli.paths import check_input, check_output, output_folder, output_path
from linumpy.cli.run import fail_on_errors, parse_args

__all__ = [
    "LinumArgumentParser",
    "add_gpu_arg",
    "build_parser",
    "check_input",
    "check_output",
    "output_folder",
    "fail_on_errors",
    "output_path",
    "parse_args",
    "resolve_gpu",
]
