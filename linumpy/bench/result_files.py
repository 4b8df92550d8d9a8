"""Result files of ``linum-benchmark-io``: one dated run each, kept as JSON under
``benchmarks/results/``, made from a run's ``benchmark_io.json``, parsed and checked, loaded.

A result file records one run: its date, the machine, the versions, the commit and the command,
with the run's rows as ``linum-benchmark-io`` wrote them (``OUT_DIR/benchmark_io.json``).
"""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from linumpy.bench.files import BenchInputError
from linumpy.bench.timing import Row

__all__ = [
    "BENCHMARK",
    "RESULTS_GLOB",
    "BenchRecord",
    "current_records",
    "load_records",
    "parse_record",
    "record_from_run",
]

#: The benchmark whose results this module renders (the ``benchmark`` field of a result file).
BENCHMARK = "linum-benchmark-io"
#: Result files of :data:`BENCHMARK`, inside the results folder (other benchmarks keep theirs).
RESULTS_GLOB = "benchmark-io-*.json"

_REQUIRED = ("benchmark", "date", "machine", "versions", "commit", "command", "volume", "rows")
_ROW_FIELDS = {f.name for f in fields(Row)}


@dataclass(frozen=True)
class BenchRecord:
    """One dated result of ``linum-benchmark-io`` on one machine.

    Attributes
    ----------
    source
        The result file.
    date
        The day of the run, ``YYYY-MM-DD``.
    machine
        The machine, in words (``"nvidia-h200 (1x H200, 16 cores)"``).
    versions
        Python, numpy, zarr, numcodecs, cupy, nvCOMP, ... as the run reported them.
    commit
        The linumpy commit that ran.
    command
        The command line that reproduces the run.
    volume
        The volume's shape, dtype and compression ratio per layout.
    rows
        The run's rows.

    Examples
    --------
    >>> from linumpy.bench.result_files import parse_record
    >>> record = parse_record({
    ...     "benchmark": "linum-benchmark-io", "date": "2026-11-30", "machine": "laptop",
    ...     "versions": {"zarr": "3.4.2"}, "commit": "abc1234",
    ...     "command": "linum-benchmark-io out --cpu-only", "volume": {"shape": [8, 8, 8]},
    ...     "rows": [{"layout": "8^3", "name": "zarr CPU read", "kind": "cpu", "op": "read",
    ...               "gbps": 1.5, "runs": 3, "matches": True}],
    ... }, "example.json")
    >>> record.rows[0].gbps, record.slug
    (1.5, 'laptop')
    """

    source: str
    date: str
    machine: str
    versions: dict[str, str]
    commit: str
    command: str
    volume: dict[str, Any]
    rows: tuple[Row, ...]

    @property
    def slug(self) -> str:
        """The machine's name as a file name: lower case, words joined by ``-``."""
        return re.sub(r"[^a-z0-9]+", "-", self.machine.lower()).strip("-")


def parse_record(payload: Any, source: str | Path) -> BenchRecord:
    """A result file's content as a :class:`BenchRecord`.

    Raises
    ------
    linumpy.errors.BenchInputError
        When a field is missing or malformed; the message names the file and the field.

    Examples
    --------
    >>> from linumpy.bench.result_files import parse_record
    >>> parse_record({"benchmark": "linum-benchmark-io", "date": "2026-11-30"}, "r.json")
    Traceback (most recent call last):
        ...
    linumpy.errors.BenchInputError: r.json: missing machine, versions, commit, command, volume, rows
    """
    if not isinstance(payload, dict):
        raise BenchInputError(f"{source}: a result file holds a JSON object")
    missing = [key for key in _REQUIRED if key not in payload]
    if missing:
        raise BenchInputError(f"{source}: missing {', '.join(missing)}")
    if payload["benchmark"] != BENCHMARK:
        raise BenchInputError(f"{source}: benchmark {payload['benchmark']!r}, not {BENCHMARK!r}")
    try:
        datetime.date.fromisoformat(payload["date"])
    except (TypeError, ValueError):
        raise BenchInputError(f"{source}: date {payload['date']!r} is not YYYY-MM-DD") from None
    rows = []
    for index, row in enumerate(payload["rows"]):
        if not isinstance(row, dict) or not {"layout", "name", "kind", "op"} <= row.keys():
            raise BenchInputError(f"{source}: rows[{index}] lacks layout, name, kind or op")
        rows.append(Row(**{k: v for k, v in row.items() if k in _ROW_FIELDS}))
    return BenchRecord(
        source=str(source),
        date=payload["date"],
        machine=str(payload["machine"]),
        versions={str(k): str(v) for k, v in payload["versions"].items()},
        commit=str(payload["commit"]),
        command=str(payload["command"]),
        volume=dict(payload["volume"]),
        rows=tuple(rows),
    )


def load_records(folder: Path) -> list[BenchRecord]:
    """Every result file of :data:`BENCHMARK` in ``folder``, oldest first.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from linumpy.bench.result_files import load_records
    >>> load_records(Path(tempfile.mkdtemp()))
    []
    """
    records = []
    for path in sorted(folder.glob(RESULTS_GLOB)):
        try:
            payload = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise BenchInputError(f"{path}: not JSON ({exc})") from None
        records.append(parse_record(payload, path))
    return sorted(records, key=lambda r: (r.date, r.source))


def current_records(records: list[BenchRecord]) -> list[BenchRecord]:
    """The newest record of each machine, by machine name.

    Examples
    --------
    >>> from linumpy.bench.result_files import BenchRecord, current_records
    >>> old = BenchRecord("a.json", "2026-01-01", "m", {}, "a", "c", {}, ())
    >>> new = BenchRecord("b.json", "2026-02-01", "m", {}, "b", "c", {}, ())
    >>> [r.commit for r in current_records([old, new])]
    ['b']
    """
    newest: dict[str, BenchRecord] = {}
    for record in sorted(records, key=lambda r: (r.date, r.source)):
        newest[record.machine] = record
    return [newest[machine] for machine in sorted(newest)]


def record_from_run(
    run: dict[str, Any], *, machine: str, command: str, commit: str, date: str | None = None
) -> dict[str, Any]:
    """A result file's content from a run's ``benchmark_io.json`` (``linum-benchmark-io``).

    The date defaults to the run's own; the versions are the run's machine report less its date,
    host name and CPU count.

    Examples
    --------
    >>> from linumpy.bench.result_files import record_from_run
    >>> run = {"machine": {"date": "2026-11-30 22:56 UTC", "host": "vm", "zarr": "3.4.2"},
    ...        "volume": {"shape": [8, 8, 8]}, "rows": []}
    >>> record = record_from_run(run, machine="laptop", command="linum-benchmark-io out",
    ...                          commit="abc1234")
    >>> record["date"], record["versions"]
    ('2026-11-30', {'zarr': '3.4.2'})
    """
    info = dict(run.get("machine", {}))
    stamp = str(info.pop("date", ""))
    info.pop("host", None)
    info.pop("cpus", None)
    day = date or stamp[:10]
    return {
        "benchmark": BENCHMARK,
        "date": day,
        "machine": machine,
        "versions": info,
        "commit": commit,
        "command": command,
        "volume": run.get("volume", {}),
        "rows": run.get("rows", []),
    }
