"""The pipeline benchmark's table, JSON and chart (see :mod:`linumpy.bench.pipeline`)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from linumpy.bench.pipeline_records import (
    COMMANDS,
    KERNELS_CACHED,
    RECHUNK,
    CommandRun,
    PipelineResult,
)

__all__ = ["pipeline_chart", "pipeline_rows", "pipeline_table", "write_pipeline_json"]

# Short names of the phases in the table's phases column.
_SHORT = {
    "start-up and imports": "start-up",
    "CUDA context": "CUDA",
    "kernel compilation": "kernels",
    "final swap": "swap",
}


def _seconds(run: CommandRun | None) -> str:
    if run is None:
        return "-"
    return f"{run.seconds:.2f}" if run.ok else "failed"


def _name(run: CommandRun) -> str:
    return f"{RECHUNK[0]} (ceiling)" if run.command == "rechunk" else COMMANDS[run.command][0]


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
    """One row per warm run and per ceiling: seconds, start-up apart, GB/s of mosaic through
    the job after its start-up and through level 0, and the fraction of the ceiling's GB/s.

    Examples
    --------
    >>> from linumpy.bench.pipeline_records import CommandRun, PipelineConfig, PipelineResult
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
        if run.run not in ("warm", "ceiling"):
            continue
        ceiling = _ceiling_of(result, run)
        share = run.gbps / ceiling.gbps if ceiling and ceiling.gbps and run.gbps else 0.0
        rows.append(
            {
                "command": _name(run),
                "mosaic": run.mosaic,
                "dtype": run.dtype or "-",
                "device": run.device,
                "s": round(run.seconds, 2) if run.ok else "failed",
                "start-up s": round(run.startup, 2) if run.phases else None,
                "GB/s": _gbps(run.gbps),
                "level 0 s": run.phases.get("level 0"),
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


def _phases(run: CommandRun) -> str:
    return ", ".join(f"{_SHORT.get(name, name)} {s:.2f}" for name, s in run.phases.items())


def pipeline_table(result: PipelineResult) -> str:
    """The result as Markdown tables: each command and ceiling (seconds, start-up, GB/s of
    mosaic through the job and through level 0, fraction of the ceiling, phases), the first GPU
    runs against the next, and the outputs' CPU-GPU difference.

    Examples
    --------
    >>> from linumpy.bench.pipeline_records import CommandRun, PipelineConfig, PipelineResult
    >>> from linumpy.bench.pipeline_report import pipeline_table
    >>> result = PipelineResult(PipelineConfig(), {"date": "2026-12-01"})
    >>> phases = {"start-up and imports": 1.0, "level 0": 2.0}
    >>> result.runs = [CommandRun("aip", "6x6", "cpu", "warm", 3.0, phases, nbytes=4 * 10**9)]
    >>> print(pipeline_table(result))  # doctest: +NORMALIZE_WHITESPACE
    | command | mosaic | dtype | device | s | start-up s | GB/s | level 0 s | level 0 GB/s |
    ceiling GB/s | x ceiling | phases (s) |
    | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |
    | linum-aip | 6x6 | - | cpu | 3.00 | 1.00 | 2.00 | 2.00 | 2.00 | - | - | start-up 1.00,
    level 0 2.00 |
    """
    reported = [run for run in result.runs if run.run in ("warm", "ceiling")]
    rows = pipeline_rows(result)
    header = list(rows[0]) if rows else ["command", "mosaic", "dtype", "device"]
    lines = [
        "| " + " | ".join([*header, "phases (s)"]) + " |",
        "| " + " | ".join(["---"] * 4 + ["---:"] * (len(header) - 4) + ["---"]) + " |",
    ]
    for row, run in zip(rows, reported, strict=True):
        cells = [_cell(key, value) for key, value in row.items()]
        lines.append("| " + " | ".join([*cells, _phases(run)]) + " |")
    firsts = [r for r in result.runs if r.run == "first"]
    if firsts:
        lines += [
            "",
            "| first GPU run (empty kernel cache) | mosaic | first s | next s | "
            "first / next | kernels compiled: first, next |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for first in firsts:
            warm = next(
                (
                    r
                    for r in result.runs
                    if r.run == "warm"
                    and r.device == "gpu"
                    and (r.command, r.mosaic) == (first.command, first.mosaic)
                ),
                None,
            )
            timed = first.ok and warm is not None and warm.ok and warm.seconds > 0
            ratio = f"{first.seconds / warm.seconds:.2f}" if timed else "-"
            prepared = next(
                (
                    r
                    for r in result.runs
                    if r.run == "prepared"
                    and (r.command, r.mosaic) == (first.command, first.mosaic)
                ),
                None,
            )
            if prepared is not None and warm and warm.seconds:
                ratio += f" (after --prepare-kernels: {prepared.seconds / warm.seconds:.2f})"
            compiled = [
                str(r.counts.get(KERNELS_CACHED, r.counts.get("kernel compilation", 0)))
                if r
                else "-"
                for r in (first, warm)
            ]
            lines.append(
                f"| {COMMANDS[first.command][0]} | {first.mosaic} | {_seconds(first)} | "
                f"{_seconds(warm)} | {ratio} | {', '.join(compiled)} |"
            )
    for output in result.outputs:
        if "max_rel_difference" in output:
            lines.append(
                f"\nStitched {output['mosaic']} {output.get('dtype') or ''}: largest |CPU - GPU| "
                f"over its first {output.get('planes', 32)} planes is "
                f"{output['max_rel_difference']:.2e} of the maximum."
            )
    if result.gpu_skipped:
        lines.append(f"\nGPU half skipped: {result.gpu_skipped}.")
    return "\n".join(lines)


def write_pipeline_json(result: PipelineResult, path: Path) -> None:
    """The run as JSON: date, machine, versions, commit, command line, settings, mosaics, runs.

    Examples
    --------
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> from linumpy.bench.pipeline_records import PipelineConfig, PipelineResult
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
        "mosaics": result.mosaics,
        "rows": pipeline_rows(result),
        "runs": [asdict(r) for r in result.runs],
        "outputs": result.outputs,
    }
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")


def pipeline_chart(result: PipelineResult, path: Path) -> bool:
    """Bars of GB/s of mosaic after start-up per command, mosaic, dtype and device, each beside
    its ceiling (``linum-rechunk``); the title gives the date and the machine. False when
    matplotlib is not installed.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from linumpy.bench.pipeline_records import CommandRun, PipelineConfig, PipelineResult
    >>> from linumpy.bench.pipeline_report import pipeline_chart
    >>> result = PipelineResult(PipelineConfig(gpu=False), {"date": "2026-12-01"})
    >>> result.runs = [CommandRun("aip", "6x6", "cpu", "warm", 4.0, nbytes=10**9)]
    >>> path = Path(tempfile.mkdtemp()) / "chart.png"
    >>> pipeline_chart(result, path) == path.exists()
    True
    """
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in pipeline_rows(result) if not row["command"].endswith("(ceiling)")]
    labels = [f"{r['command']} ({r['device']}, {r['dtype']})\n{r['mosaic']}" for r in rows]
    speeds = [float(r["GB/s"] or 0.0) for r in rows]
    ceilings = [float(r["ceiling GB/s"] or 0.0) for r in rows]
    fig, ax = plt.subplots(figsize=(10, 0.75 * len(rows) + 1.8))
    at = range(len(rows))
    ax.barh([i - 0.2 for i in at], speeds, height=0.4, color="tab:blue", label="command")
    ax.barh([i + 0.2 for i in at], ceilings, height=0.4, color="tab:gray", label="ceiling")
    for i in at:
        share = f" ({speeds[i] / ceilings[i]:.2f} of the ceiling)" if ceilings[i] else ""
        ax.text(speeds[i], i - 0.2, f" {speeds[i]:.2f}{share}", va="center", fontsize=7)
    ax.set_yticks(list(at), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("GB/s of mosaic after start-up (separate processes, page cache warm)")
    ax.set_xlim(0, max(speeds + ceilings + [1e-3]) * 1.4)
    machine = result.machine
    device = machine.get("device", "CPU only")
    ax.set_title(
        f"linum-* pipeline, {machine.get('date', '')}: {device}, {machine.get('cpus', '?')} CPUs",
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return True
