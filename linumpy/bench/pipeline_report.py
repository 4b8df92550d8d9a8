"""The pipeline benchmark's table and JSON (see :mod:`linumpy.bench.pipeline`)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from linumpy.bench.pipeline import COMMANDS, RECHUNK, CommandRun, PipelineResult

__all__ = ["pipeline_rows", "pipeline_table", "write_pipeline_json"]


def _ceiling_of(result: PipelineResult, run: CommandRun) -> CommandRun | None:
    """The ceiling of ``run``: the rechunk of its mosaic on its device, in its dtype if any."""
    ceilings = [
        r
        for r in result.runs
        if r.run == "ceiling" and (r.mosaic, r.device) == (run.mosaic, run.device) and r.ok
    ]
    same = [r for r in ceilings if run.dtype and r.dtype == run.dtype]
    return (same or ceilings or [None])[0]


def _gbps(value: float) -> float | None:
    return float(f"{value:.4g}") if value > 0 else None  # 4 digits, however small


def pipeline_rows(result: PipelineResult) -> list[dict[str, object]]:
    """One row per measured run and per ceiling: seconds, the GPU's first run, start-up apart,
    GB/s of mosaic through the job after its start-up and through level 0, and the fraction of
    the ceiling's GB/s.

    Examples
    --------
    >>> from linumpy.bench.pipeline import CommandRun, PipelineConfig, PipelineResult
    >>> from linumpy.bench.pipeline_report import pipeline_rows
    >>> result = PipelineResult(PipelineConfig(), {})
    >>> phases = {"start-up and imports": 1.0, "level 0": 4.0}
    >>> same = {"dtype": "uint16", "nbytes": 8 * 10**9}
    >>> result.runs = [
    ...     CommandRun("stitch", "4gib", "cpu", "warm", 11.0, phases, **same),
    ...     CommandRun("rechunk", "4gib", "cpu", "ceiling", 5.0, phases, **same),
    ... ]
    >>> [(row["command"], row["GB/s"], row["x ceiling"]) for row in pipeline_rows(result)]
    [('linum-stitch-3d', 0.8, 0.4), ('linum-rechunk (ceiling)', 2.0, 1.0)]
    """
    rows = []
    for run in result.runs:
        if run.run == "first":
            continue
        ceiling = _ceiling_of(result, run)
        share = run.gbps / ceiling.gbps if ceiling and ceiling.gbps and run.gbps else 0.0
        first = next(
            (
                r
                for r in result.runs
                if r.run == "first"
                and (r.command, r.mosaic, r.device) == (run.command, run.mosaic, run.device)
                and r.dtype == run.dtype
            ),
            None,
        )
        name = f"{RECHUNK[0]} (ceiling)" if run.command == "rechunk" else COMMANDS[run.command][0]
        rows.append(
            {
                "command": name,
                "mosaic": run.mosaic,
                "dtype": run.dtype or "-",
                "device": run.device,
                "s": round(run.seconds, 2) if run.ok else "failed",
                "first s": (round(first.seconds, 2) if first.ok else "failed") if first else None,
                "start-up s": round(run.startup, 2) if run.phases else None,
                "GB/s": _gbps(run.gbps),
                "level 0 GB/s": _gbps(run.level0_gbps),
                "ceiling GB/s": _gbps(ceiling.gbps) if ceiling else None,
                "x ceiling": round(share, 2) if share else None,
            }
        )
    return rows


def _cell(key: str, value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):  # small GB/s (tiny mosaics) to 3 digits, the rest to 2 decimals
        return f"{value:.3g}" if key.endswith("GB/s") and value < 1 else f"{value:.2f}"
    return str(value)


def pipeline_table(result: PipelineResult) -> str:
    """The result as a Markdown table (:func:`pipeline_rows`), and why the GPU half was skipped.

    Examples
    --------
    >>> from linumpy.bench.pipeline import CommandRun, PipelineConfig, PipelineResult
    >>> from linumpy.bench.pipeline_report import pipeline_table
    >>> result = PipelineResult(PipelineConfig(), {"date": "2026-12-01"})
    >>> phases = {"start-up and imports": 1.0, "level 0": 2.0}
    >>> result.runs = [CommandRun("aip", "6x6", "cpu", "warm", 3.0, phases, nbytes=4 * 10**9)]
    >>> print(pipeline_table(result))  # doctest: +NORMALIZE_WHITESPACE
    | command | mosaic | dtype | device | s | first s | start-up s | GB/s | level 0 GB/s |
    ceiling GB/s | x ceiling |
    | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
    | linum-aip | 6x6 | - | cpu | 3.00 | - | 1.00 | 2.00 | 2.00 | - | - |
    """
    rows = pipeline_rows(result)
    header = list(rows[0]) if rows else ["command", "mosaic", "dtype", "device"]
    lines = [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join(["---"] * 4 + ["---:"] * (len(header) - 4)) + " |",
    ]
    for row in rows:
        lines.append("| " + " | ".join(_cell(key, value) for key, value in row.items()) + " |")
    if result.gpu_skipped:
        lines.append(f"\nGPU half skipped: {result.gpu_skipped}.")
    return "\n".join(lines)


def write_pipeline_json(result: PipelineResult, path: Path) -> None:
    """The run as JSON: machine, versions, command line, settings, rows and every run (with its
    phases), as ``benchmarks/add_result.py`` takes it.

    Examples
    --------
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> from linumpy.bench.pipeline import PipelineConfig, PipelineResult
    >>> from linumpy.bench.pipeline_report import write_pipeline_json
    >>> path = Path(tempfile.mkdtemp()) / "run.json"
    >>> write_pipeline_json(PipelineResult(PipelineConfig(gpu=False), {"date": "today"}), path)
    >>> json.loads(path.read_text())["machine"]
    {'date': 'today'}
    """
    payload = {
        "benchmark": "linum-benchmark-pipeline",
        "machine": result.machine,
        "settings": asdict(result.config),
        "gpu_skipped": result.gpu_skipped,
        "rows": pipeline_rows(result),
        "runs": [asdict(r) for r in result.runs],
    }
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
