"""Where a run's time goes: phases that library functions mark with :func:`recorded` and ``-v``
prints as a table (:func:`format_table`; :func:`parse_table` reads it back).

Nothing is measured unless a :class:`PhaseRecorder` runs (the scripts start one with ``-v``).
Time inside a phase counts for it, less the phases marked inside it, so the rows add up to the
wall time; time outside every phase is ``other``. Only the thread that started the recorder
marks phases (dask tasks' marks are ignored). ``start-up and imports`` is the time before the
first phase: the process's before the recorder started, then the command's lazy imports.
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
    """The measured rows of a run: seconds per phase and the total."""

    seconds: Mapping[str, float]
    total: float


def process_age() -> float | None:
    """Seconds since this process started (Linux ``/proc/self/stat``; None elsewhere)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime, in ticks
        return max(time.clock_gettime(time.CLOCK_BOOTTIME) - started, 0.0)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


class PhaseRecorder:
    """Records the phases marked while it runs, one recorder at a time: a context manager, or
    :meth:`start` and :meth:`stop`. ``startup`` is the seconds the process ran before it
    started (by default :func:`process_age`; 0 leaves the start-up out)."""

    def __init__(self, startup: float | None = None) -> None:
        self.startup = process_age() if startup is None else startup
        self._lock = threading.Lock()
        self._totals: dict[str, float] = {}
        self._stack: list[list[Any]] = []
        self._thread: int | None = None
        self._started = self._stopped = 0.0

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
        """The rows of a stopped recorder (seconds by phase in display order) and the total."""
        startup = self.startup or 0.0
        totals = dict(self._totals)
        totals[STARTUP] = totals.get(STARTUP, 0.0) + startup
        ordered = {name: totals.pop(name) for name in _ORDER if name in totals}
        other = totals.pop(OTHER, 0.0)
        ordered.update(totals)
        ordered[OTHER] = other
        return Phases(ordered, self._stopped - self._started + startup)

    def __enter__(self) -> PhaseRecorder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def active() -> PhaseRecorder | None:
    """The running recorder, or None."""
    return _ACTIVE


def recorded(
    name: str, *, unless_within: tuple[str, ...] = ()
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A decorator: calls of the function count for phase ``name`` while a recorder runs
    (see :meth:`PhaseRecorder.phase` for ``unless_within``)."""

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


def format_table(phases: Phases, title: str) -> str:
    """The rows as a small text table: seconds and share of the total."""
    lines = [f"{title}: {_TITLE} ({phases.total:.2f} s since the process started):"]
    for name, seconds in phases.seconds.items():
        share = 100 * seconds / phases.total if phases.total > 0 else 0.0
        lines.append(f"  {name:<22} {seconds:>7.2f} s {share:>5.1f}%")
    return "\n".join(lines)


_ROW = re.compile(r"^  (\S.*?)\s+(-?\d+\.\d+) s\s+-?\d+\.\d%\s*$")
_HEAD = re.compile(re.escape(_TITLE) + r" \((\d+\.\d+) s since the process started\):\s*$")


def parse_table(text: str) -> Phases | None:
    """The last table :func:`format_table` wrote in ``text`` (a command's output), or None."""
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
