"""Where a run's time goes: phases that library functions mark and ``-v`` prints as a table.

Library functions mark what they do with the decorator :func:`recorded`: ``metadata``,
``level 0``, ``pyramid``, ``final swap``... Nothing is measured unless a :class:`PhaseRecorder` is
running (the ``linum-*`` scripts start one with ``-v``); without one a
mark costs one test of a global. While one runs, time inside a phase counts for that phase, less
the phases marked inside it (the innermost wins), so the rows add up to the wall time; time
outside every phase is ``other``. Phases are marked by the thread that started the recorder (the
one running the pipeline); marks from other threads (dask tasks) are ignored. Each row is plain
:func:`time.perf_counter` differences; the ``start-up and imports`` row is the time before the
first marked phase: the process's before the recorder started (from its start time in
``/proc/self/stat`` on Linux), then the command's own lazy imports and argument checks. Where an
import's time goes is ``python -X importtime``'s job.

:func:`format_table` prints the rows; :func:`parse_table` reads them back from a command's
output (the pipeline benchmark does).
"""

from __future__ import annotations

import functools
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

__all__ = [
    "OTHER",
    "STARTUP",
    "PhaseRecorder",
    "Phases",
    "active",
    "format_table",
    "parse_table",
    "process_age",
    "recorded",
]

#: The row of time outside every marked phase.
OTHER = "other"
#: The row of the time before the first marked phase (interpreter, imports).
STARTUP = "start-up and imports"
# Rows in this order first, then the others as first marked; "other" last.
_ORDER = (STARTUP, "metadata")
_TITLE = "where the time went"

P = ParamSpec("P")
R = TypeVar("R")

_ACTIVE: PhaseRecorder | None = None


@dataclass(frozen=True)
class Phases:
    """The measured rows of a run: seconds per phase and the total.

    Examples
    --------
    >>> from linumpy.phases import Phases
    >>> phases = Phases({"metadata": 0.25, "level 0": 2.0, "other": 0.25}, 2.5)
    >>> phases.seconds["level 0"] / phases.total
    0.8
    """

    seconds: Mapping[str, float]
    total: float


def process_age() -> float | None:
    """Seconds since this process started (Linux ``/proc/self/stat``; None elsewhere).

    Examples
    --------
    >>> from linumpy.phases import process_age
    >>> age = process_age()
    >>> age is None or age > 0
    True
    """
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime, in ticks
        return max(time.clock_gettime(time.CLOCK_BOOTTIME) - started, 0.0)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


class PhaseRecorder:
    """Records the phases marked while it runs (see the module documentation).

    Use it as a context manager (or :meth:`start` and :meth:`stop`); :meth:`result` gives the
    rows. One recorder runs at a time.

    Parameters
    ----------
    startup
        Seconds the process ran before the recorder started (by default :func:`process_age`);
        0 leaves the start-up out.

    Examples
    --------
    >>> import time
    >>> from linumpy.phases import PhaseRecorder
    >>> with PhaseRecorder(startup=0.0) as recorder:
    ...     with recorder.phase("level 0"):
    ...         time.sleep(0.02)
    ...         with recorder.phase("pyramid"):
    ...             time.sleep(0.01)
    >>> phases = recorder.result()
    >>> phases.seconds["level 0"] >= 0.02, phases.seconds["pyramid"] >= 0.01
    (True, True)
    >>> abs(sum(phases.seconds.values()) - phases.total) < 1e-6
    True
    """

    def __init__(self, startup: float | None = None) -> None:
        self.startup = process_age() if startup is None else startup
        self._lock = threading.Lock()
        self._totals: dict[str, float] = {}
        self._stack: list[list[Any]] = []
        self._thread: int | None = None
        self._started = self._stopped = 0.0

    # -- the main thread's phases --------------------------------------------------------------

    def _charge(self, now: float) -> None:
        frame = self._stack[-1]
        self._totals[frame[0]] = self._totals.get(frame[0], 0.0) + now - frame[1]
        frame[1] = now

    @contextmanager
    def phase(self, name: str, unless_within: tuple[str, ...] = ()) -> Iterator[None]:
        """Count the time inside the ``with`` block for ``name`` (unless the current phase is one
        of ``unless_within``; ``store_dask`` marks ``level 0`` unless it is writing a pyramid
        level); from another thread, or once stopped, nothing is counted."""
        if threading.get_ident() != self._thread or not self._stack:
            yield
            return
        with self._lock:
            if self._stack[-1][0] in unless_within:
                name = self._stack[-1][0]
            now = time.perf_counter()
            self._charge(now)
            self._stack[0][0] = OTHER  # unmarked time after the first phase is "other"
            self._stack.append([name, now])
        try:
            yield
        finally:
            with self._lock:
                if len(self._stack) > 1:
                    now = time.perf_counter()
                    self._charge(now)
                    self._stack.pop()
                    self._stack[-1][1] = now

    # -- running ---------------------------------------------------------------------------------

    def start(self) -> PhaseRecorder:
        """Start recording in this thread; raises RuntimeError if another recorder runs."""
        global _ACTIVE
        if _ACTIVE is not None:
            raise RuntimeError("a PhaseRecorder is already running")
        self._thread = threading.get_ident()
        self._started = time.perf_counter()
        self._stack = [[STARTUP, self._started]]  # until the first phase: the lazy imports
        _ACTIVE = self
        return self

    def stop(self) -> Phases:
        """Stop recording and return the rows."""
        global _ACTIVE
        if _ACTIVE is self:
            _ACTIVE = None
            with self._lock:
                now = time.perf_counter()
                while len(self._stack) > 1:
                    self._charge(now)
                    self._stack.pop()
                    self._stack[-1][1] = now
                self._charge(now)
                self._stopped = now
        return self.result()

    def result(self) -> Phases:
        """The rows so far (seconds by phase in display order) and the total."""
        with self._lock:
            totals = dict(self._totals)
            if self._stack and _ACTIVE is self:
                now = time.perf_counter()
                label, since = self._stack[-1]
                totals[label] = totals.get(label, 0.0) + now - since
            else:
                now = self._stopped or time.perf_counter()
        startup = self.startup or 0.0
        totals[STARTUP] = totals.get(STARTUP, 0.0) + startup
        ordered = {name: totals.pop(name) for name in _ORDER if name in totals}
        other = totals.pop(OTHER, 0.0)
        ordered.update(totals)
        ordered[OTHER] = other
        total = now - self._started + startup if self._started else sum(ordered.values())
        return Phases(ordered, total)

    def __enter__(self) -> PhaseRecorder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def active() -> PhaseRecorder | None:
    """The running recorder, or None.

    Examples
    --------
    >>> from linumpy.phases import PhaseRecorder, active
    >>> active() is None
    True
    >>> with PhaseRecorder(startup=0.0) as recorder:
    ...     active() is recorder
    True
    """
    return _ACTIVE


def recorded(
    name: str, *, unless_within: tuple[str, ...] = ()
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A decorator: calls of the function count for phase ``name`` while a recorder runs
    (see :meth:`PhaseRecorder.phase` for ``unless_within``).

    Examples
    --------
    >>> import time
    >>> from linumpy.phases import PhaseRecorder, recorded
    >>> @recorded("metadata")
    ... def read_attributes():
    ...     time.sleep(0.01)
    >>> with PhaseRecorder(startup=0.0) as recorder:
    ...     read_attributes()
    >>> recorder.result().seconds["metadata"] >= 0.01
    True
    """

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            recorder = _ACTIVE
            if recorder is None:
                return function(*args, **kwargs)
            with recorder.phase(name, unless_within):
                return function(*args, **kwargs)

        return wrapper

    return decorate


def format_table(phases: Phases, title: str = "") -> str:
    """The rows as a small text table: seconds and share of the total.

    Examples
    --------
    >>> from linumpy.phases import Phases, format_table
    >>> print(format_table(Phases({"level 0": 3.0, "other": 1.0}, 4.0), "linum-aip"))
    linum-aip: where the time went (4.00 s since the process started):
      level 0                   3.00 s  75.0%
      other                     1.00 s  25.0%
    """
    head = f"{title}: " if title else ""
    lines = [f"{head}{_TITLE} ({phases.total:.2f} s since the process started):"]
    for name, seconds in phases.seconds.items():
        share = 100 * seconds / phases.total if phases.total > 0 else 0.0
        lines.append(f"  {name:<22} {seconds:>7.2f} s {share:>5.1f}%")
    return "\n".join(lines)


_ROW = re.compile(r"^  (\S.*?)\s+(-?\d+\.\d+) s\s+-?\d+\.\d%\s*$")
_HEAD = re.compile(re.escape(_TITLE) + r" \((\d+\.\d+) s since the process started\):\s*$")


def parse_table(text: str) -> Phases | None:
    """The last table :func:`format_table` wrote in ``text`` (a command's output), or None.

    Examples
    --------
    >>> from linumpy.phases import Phases, format_table, parse_table
    >>> phases = Phases({"metadata": 0.5, "level 0": 3.0, "other": 0.5}, 4.0)
    >>> output = "progress...\\n" + format_table(phases, "linum-aip") + "\\nlinum-aip: done\\n"
    >>> parse_table(output)
    Phases(seconds={'metadata': 0.5, 'level 0': 3.0, 'other': 0.5}, total=4.0)
    >>> parse_table("no table here") is None
    True
    """
    found: Phases | None = None
    lines = re.split(r"[\r\n]+", text)
    for i, line in enumerate(lines):
        head = _HEAD.search(line)
        if head is None:
            continue
        seconds: dict[str, float] = {}
        for row in lines[i + 1 :]:
            match = _ROW.match(row)
            if match is None:
                break
            seconds[match[1]] = float(match[2])
        found = Phases(seconds, float(head[1]))
    return found
