"""Tables, JSON and chart of a benchmark run; each row judged against the same run's ceilings."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from linumpy.bench.rows import CHECKSUM_SUFFIX, CPU_CHECK_SUFFIX
from linumpy.bench.run import BenchResult
from linumpy.bench.timing import Row

__all__ = [
    "CEILING_COLUMNS",
    "bar_chart",
    "ceilings_of",
    "checksum_table",
    "details_table",
    "header",
    "summary_table",
    "write_json",
]

#: Summary table columns: the ceiling each kind of row is judged against.
CEILING_COLUMNS = ("decode", "file read", "H2D copy", "file write")


def ceilings_of(row: Row) -> dict[str, str]:
    """The ceilings (column -> the ceiling row's ``op``) that ``row`` is judged against.

    CPU reads: numcodecs' N-thread decode and the file read; GPU reads: nvCOMP's one-call decode,
    the file read and the pinned host->device copy; cold reads: the cold file read; writes: the
    file write.

    Examples
    --------
    >>> from linumpy.bench import Row, ceilings_of
    >>> ceilings_of(Row("64^3", "read_volume(gpu=True)", "gpu", "read"))
    {'decode': 'decode-gpu', 'file read': 'file-read', 'H2D copy': 'copy'}
    >>> ceilings_of(Row("64^3", "zarr CPU write", "cpu", "write"))
    {'file write': 'file-write'}
    """
    if row.kind == "ceiling":
        return {}
    if row.op == "write":
        return {"file write": "file-write"}
    read = "file-read-cold" if row.cold else "file-read"
    if row.kind == "cpu":
        return {"decode": "decode-cpu", "file read": read}
    return {"decode": "decode-gpu", "file read": read, "H2D copy": "copy"}


def fractions(rows: list[Row]) -> list[dict[str, float]]:
    """For each row, its fraction of each ceiling that judges it (column -> fraction).

    Examples
    --------
    >>> from linumpy.bench import Row
    >>> from linumpy.bench.report import fractions
    >>> fractions([
    ...     Row("8^3", "read_volume (CPU)", "cpu", "read", 2.0, 0.1, 3, True),
    ...     Row("8^3", "numcodecs, 2 threads", "ceiling", "decode-cpu", 4.0, 0.05, 3),
    ... ])
    [{'decode': 0.5}, {}]
    """
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


def _ok(row: Row) -> str:
    return {None: "", True: "yes", False: "**MISMATCH**"}[row.matches]


def _gbps(row: Row) -> str:
    return f"{row.gbps:.2f}" if row.runs else "-"


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
    lines = [
        f"Volume {tuple(result.shape)} {result.dtype} ({_mib(result)} MiB), zstd level "
        f"{config.zstd_level}."
        + (
            " Compression ratio: " + ", ".join(f"{k} {v}" for k, v in result.ratios.items()) + "."
            if result.ratios
            else ""
        ),
        f"Medians of up to {config.repeats} timed runs after {config.warmup} warm-up run(s) "
        f"(a row stops repeating after {config.budget:g} s); page cache warm unless marked cold. "
        "GB/s = 10^9 bytes of decompressed volume per second; ceilings too (their notes give "
        "GB/s of compressed bytes).",
        "Machine: " + "; ".join(f"{k} {v}" for k, v in result.machine.items()),
    ]
    return lines


def _mib(result: BenchResult) -> str:
    n = int(np.prod(result.shape)) * np.dtype(result.dtype).itemsize
    return f"{n / 2**20:.1f}"


def details_table(rows: list[Row]) -> str:
    """Every row with its runs, check and note, as a Markdown table.

    Examples
    --------
    >>> from linumpy.bench import Row, details_table
    >>> print(details_table([Row("8^3", "zarr CPU read", "cpu", "read", 1.5, 0.1, 3, True)]))
    | layout | path | kind | GB/s | runs | ok | notes |
    | --- | --- | --- | ---: | ---: | --- | --- |
    | 8^3 | zarr CPU read | cpu | 1.50 | 3 | yes |  |
    """
    lines = [
        "| layout | path | kind | GB/s | runs | ok | notes |",
        "| --- | --- | --- | ---: | ---: | --- | --- |",
    ]
    for r in rows:
        note = r.note.replace("|", "/")
        lines.append(
            f"| {r.layout} | {r.name} | {r.kind} | {_gbps(r)} | {r.runs} | {_ok(r)} | {note} |"
        )
    return "\n".join(lines)


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
    | layout | path | GB/s | x decode | x file read | x H2D copy | x file write | ok |
    | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |
    | 8^3 | read_volume (CPU) | 2.00 | 0.50 |  |  |  | yes |
    | 8^3 | numcodecs, 2 threads | 4.00 |  |  |  |  |  |
    """
    shares = {id(r): f for r, f in zip(rows, fractions(rows), strict=True)}
    lines = [
        "| layout | path | GB/s | " + " | ".join(f"x {c}" for c in CEILING_COLUMNS) + " | ok |",
        "| --- | --- | ---: | " + " | ".join("---:" for _ in CEILING_COLUMNS) + " | --- |",
    ]
    layouts = list(dict.fromkeys(r.layout for r in rows))
    for layout in layouts:
        mine = [r for r in rows if r.layout == layout]
        for r in sorted(mine, key=lambda r: r.kind == "ceiling"):
            share = shares[id(r)]
            cells = [f"{share[c]:.2f}" if c in share else "" for c in CEILING_COLUMNS]
            name = r.name if r.runs else f"{r.name} ({r.note})"
            lines.append(
                f"| {layout} | {name} | {_gbps(r)} | " + " | ".join(cells) + f" | {_ok(r)} |"
            )
    return "\n".join(lines)


def checksum_table(rows: list[Row]) -> str:
    """Per layout and path: GB/s without checksums, with linumpy's checksums, and their ratio.

    Pairs each row of a checksummed layout (``"..., checksums"``) with the same path on the
    same layout without checksums; a path that checks the crc32c on the CPU instead of the GPU
    (``"..., crc32c on the CPU"``) is paired with the path itself. Empty when the run measured
    no such pair (``--checksum both`` measures them).

    Examples
    --------
    >>> from linumpy.bench import Row
    >>> from linumpy.bench.report import checksum_table
    >>> print(checksum_table([
    ...     Row("8^3", "read_volume (CPU)", "cpu", "read", 2.0, 0.1, 3, True),
    ...     Row("8^3, checksums", "read_volume (CPU)", "cpu", "read", 1.9, 0.1, 3, True),
    ... ]))
    | layout | path | GB/s without | GB/s with checksums | ratio |
    | --- | --- | ---: | ---: | ---: |
    | 8^3 | read_volume (CPU) | 2.00 | 1.90 | 0.95 |
    """
    measured = {(r.layout, r.name): r for r in rows if r.runs and r.kind != "ceiling" and r.gbps}
    lines = [
        "| layout | path | GB/s without | GB/s with checksums | ratio |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for (layout, name), checked in measured.items():
        if not layout.endswith(CHECKSUM_SUFFIX):
            continue
        base = layout.removesuffix(CHECKSUM_SUFFIX)
        plain = measured.get((base, name.removesuffix(CPU_CHECK_SUFFIX)))
        if plain is None:
            continue
        ratio = checked.gbps / plain.gbps
        lines.append(f"| {base} | {name} | {plain.gbps:.2f} | {checked.gbps:.2f} | {ratio:.2f} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def reads_by_layout(rows: list[Row]) -> str:
    """One line per layout: the decode ceilings and each warm read, GB/s (fraction of decode).

    Examples
    --------
    >>> from linumpy.bench import Row
    >>> from linumpy.bench.report import reads_by_layout
    >>> rows = [
    ...     Row("8^3", "read_volume (CPU)", "cpu", "read", 2.0, 0.1, 3, True),
    ...     Row("8^3", "numcodecs, 2 threads", "ceiling", "decode-cpu", 4.0, 0.05, 3),
    ... ]
    >>> print(reads_by_layout(rows))
    | layout | numcodecs, 2 threads | read_volume (CPU) |
    | --- | ---: | ---: |
    | 8^3 | 4.00 | 2.00 (0.50) |
    """
    shown = [
        r for r in rows if (r.op == "read" and not r.cold) or r.op in ("decode-gpu", "decode-cpu")
    ]
    decode = {(r.layout, r.op): r for r in shown if r.kind == "ceiling" and r.runs}
    names = list(dict.fromkeys(r.name for r in sorted(shown, key=lambda r: r.kind != "ceiling")))
    layouts = list(dict.fromkeys(r.layout for r in shown))
    cells = {(r.layout, r.name): r for r in shown}
    lines = [
        "| layout | " + " | ".join(n.removeprefix("ceiling: ") for n in names) + " |",
        "| --- | " + " | ".join("---:" for _ in names) + " |",
    ]
    for layout in layouts:
        row_cells = []
        for name in names:
            r = cells.get((layout, name))
            if r is None or not r.runs:
                row_cells.append("-" if r is not None else "")
                continue
            ceiling = decode.get((layout, ceilings_of(r).get("decode", "")))
            share = f" ({r.gbps / ceiling.gbps:.2f})" if ceiling and ceiling.gbps else ""
            row_cells.append(f"{r.gbps:.2f}{share}")
        lines.append(f"| {layout} | " + " | ".join(row_cells) + " |")
    return "\n".join(lines)


def write_json(result: BenchResult, path: Path) -> None:
    """The run as JSON: machine, volume, settings and rows (each with its ``fractions``).

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
    path.write_text(json.dumps(payload, indent=2, default=str))


def bar_chart(rows: list[Row], path: Path, title: str) -> bool:
    """Horizontal bars of GB/s, one group per layout; False when matplotlib is not installed.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from linumpy.bench import Row, bar_chart
    >>> path = Path(tempfile.mkdtemp()) / "chart.png"
    >>> rows = [Row("8^3", "zarr CPU read", "cpu", "read", 1.5, 0.1, 3, True)]
    >>> bar_chart(rows, path, "demo") == path.exists()
    True
    """
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r.runs]
    colors = {"gpu": "tab:green", "cpu": "tab:blue", "ceiling": "tab:gray"}
    fig, ax = plt.subplots(figsize=(11, 0.32 * len(shown) + 1.5))
    ax.barh(range(len(shown)), [r.gbps for r in shown], color=[colors[r.kind] for r in shown])
    ax.set_yticks(range(len(shown)), [f"{r.layout} | {r.name}" for r in shown], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("GB/s of decompressed volume")
    ax.set_title(title, fontsize=9)
    for i, r in enumerate(shown):
        ax.text(r.gbps, i, f" {r.gbps:.1f}", va="center", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
