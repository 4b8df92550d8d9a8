"""The benchmarks' tables and JSON, and the machine they ran on; each ``linum-benchmark-io`` row
is judged against the same run's ceilings."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

from linumpy.bench.timing import Row
from linumpy.settings import available_cpus

#: The ceilings (summary table column: the ceiling row's ``op``) that judge each kind of read.
CEILINGS = {
    "cpu": {"decode": "decode-cpu", "file read": "file-read"},
    "gpu": {"decode": "decode-gpu", "file read": "file-read", "H2D copy": "copy"},
}


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def machine_info(gpu: bool) -> dict[str, str]:
    """Date, command line, host, CPUs and library versions (and the GPU's, with ``gpu``)."""
    from linumpy import __version__

    program = Path(sys.argv[0]).stem.replace("_", "-")  # linum-benchmark-io, run with -m too
    info = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": shlex.join([program, *sys.argv[1:]]),
        "host": platform.node(),
        "cpus": str(available_cpus()),
        "python": platform.python_version(),
        "linumpy": __version__,
    }
    for name in ("numpy", "zarr", "numcodecs", "tensorstore", "zarrs", "dask", "scipy"):
        info[name] = _version(name)
    if gpu:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
        info["device"] = props["name"].decode()
        info["driver"] = str(cupy.cuda.runtime.driverGetVersion())
        info["cupy"] = cupy.__version__
        for name in ("nvidia-nvcomp-cu13", "nvidia-nvcomp-cu12", "kvikio-cu13", "kvikio-cu12"):
            if (version := _version(name)) != "-":
                info[name] = version
    return info


def markdown_table(header: list[str], rows: list[list[str]], left: int) -> str:
    """A Markdown table, its first ``left`` columns aligned left and the others right."""
    align = ["---"] * left + ["---:"] * (len(header) - left)
    lines = [header, align, *rows]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def write_json(path: Path, benchmark: str, machine: dict[str, str], **fields: Any) -> None:
    """A run's JSON, as ``benchmarks/add_result.py`` takes it: the benchmark, the machine, then
    ``fields``."""
    payload = {"benchmark": benchmark, "machine": machine, **fields}
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")


def fractions(rows: list[Row]) -> list[dict[str, float]]:
    """For each row, its fraction of each ceiling that judges it (column -> fraction)."""
    ceilings = {(r.layout, r.op): r for r in rows if r.kind == "ceiling" and r.runs}
    result = []
    for r in rows:
        shares = {}
        for column, op in (CEILINGS.get(r.kind, {}) if r.op == "read" else {}).items():
            ceiling = ceilings.get((r.layout, op))
            if ceiling is not None and ceiling.gbps and r.runs:
                shares[column] = r.gbps / ceiling.gbps
        result.append(shares)
    return result


def summary_table(rows: list[Row]) -> str:
    """Per layout: each path's GB/s and its fraction of each ceiling that judges it, then the
    ceilings."""
    shares = {id(r): f for r, f in zip(rows, fractions(rows), strict=True)}
    lines = []
    for layout in dict.fromkeys(r.layout for r in rows):
        mine = [r for r in rows if r.layout == layout]
        for r in sorted(mine, key=lambda r: r.kind == "ceiling"):
            share = shares[id(r)]
            cells = [f"{share[c]:.2f}" if c in share else "" for c in CEILINGS["gpu"]]
            name = r.name if r.runs else f"{r.name} ({r.note})"
            gbps = f"{r.gbps:.2f}" if r.runs else "-"
            ok = {None: "", True: "yes", False: "**MISMATCH**"}[r.matches]
            lines.append([layout, name, gbps, *cells, ok])
    columns = ["layout", "path", "GB/s", *(f"x {c}" for c in CEILINGS["gpu"]), "ok"]
    return markdown_table(columns, lines, 2)
