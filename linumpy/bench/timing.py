"""Timing of benchmark rows: warm-up runs, repeats within a time budget, medians."""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

#: Seconds of timed runs after which a row stops repeating.
BUDGET = 4.0


@dataclass(slots=True)
class Row:
    """One measured row: ``kind`` is "cpu", "gpu" or "ceiling"; ``op`` is "read", "write" or
    the ceiling's name; ``gbps`` is 10^9 bytes of decompressed volume per second (0 when it
    failed or was skipped); ``matches`` whether the read equals the volume (None: not checked);
    ``note`` why it failed or was skipped, or what else it measured."""

    layout: str
    name: str
    kind: str
    op: str
    gbps: float = 0.0
    seconds: float = 0.0
    runs: int = 0
    matches: bool | None = None
    note: str = ""


class Timer:
    """Times rows: a warm-up run, then up to ``repeats`` timed runs, the median kept.

    A row stops repeating once its timed runs took :data:`BUDGET` seconds. ``sync`` runs before
    starting and stopping the clock (a device synchronisation on GPUs). A row that raises is
    recorded with its error as the note, and the benchmark goes on.
    """

    def __init__(self, *, repeats: int = 3, sync: Callable[[], None] | None = None) -> None:
        self.repeats = repeats
        self.sync = sync or (lambda: None)
        self.rows: list[Row] = []

    def skip(self, layout: str, name: str, kind: str, op: str, note: str) -> Row:
        """Record a row that could not run here, with the reason."""
        row = Row(layout, name, kind, op, note=note)
        self.rows.append(row)
        return row

    def measure(
        self,
        layout: str,
        name: str,
        kind: str,
        op: str,
        run: Callable[[], Any],
        *,
        nbytes: int,
        check: Callable[[Any], bool] | None = None,
        before: Callable[[], None] | None = None,
        warmup: int = 1,
        note: str = "",
    ) -> Row:
        """Time ``run`` and record a row of ``nbytes / median time``; ``check`` judges the first
        run's result, ``before`` runs untimed before each run."""
        row = Row(layout, name, kind, op, note=note)
        times: list[float] = []
        try:
            for i in range(warmup + self.repeats):
                if i > warmup and sum(times) > BUDGET:
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
