"""The pipeline benchmark's table, JSON and chart (see :mod:`linumpy.bench.pipeline`)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from linumpy.bench.pipeline_records import COMMANDS, KERNELS_CACHED, CommandRun, PipelineResult
from linumpy.bench.provenance import run_info

__all__ = ["pipeline_chart", "pipeline_table", "run_info", "write_pipeline_json"]

# Short names of the phases in the table's phases column.
_SHORT = {
    "start-up and imports": "start-up",
    "CUDA context": "CUDA",
    "kernel compilation": "kernels",
    "final swap": "swap",
}


def _pairs(result: PipelineResult) -> list[tuple[CommandRun, CommandRun | None]]:
    """Each command's CPU run with its warm GPU run on the same mosaic (None without one)."""
    gpu = {(r.command, r.mosaic): r for r in result.runs if r.device == "gpu" and r.run == "warm"}
    return [(r, gpu.get((r.command, r.mosaic))) for r in result.runs if r.device == "cpu"]


def _seconds(run: CommandRun | None) -> str:
    if run is None:
        return "-"
    return f"{run.seconds:.2f}" if run.ok else "failed"


def _phases(cpu: CommandRun, gpu: CommandRun | None) -> str:
    names = list(cpu.phases) + [n for n in (gpu.phases if gpu else {}) if n not in cpu.phases]
    parts = []
    for name in names:
        a = cpu.phases.get(name)
        if gpu is None:
            parts.append(f"{_SHORT.get(name, name)} {a:.2f}")
            continue
        b = gpu.phases.get(name)
        text = f"{'-' if a is None else f'{a:.2f}'}/{'-' if b is None else f'{b:.2f}'}"
        parts.append(f"{_SHORT.get(name, name)} {text}")
    return ", ".join(parts)


def pipeline_table(result: PipelineResult) -> str:
    """The result as Markdown tables: the commands (CPU s, GPU s, speed-up, phases), the first
    GPU runs against the next, the read ceiling, and the outputs' CPU-GPU difference.

    Examples
    --------
    >>> from linumpy.bench.pipeline_records import CommandRun, PipelineConfig, PipelineResult
    >>> from linumpy.bench.pipeline_report import pipeline_table
    >>> result = PipelineResult(PipelineConfig(), {"date": "2026-12-01"})
    >>> result.runs = [
    ...     CommandRun("aip", "6x6", "cpu", "warm", 4.0, {"level 0": 3.0, "other": 1.0}),
    ...     CommandRun("aip", "6x6", "gpu", "warm", 1.0, {"level 0": 0.5, "other": 0.5}),
    ... ]
    >>> print(pipeline_table(result))  # doctest: +NORMALIZE_WHITESPACE
    | command | mosaic | CPU s | GPU s | speed-up | phases (CPU/GPU s) |
    | --- | --- | --- | --- | --- | --- |
    | linum-aip | 6x6 | 4.00 | 1.00 | 4.0x | level 0 3.00/0.50, other 1.00/0.50 |

    A GPU run that had to compile kernels (its first run failed) is not a warm run, and says so:

    >>> result.runs[1].counts = {"kernels added to the cache": 5}
    >>> print(pipeline_table(result).splitlines()[-1])  # doctest: +NORMALIZE_WHITESPACE
    | linum-aip | 6x6 | 4.00 | 1.00 | 4.0x (not warm: 5 kernels compiled) | level 0 3.00/0.50,
    other 1.00/0.50 |
    """
    lines = [
        "| command | mosaic | CPU s | GPU s | speed-up | phases (CPU/GPU s) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for cpu, gpu in _pairs(result):
        both = gpu is not None and cpu.ok and gpu.ok and gpu.seconds > 0
        speedup = f"{cpu.seconds / gpu.seconds:.1f}x" if both else "-"
        # a first run that failed left its kernels to this one
        if both and (compiled := gpu.counts.get(KERNELS_CACHED, 0)):
            speedup += f" (not warm: {compiled} kernels compiled)"
        lines.append(
            f"| {COMMANDS[cpu.command][0]} | {cpu.mosaic} | {_seconds(cpu)} | {_seconds(gpu)} | "
            f"{speedup} | {_phases(cpu, gpu)} |"
        )
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
    if result.reads:
        lines += [
            "",
            "| read_volume (in process) | mosaic | GB/s | s |",
            "| --- | --- | --- | --- |",
        ]
        for read in result.reads:
            shown = f"{read.gbps:.2f}" if not read.error else f"failed: {read.error}"
            lines.append(
                f"| {read.device.upper()} | {read.mosaic} | {shown} | {read.seconds:.2f} |"
            )
    for output in result.outputs:
        if "max_rel_difference" in output:
            lines.append(
                f"\nStitched {output['mosaic']}: largest |CPU - GPU| over planes 0-31 is "
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
        "runs": [asdict(r) for r in result.runs],
        "reads": [asdict(r) | {"gbps": round(r.gbps, 3)} for r in result.reads],
        "outputs": result.outputs,
    }
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")


def pipeline_chart(result: PipelineResult, path: Path) -> bool:
    """Bars of seconds, CPU and GPU, per command and mosaic, with the speed-ups; the title
    gives the date and the machine. False when matplotlib is not installed.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from linumpy.bench.pipeline_records import CommandRun, PipelineConfig, PipelineResult
    >>> from linumpy.bench.pipeline_report import pipeline_chart
    >>> result = PipelineResult(PipelineConfig(gpu=False), {"date": "2026-12-01"})
    >>> result.runs = [CommandRun("aip", "6x6", "cpu", "warm", 4.0)]
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

    pairs = _pairs(result)
    labels = [f"{COMMANDS[cpu.command][0]}\n{cpu.mosaic}" for cpu, _ in pairs]
    fig, ax = plt.subplots(figsize=(10, 0.75 * len(pairs) + 1.8))
    rows = range(len(pairs))
    cpu_s = [cpu.seconds if cpu.ok else 0.0 for cpu, _ in pairs]
    gpu_s = [gpu.seconds if gpu is not None and gpu.ok else 0.0 for _, gpu in pairs]
    ax.barh([i - 0.2 for i in rows], cpu_s, height=0.4, color="tab:blue", label="CPU")
    if any(gpu_s):
        ax.barh([i + 0.2 for i in rows], gpu_s, height=0.4, color="tab:green", label="--use-gpu")
    for i in rows:
        ax.text(cpu_s[i], i - 0.2, f" {cpu_s[i]:.2f} s", va="center", fontsize=7)
        if gpu_s[i]:
            speedup = f" ({cpu_s[i] / gpu_s[i]:.1f}x)" if cpu_s[i] else ""
            ax.text(gpu_s[i], i + 0.2, f" {gpu_s[i]:.2f} s{speedup}", va="center", fontsize=7)
    ax.set_yticks(list(rows), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds per command (separate processes, page cache warm)")
    ax.set_xlim(0, max(cpu_s + gpu_s + [1e-3]) * 1.3)
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
