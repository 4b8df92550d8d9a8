"""Shared conventions of the ``linum-*`` scripts.

- The module docstring is the parser's description; inputs and outputs are positional.
- ``-f/--overwrite`` replaces existing outputs; without it an existing output is an error.
- ``-v/--verbose`` logs what happens (``-vv`` for debug details) and ends with a table of where
  the time went (start-up and imports, metadata, level 0, pyramid, the final swap, other: see
  :mod:`linumpy.phases`).
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

The modules: :mod:`linumpy.cli.parser` (the parser and the shared options),
:mod:`linumpy.cli.paths` (inputs and outputs), :mod:`linumpy.cli.run` (logging, errors and exit
statuses), :mod:`linumpy.cli.options` (option types and the layout options) and
:mod:`linumpy.cli.cluster_args` (the dask options).
"""

from __future__ import annotations

from linumpy.cli.parser import (
    LinumArgumentParser,
    add_gpu_arg,
    add_overwrite_arg,
    add_verbose_arg,
    build_parser,
    resolve_gpu,
)
from linumpy.cli.paths import check_input, check_output, output_folder, output_path
from linumpy.cli.run import fail_on_errors, parse_args, setup_logging

__all__ = [
    "LinumArgumentParser",
    "add_gpu_arg",
    "add_overwrite_arg",
    "add_verbose_arg",
    "build_parser",
    "check_input",
    "check_output",
    "output_folder",
    "fail_on_errors",
    "output_path",
    "parse_args",
    "resolve_gpu",
    "setup_logging",
]
