"""A ``linum-*`` script's run: arguments parsed, logging set up from ``-v``, errors turned into
one line and an exit status (2, or 130 on Ctrl-C), and with ``-v`` the table of where the time
went (:mod:`linumpy.phases`)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import traceback
import warnings
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from linumpy import phases
from linumpy.errors import LinumpyError

__all__ = ["EXIT_INTERRUPTED", "fail_on_errors", "parse_args"]

#: Exit status of a run stopped by Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130
# The -v count each parser parsed: fail_on_errors shows tracebacks with -v.
_VERBOSE: weakref.WeakKeyDictionary[argparse.ArgumentParser, int] = weakref.WeakKeyDictionary()
# With -v: [recorder, depth of fail_on_errors blocks, whether the start-up counts]; the recorder
# runs from the outermost fail_on_errors block's start to its end, which prints its table.
_PHASES: weakref.WeakKeyDictionary[argparse.ArgumentParser, list[Any]] = weakref.WeakKeyDictionary()
# Parsers of the process's own command line: a Ctrl-C there ends the process, so what would be
# reported on the way out may be silenced process-wide.
_COMMAND_LINE: weakref.WeakSet[argparse.ArgumentParser] = weakref.WeakSet()


@contextmanager
def fail_on_errors(parser: argparse.ArgumentParser) -> Iterator[None]:
    """Turn linumpy's errors, OS errors and ValueErrors into a one-line error and exit status 2
    (or the error's ``exit_status``), with the traceback first under ``-v``; Ctrl-C ends the run
    with ``PROG: interrupted`` and status 130. Any other exception is a bug and propagates."""
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
        message = str(exc) or type(exc).__name__
        status = getattr(exc, "exit_status", 2)  # 1: a lost dask scheduler or workers
        parser.exit(status, f"{parser.prog}: error: {' '.join(message.split())}\n")
    except KeyboardInterrupt:
        if _VERBOSE.get(parser, 0) > 0:
            traceback.print_exc(file=sys.stderr)
        else:
            _quiet_after_interrupt(exiting=parser in _COMMAND_LINE)
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
    """Parse ``argv`` and send linumpy's log records to stderr (warnings, info with -v, debug
    with -vv; tracebacks in :func:`fail_on_errors` with -v); for the process's own command line
    (``argv`` None), also the Ctrl-C hook, SIGUSR1 stacks, the lean ``dask.array`` import and, for
    a local GPU run, the GPU warm-up."""
    args = parser.parse_args(argv)
    verbose = _VERBOSE[parser] = getattr(args, "verbose", 0)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{parser.prog}: %(levelname)s: %(message)s"))
    root = logging.getLogger("linumpy")
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING)
    root.propagate = False
    if verbose > 0:
        # the interpreter's start-up counts for a command, not for main(argv) called from Python
        _PHASES[parser] = [None, 0, argv is None]
    if argv is not None:
        return args
    if verbose == 0:
        sys.excepthook = _interrupted_hook(parser.prog, sys.excepthook)
    _COMMAND_LINE.add(parser)
    _stacks_on_sigusr1()
    from linumpy.cli.lean_imports import lean_dask_array

    lean_dask_array()  # before the warm-up thread starts importing
    if _runs_on_this_gpu(args):
        from linumpy.gpu.availability import load_cupy
        from linumpy.gpu.warm_up import create_context_in_background, warm_up_in_background

        create_context_in_background()  # through the driver, while cupy loads
        # cupy and cupyx loaded before any thread using cupy starts (load_cupy says why)
        with contextlib.suppress(ImportError):  # resolve_gpu reports a missing cupy
            load_cupy()
        warm_up_in_background()  # the staging, nvCOMP and the kernels, while modules import
    return args


def _stacks_on_sigusr1() -> None:
    """Make ``kill -USR1 PID`` print every thread's stack to stderr (where a stuck command
    waits); nothing where the system has no SIGUSR1 or stderr is not a file."""
    import faulthandler
    import signal

    if hasattr(signal, "SIGUSR1"):
        # stderr may have no file descriptor (an embedding program's) or be None
        with contextlib.suppress(AttributeError, OSError, ValueError, RuntimeError):
            faulthandler.register(signal.SIGUSR1, all_threads=True)


def _runs_on_this_gpu(args: argparse.Namespace) -> bool:
    """Whether the command runs its GPU work in this process (``--use-gpu``, no cluster)."""
    return (
        bool(getattr(args, "use_gpu", False))
        and getattr(args, "gpus", None) is None
        and getattr(args, "scheduler", None) is None
    )


def _quiet_after_interrupt(*, exiting: bool) -> None:
    """Keep the exit after Ctrl-C to its one line: objects the interrupt left half made or
    mid-task (zarr's event loop, its pending writes, a staged write) would report themselves as
    they go. Failed clean-ups and uncommitted writes are silenced only when the process is
    ``exiting`` (a command, not ``main(argv)`` called from Python, which goes on)."""
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
    if not exiting:
        return
    sys.unraisablehook = lambda unraisable: None  # the run already ended with "interrupted"
    staging = sys.modules.get("linumpy.io.staging")  # not loaded: no write to quiet
    if staging is not None:
        staging.discard_quietly()


def _interrupted_hook(prog: str, previous: Any) -> Any:
    """An excepthook printing ``PROG: interrupted`` for a Ctrl-C outside :func:`fail_on_errors`
    (the interpreter then ends as killed by SIGINT: status 130 in a shell)."""

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if issubclass(kind, KeyboardInterrupt):
            _quiet_after_interrupt(exiting=True)
            print(f"{prog}: interrupted", file=sys.stderr)
        else:
            previous(kind, value, tb)

    return hook
