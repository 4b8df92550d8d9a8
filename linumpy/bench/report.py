"""The table and JSON of a benchmark run; each row judged against the same run's ceilings."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from linumpy.bench.run import BenchResult
from linumpy.bench.timing import Row

__all__ = ["CEILING_COLUMNS", "ceilings_of", "header", "summary_table", "write_json"]

#: Summary table columns: the ceilings the reads are judged against.
CEILING_COLUMNS = ("decode", "file read", "H2D copy")


def ceilings_of(row: Row) -> dict[str, str]:
    """The ceilings (column -> the ceiling row's ``op``) that ``row`` is judged against.

    CPU reads: numcodecs' N-thread decode and the file read; GPU reads: nvCOMP's one-call decode,
    the file read and the pinned host->device copy. Writes and ceilings: none.

    Examples
    --------
    >>> from linumpy.bench import Row, ceilings_of
    >>> ceilings_of(Row("64^3", "read_volume(gpu=True)", "gpu", "read"))
    {'decode': 'decode-gpu', 'file read': 'file-read', 'H2D copy': 'copy'}
    >>> ceilings_of(Row("64^3", "zarr CPU write", "cpu", "write"))
    {}
    """
    if row.kind == "ceiling" or row.op != "read":
        return {}
    if row.kind == "cpu":
        return {"decode": "decode-cpu", "file read": "file-read"}
    return {"decode": "decode-gpu", "file read": "file-read", "H2D copy": "copy"}


def fractions(rows: list[Row]) -> list[dict[str, float]]:
    """For each row, its fraction of each ceiling that judges it (column -> fraction)."""
    ceilings = {(r.layout, r.op): r for r in rows if r.kind == "ceiling" and r.runs}
    result = []
    for r in rows:
        shares = {}
        for column, op in ceilings_of(r).items():
            ceiling = ceilings.get((r.layout, op))
            if ceiling is not None and ceiling.gbps and r.runs:
                shares[column] = r.gbps / ceiling.gbps
        result.append(shares)
    return result


def header(result: BenchResult) -> list[str]:
    """The lines that say what was measured, on what.

    Examples
    --------
    >>> from linumpy.bench import BenchConfig, BenchResult
    >>> from linumpy.bench.report import header
    >>> result = BenchResult(BenchConfig(gpu=False), {"cpus": "2"}, (8, 8, 8), "uint16")
    >>> header(result)[0]
    'Volume (8, 8, 8) uint16 (0.0 MiB), zstd level 2.'
    """
    config = result.config
    nbytes = int(np.prod(result.shape)) * np.dtype(result.dtype).itemsize
    ratios = ", ".join(f"{k} {v}" for k, v in result.ratios.items())
    return [
        f"Volume {tuple(result.shape)} {result.dtype} ({nbytes / 2**20:.1f} MiB), zstd level "
        f"{config.zstd_level}." + (f" Compression ratio: {ratios}." if ratios else ""),
        f"Medians of up to {config.repeats} timed runs after {config.warmup} warm-up run(s), "
        "page cache warm. GB/s = 10^9 bytes of decompressed volume per second, ceilings too.",
        "Machine: " + "; ".join(f"{k} {v}" for k, v in result.machine.items()),
    ]


def summary_table(rows: list[Row]) -> str:
    """Per layout: each path's GB/s and its fraction of each relevant ceiling, then the ceilings.

    Examples
    --------
    >>> from linumpy.bench import Row, summary_table
    >>> rows = [
    ...     Row("8^3", "read_volume (CPU)", "cpu", "read", 2.0, 0.1, 3, True),
    ...     Row("8^3", "numcodecs, 2 threads", "ceiling", "decode-cpu", 4.0, 0.05, 3),
    ... ]
    >>> print(summary_table(rows))
    | layout | path | GB/s | x decode | x file read | x H2D copy | ok |
    | --- | --- | ---: | ---: | ---: | ---: | --- |
    | 8^3 | read_volume (CPU) | 2.00 | 0.50 |  |  | yes |
    | 8^3 | numcodecs, 2 threads | 4.00 |  |  |  |  |
    """
    shares = {id(r): f for r, f in zip(rows, fractions(rows), strict=True)}
    lines = [
        "| layout | path | GB/s | " + " | ".join(f"x {c}" for c in CEILING_COLUMNS) + " | ok |",
        "| --- | --- | ---: | " + " | ".join("---:" for _ in CEILING_COLUMNS) + " | --- |",
    ]
    for layout in dict.fromkeys(r.layout for r in rows):
        mine = [r for r in rows if r.layout == layout]
        for r in sorted(mine, key=lambda r: r.kind == "ceiling"):
            share = shares[id(r)]
            cells = [f"{share[c]:.2f}" if c in share else "" for c in CEILING_COLUMNS]
            name = r.name if r.runs else f"{r.name} ({r.note})"
            gbps = f"{r.gbps:.2f}" if r.runs else "-"
            ok = {None: "", True: "yes", False: "**MISMATCH**"}[r.matches]
            lines.append(f"| {layout} | {name} | {gbps} | " + " | ".join(cells) + f" | {ok} |")
    return "\n".join(lines)


def write_json(result: BenchResult, path: Path) -> None:
    """The run as JSON: machine, volume, settings and rows (each with its ``fractions``), as
    ``benchmarks/add_result.py`` takes it.

    Examples
    --------
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> from linumpy.bench import BenchConfig, BenchResult
    >>> from linumpy.bench.report import write_json
    >>> path = Path(tempfile.mkdtemp()) / "run.json"
    >>> write_json(BenchResult(BenchConfig(gpu=False), {}, (8, 8, 8), "uint16"), path)
    >>> json.loads(path.read_text())["volume"]["shape"]
    [8, 8, 8]
    """
    payload = {
        "benchmark": "linum-benchmark-io",
        "machine": result.machine,
        "volume": {"shape": list(result.shape), "dtype": result.dtype, "ratios": result.ratios},
        "settings": {k: str(v) for k, v in asdict(result.config).items()},
        "rows": [
            asdict(r) | {"fractions": f}
            for r, f in zip(result.rows, fractions(result.rows), strict=True)
        ],
    }
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
