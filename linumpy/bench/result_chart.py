"""The chart of a ``linum-benchmark-io`` result on the benchmarks page: grouped bars of the warm
reads, whose PNG metadata names the result file it was drawn from (with its SHA-256), so that a
stale chart can be told from a current one."""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

from linumpy.bench.files import BenchInputError
from linumpy.bench.result_files import BenchRecord

__all__ = ["CHART_KEY", "chart", "chart_name", "chart_stamp", "layout_label"]

#: PNG text key that names the result file a chart was drawn from.
CHART_KEY = "linumpy-benchmark-result"
# The warm reads the chart shows, by the start of their names, and their colours.
_CHARTED = {
    "read_volume(gpu=True)": "tab:green",
    "gpu_zarr_context": "tab:olive",
    "zarr enable_gpu()": "tab:cyan",
    "linumpy read_volume (CPU)": "tab:blue",
    "tensorstore read": "tab:purple",
    "zarr with the zarrs codec pipeline": "tab:pink",
    "zarr CPU read": "tab:gray",
}


def layout_label(layout: str) -> str:
    """A layout's name as the page and the chart show it (``64^3`` as ``64³``).

    Examples
    --------
    >>> from linumpy.bench.result_chart import layout_label
    >>> layout_label("sharded 64^3 in 128x512x512")
    'sharded 64³ in 128x512x512'
    """
    return layout.replace("^3", "³")


def _digest(source: str | Path) -> str:
    return hashlib.sha256(Path(source).read_bytes()).hexdigest()


def chart_name(record: BenchRecord) -> str:
    """The chart's file name under ``docs/images/``.

    Examples
    --------
    >>> from linumpy.bench.result_chart import chart_name
    >>> from linumpy.bench.result_files import BenchRecord
    >>> chart_name(BenchRecord("r.json", "2026-11-30", "One H200", {}, "c", "x", {}, ()))
    'benchmark-io-one-h200.png'
    """
    return f"benchmark-io-{record.slug}.png"


def chart_stamp(record: BenchRecord) -> str:
    """What a chart of ``record`` carries in its PNG metadata: the file and its SHA-256.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from linumpy.bench.result_chart import chart_stamp
    >>> from linumpy.bench.result_files import BenchRecord
    >>> source = Path(tempfile.mkdtemp()) / "r.json"
    >>> _ = source.write_text("{}")
    >>> chart_stamp(BenchRecord(str(source), "2026-11-30", "m", {}, "c", "x", {}, ()))[:20]
    'r.json sha256:44136f'
    """
    return f"{Path(record.source).name} sha256:{_digest(record.source)}"


def chart(record: BenchRecord, path: Path) -> None:
    """Grouped bars of the warm reads of ``record``, one group per layout, the run's date and
    machine in the title; the PNG's metadata carries :func:`chart_stamp`.

    Raises
    ------
    linumpy.errors.BenchInputError
        When matplotlib (the ``bench`` or ``docs`` extra) is not installed.

    Examples
    --------
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> from linumpy.bench.result_chart import chart
    >>> from linumpy.bench.result_files import BENCHMARK, load_records
    >>> folder = Path(tempfile.mkdtemp())
    >>> row = {"layout": "8^3", "name": "zarr CPU read", "kind": "cpu", "op": "read",
    ...        "gbps": 1.5, "runs": 3}
    >>> _ = (folder / "benchmark-io-2026-11-30-m.json").write_text(json.dumps({
    ...     "benchmark": BENCHMARK, "date": "2026-11-30", "machine": "m", "versions": {},
    ...     "commit": "c", "command": "linum-benchmark-io out", "volume": {}, "rows": [row]}))
    >>> chart(load_records(folder)[0], folder / "chart.png")
    >>> (folder / "chart.png").read_bytes()[:4]
    b'\\x89PNG'
    """
    try:
        import matplotlib
    except ImportError:
        raise BenchInputError("the chart needs matplotlib: pip install -e '.[bench]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layouts = list(dict.fromkeys(r.layout for r in record.rows))
    warm = [r for r in record.rows if r.op == "read" and not r.cold and r.kind != "ceiling"]
    series = []
    for prefix, color in _CHARTED.items():
        names = [r.name for r in warm if r.name.startswith(prefix)]
        if not names:
            continue
        label = min(names, key=len)  # the path itself, not a variant of it ("..., crc32c on")
        by_layout = {r.layout: r.gbps for r in warm if r.name == label and r.runs}
        if by_layout:
            series.append((label, color, [by_layout.get(layout, 0.0) for layout in layouts]))
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(10.0, 1.9 * len(layouts)), 5.0))
    for i, (label, color, values) in enumerate(series):
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(layouts))]
        bars = ax.bar(xs, values, width, label=label, color=color)
        ax.bar_label(bars, fmt="%.1f", fontsize=6, padding=1)
    # Long layout names ("sharded 64^3 in 128x512x512, checksums") wrap so that none overlap.
    labels = [textwrap.fill(layout_label(layout), 12) for layout in layouts]
    ax.set_xticks(range(len(layouts)), labels, fontsize=9)
    ax.set_ylabel("GB/s of decompressed volume")
    shape = "x".join(str(n) for n in record.volume.get("shape", ()))
    ax.set_title(
        f"linum-benchmark-io, warm reads, {record.date}\n{record.machine}; "
        f"{shape} {record.volume.get('dtype', '')}, commit {record.commit}",
        fontsize=10,
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.margins(y=0.12)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    # bbox_inches="tight" keeps the legend beside the axes and every label inside the image.
    fig.savefig(path, dpi=130, bbox_inches="tight", metadata={CHART_KEY: chart_stamp(record)})
    plt.close(fig)
