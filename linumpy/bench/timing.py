"""Timing of benchmark rows: a warm-up run, repeats within a time budget, medians."""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Row", "Timer"]

logger = logging.getLogger(__name__)

#: "cpu"/"gpu": a path a user takes; "ceiling": a reference measurement the paths are judged by.
Kind = Literal["cpu", "gpu", "ceiling"]


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
        ``"read"`` or ``"write"``; a ceiling's ``op`` names the ceiling (``"decode-cpu"``,
        ``"decode-gpu"``, ``"file-read"``, ``"copy"``).
    gbps
        10^9 bytes of decompressed volume per second (0 when it failed or was skipped).
    seconds, runs
        Median time of the timed runs and how many there were.
    matches
        Whether the read equals the volume (None when nothing was read back).
    note
        Why it failed or was skipped, or what else it measured.

    Examples
    --------
    >>> from linumpy.bench import Row
    >>> Row("64^3", "read_volume (CPU)", "cpu", "read", 2.5, 0.43, 3, True).ok
    True
    """

    layout: str
    name: str
    kind: Kind
    op: str
    gbps: float = 0.0
    seconds: float = 0.0
    runs: int = 0
    matches: bool | None = None
    note: str = ""

    @property
    def ok(self) -> bool:
        """Measured, and (for reads) equal to the volume."""
        return self.runs > 0 and self.matches is not False


class Timer:
    """Times rows: ``warmup`` untimed runs, then up to ``repeats`` timed runs (medians).

    A row stops repeating once its timed runs took ``budget`` seconds (at least one timed run).
    ``sync`` is called before starting and stopping the clock (a device synchronisation on GPUs).
    Before each run of a write row, ``os.sync()`` flushes what earlier runs left dirty, untimed.
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
        note: str = "",
    ) -> Row:
        """Time ``run`` and record a row of ``nbytes / median time``.

        ``check`` is applied to the first run's result; ``before`` runs untimed before each run.
        """
        warmup = self.warmup if warmup is None else warmup
        row = Row(layout, name, kind, op, note=note)
        times: list[float] = []
        try:
            for i in range(warmup + self.repeats):
                if i > warmup and sum(times) > self.budget:
                    break
                if before is not None:
                    before()
                if op == "write" and hasattr(os, "sync"):
                    # no write pays for the dirty pages of the runs and rows before it
                    os.sync()
                self.sync()
                start = time.perf_counter()
                result = run()
                self.sync()
                elapsed = time.perf_counter() - start
                if check is not None and row.matches is None:
                    row.matches = bool(check(result))
                del result  # runs do not hold two results at once
                if i >= warmup:
                    times.append(elapsed)
        except Exception as exc:  # a failing path is a result too: record it and go on
            logger.debug("%s / %s failed", layout, name, exc_info=True)
            row.note = f"failed: {type(exc).__name__}: {exc}".splitlines()[0][:300]
            row.matches = None
        else:
            row.seconds = statistics.median(times)
            row.runs = len(times)
            row.gbps = nbytes / 1e9 / row.seconds if row.seconds > 0 else float("inf")
        self.rows.append(row)
        return row
