"""Timing of benchmark rows: warm-up runs, repeats within a time budget, medians."""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Row", "Timer"]

logger = logging.getLogger(__name__)

#: "cpu"/"gpu": a path a user takes; "ceiling": a reference measurement the paths are judged by.
Kind = Literal["cpu", "gpu", "ceiling"]
#: Rows whose runs write files: each starts after ``os.sync()`` (untimed).
_WRITES = frozenset({"write", "file-write"})


@dataclass(slots=True)
class Row:
    """One measured row of the benchmark.

    Attributes
    ----------
    layout, name
        The storage layout and what was measured.
    kind
        ``"cpu"``, ``"gpu"`` or ``"ceiling"``.
    op
        ``"read"``, ``"write"`` or ``"read in turn"`` (reads timed in turn with another
        layout's, for the ratio of the two); a ceiling's ``op`` names the ceiling (``"decode-cpu"``,
        ``"decode-gpu"``, ``"file-read"``, ``"file-read-cold"``, ``"copy"``, ``"file-write"``).
    gbps
        10^9 bytes of decompressed volume per second (0 when it failed or was skipped).
    seconds, runs
        Median time of the timed runs and how many there were.
    matches
        Whether the read equals the volume (None when nothing was read back).
    cold
        Read after dropping the files from the page cache.
    note
        Why it failed or was skipped, or what else it measured.

    Examples
    --------
    >>> from linumpy.bench import Row
    >>> row = Row("64^3", "read_volume (CPU)", "cpu", "read", 2.5, 0.43, 3, True)
    >>> row.ok, row.cold
    (True, False)
    """

    layout: str
    name: str
    kind: Kind
    op: str
    gbps: float = 0.0
    seconds: float = 0.0
    runs: int = 0
    matches: bool | None = None
    cold: bool = False
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Measured, and (for reads) equal to the volume."""
        return self.runs > 0 and self.matches is not False


class Timer:
    """Times rows: ``warmup`` untimed runs, then up to ``repeats`` timed runs (medians).

    A row stops repeating once its timed runs took ``budget`` seconds (at least one timed run).
    ``sync`` is called before starting and stopping the clock (a device synchronisation on GPUs).
    Before each run of a write row (``op`` ``"write"`` or ``"file-write"``), ``os.sync()`` flushes
    what earlier runs left dirty, untimed, so that no write pays for the ones before it.
    A row that raises is recorded with its error as the note, and the benchmark goes on.

    Examples
    --------
    >>> from linumpy.bench import Timer
    >>> timer = Timer(warmup=0, repeats=2, budget=1.0)
    >>> row = timer.measure("8^3", "sum", "cpu", "read", lambda: sum(range(1000)), nbytes=8000)
    >>> row.runs, row.gbps > 0, row.matches
    (2, True, None)
    >>> timer.measure("8^3", "broken", "cpu", "read", lambda: 1 / 0, nbytes=1).note
    'failed: ZeroDivisionError: division by zero'
    """

    def __init__(
        self,
        *,
        warmup: int = 1,
        repeats: int = 3,
        budget: float = 4.0,
        sync: Callable[[], None] | None = None,
    ) -> None:
        self.warmup = warmup
        self.repeats = repeats
        self.budget = budget
        self.sync = sync or (lambda: None)
        self.rows: list[Row] = []

    def skip(self, layout: str, name: str, kind: Kind, op: str, note: str) -> Row:
        """Record a row that could not run here, with the reason."""
        row = Row(layout, name, kind, op, note=note)
        self.rows.append(row)
        return row

    def measure(
        self,
        layout: str,
        name: str,
        kind: Kind,
        op: str,
        run: Callable[[], Any],
        *,
        nbytes: int,
        check: Callable[[Any], bool] | None = None,
        before: Callable[[], None] | None = None,
        warmup: int | None = None,
        cold: bool = False,
        note: str = "",
    ) -> Row:
        """Time ``run`` and record a row of ``nbytes / median time``.

        ``check`` is applied to the first run's result; ``before`` runs untimed before each run.
        """
        warmup = self.warmup if warmup is None else warmup
        row = Row(layout, name, kind, op, cold=cold, note=note)
        times: list[float] = []
        try:
            for i in range(warmup + self.repeats):
                if i > warmup and sum(times) > self.budget:
                    break
                if before is not None:
                    before()
                if op in _WRITES and hasattr(os, "sync"):
                    # every write starts with no dirty pages of the runs and rows before it,
                    # which the kernel would otherwise throttle it to write back
                    os.sync()
                elapsed = self._run(run, row, check)
                if i >= warmup:
                    times.append(elapsed)
        except Exception as exc:  # a failing path is a result too: record it and go on
            logger.debug("%s / %s failed", layout, name, exc_info=True)
            _failed(row, exc)
        else:
            _timed(row, times, nbytes)
        self.rows.append(row)
        return row

    def measure_interleaved(
        self,
        cases: Sequence[tuple[str, Callable[[], Any]]],
        name: str,
        kind: Kind,
        op: str,
        *,
        nbytes: int,
        check: Callable[[Any], bool] | None = None,
    ) -> list[Row]:
        """Time the runs of several cases in turn, one of each per round, and record a row per
        case (named by its layout) of ``nbytes / median time``.

        A machine whose speed drifts (a shared or busy host) then slows every case alike, so
        their ratio holds where rows timed one after another do not. Rounds stop once their
        timed runs took ``budget`` seconds per case (at least one timed round).

        Examples
        --------
        >>> from linumpy.bench import Timer
        >>> timer = Timer(warmup=0, repeats=3, budget=1.0)
        >>> cases = [("a", lambda: sum(range(1000))), ("b", lambda: sum(range(2000)))]
        >>> [(row.layout, row.runs) for row in timer.measure_interleaved(cases, "sum", "cpu",
        ...                                                               "read", nbytes=8000)]
        [('a', 3), ('b', 3)]
        """
        rows = [Row(layout, name, kind, op) for layout, _ in cases]
        times: list[list[float]] = [[] for _ in cases]
        try:
            for i in range(self.warmup + self.repeats):
                if i > self.warmup and sum(map(sum, times)) > self.budget * len(cases):
                    break
                for (_, run), row, spent in zip(cases, rows, times, strict=True):
                    elapsed = self._run(run, row, check)
                    if i >= self.warmup:
                        spent.append(elapsed)
        except Exception as exc:  # as measure: a failing path is recorded, the run goes on
            logger.debug("%s failed", name, exc_info=True)
            for row in rows:
                _failed(row, exc)
        else:
            for row, spent in zip(rows, times, strict=True):
                _timed(row, spent, nbytes)
        self.rows.extend(rows)
        return rows

    def _run(self, run: Callable[[], Any], row: Row, check: Callable[[Any], bool] | None) -> float:
        """Seconds of one run (synchronised); its result checked when ``row`` has no verdict.

        The result is dropped before the next run starts, so that runs do not hold two at once.
        """
        self.sync()
        start = time.perf_counter()
        result = run()
        self.sync()
        elapsed = time.perf_counter() - start
        if check is not None and row.matches is None:
            row.matches = bool(check(result))
        return elapsed


def _failed(row: Row, exc: Exception) -> None:
    row.note = f"failed: {type(exc).__name__}: {exc}".splitlines()[0][:300]
    row.matches = None


def _timed(row: Row, times: list[float], nbytes: int) -> None:
    row.seconds = statistics.median(times)
    row.runs = len(times)
    row.gbps = nbytes / 1e9 / row.seconds if row.seconds > 0 else float("inf")
