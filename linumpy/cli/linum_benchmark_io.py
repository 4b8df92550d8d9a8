"""Measure how fast zstd zarr volumes reach the GPU (and CPU memory), side by side in one run.

An OCT-like volume (speckle under depth attenuation below a wavy surface, a noise floor above it,
its top eighth zero so that those chunks are not stored) is generated, or taken with --input, and
written in each layout asked for (cubic chunks, and a sharded layout). For each layout, with
warm-up runs and repeats (medians; a row stops repeating once it has used --row-budget seconds),
in GB/s of decompressed volume (10^9 bytes per second):

GPU rows: linumpy's fast path (read_zarr_to_gpu, per file reader); gpu_zarr_context (nvCOMP codec
inside zarr); zarr.config.enable_gpu() alone; zarr's CPU read then cupy.asarray; tensorstore then
cupy.asarray (when installed); GPU write (nvCOMP encode). CPU rows: zarr's CPU read; linumpy's
read_volume; tensorstore (when installed); zarr's CPU write. Ceilings: pinned host->device copy,
nvCOMP decode of chunks already on the GPU, threaded read of the chunk files. With --cold, reads
after dropping the files from the page cache (posix_fadvise DONTNEED), marked as such.

Every read is checked against the volume. Results: a Markdown table (printed and written to
OUT_DIR/benchmark_io.md), OUT_DIR/benchmark_io.json and a bar chart OUT_DIR/benchmark_io.png.
Without a GPU, or with --cpu-only, only the CPU rows run; e.g. the CPU comparison on a 256 MiB
volume in 128^3 chunks: linum-benchmark-io OUT --size-mib 256 --chunks 128 --no-shard --cpu-only
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import logging
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import zarr
from tqdm import tqdm

from linumpy.io import read_volume
from linumpy.io.plan import plan_read
from linumpy.io.reader import default_threads

logger = logging.getLogger("linum_benchmark_io")

ENABLE_GPU = "zarr enable_gpu() (CPU decode, copy per chunk)"
ZARR_CPU = "zarr CPU read -> numpy"


@dataclass(frozen=True, slots=True)
class Layout:
    """How a volume is stored: chunk shape, and shard shape when sharded."""

    name: str
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None = None


@dataclass(slots=True)
class Row:
    """One measured path."""

    layout: str
    name: str
    kind: str  # "gpu", "cpu" or "ceiling"
    gbps: float
    seconds: float
    runs: int
    matches: bool | None = None  # the read equals the volume (None: not a read)
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out_dir", type=Path, help="folder for the table, JSON and chart")
    parser.add_argument("--input", type=Path, help="benchmark this zarr array instead")
    parser.add_argument(
        "--size-mib", type=int, default=1024, help="volume size (Z x 1024 x 1024) [%(default)s]"
    )
    parser.add_argument("--shape", type=int, nargs=3, metavar=("Z", "Y", "X"), help="volume shape")
    parser.add_argument("--dtype", default="uint16", help="volume dtype [%(default)s]")
    parser.add_argument(
        "--chunks", type=int, nargs="+", default=[128, 64], help="cubic chunk edges [128 64]"
    )
    parser.add_argument(
        "--shard",
        type=int,
        nargs=3,
        default=[128, 512, 512],
        metavar=("Z", "Y", "X"),
        help="shard shape of the sharded layout [128 512 512]",
    )
    parser.add_argument(
        "--shard-chunk", type=int, default=128, help="inner chunk edge of shards [%(default)s]"
    )
    parser.add_argument("--no-shard", action="store_true", help="skip the sharded layout")
    parser.add_argument("--level", type=int, default=3, help="zstd level [%(default)s]")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per row [%(default)s]")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per row [%(default)s]")
    parser.add_argument(
        "--row-budget",
        type=float,
        default=4.0,
        help="stop repeating a row after this many seconds (at least one run) [%(default)s]",
    )
    parser.add_argument("--cold", action="store_true", help="add cold page cache reads")
    parser.add_argument("--cpu-only", action="store_true", help="run the CPU rows only")
    parser.add_argument("--workdir", type=Path, help="where volumes are written [a temporary dir]")
    parser.add_argument("--keep", action="store_true", help="keep the written volumes")
    parser.add_argument("-f", action="store_true", dest="overwrite", help="overwrite OUT_DIR")
    parser.add_argument("-v", action="store_true", dest="verbose", help="log what linumpy does")
    return parser


# --- volume -------------------------------------------------------------------------------------


def oct_like_volume(shape: tuple[int, int, int], dtype: np.dtype, xp: ModuleType) -> Any:
    """An OCT-like volume generated slab by slab with ``xp`` (numpy or cupy), vectorised.

    Its zstd level 3 compression ratio (about 2.2) is that of the reference volume whose ceilings
    and baselines the Benchmarks page lists.
    """
    rng = xp.random.default_rng(1234)
    depth, height, width = shape
    y = xp.linspace(0.0, 7.0, height, dtype=xp.float32)[:, None]
    x = xp.linspace(0.0, 5.0, width, dtype=xp.float32)[None, :]
    surface = depth * (0.45 + 0.1 * xp.sin(y) * xp.cos(x) + 0.03 * xp.sin(3 * x + y))
    volume = xp.empty(shape, dtype=dtype)
    info = np.iinfo(dtype) if dtype.kind in "iu" else None
    step = max(1, (64 * 2**20) // max(1, height * width * 4))
    for z0 in range(0, depth, step):
        z = xp.arange(z0, min(depth, z0 + step), dtype=xp.float32)[:, None, None]
        below = z - surface[None]
        n = (len(z), height, width)
        speckle = rng.standard_exponential(n, dtype=xp.float32)
        floor = 100 + 2 * rng.standard_normal(n, dtype=xp.float32)
        tissue = 1200 * xp.exp(-xp.maximum(below, 0) / (0.12 * depth)) * speckle
        slab = floor + xp.where(below >= 0, tissue, 0)
        slab = xp.where(z < depth / 8, 0, slab)
        if info is not None:
            slab = xp.clip(xp.rint(slab), info.min, info.max)
        volume[z0 : z0 + len(z)] = slab.astype(dtype)
    return volume


def _layouts(args: argparse.Namespace, ndim: int) -> list[Layout]:
    layouts = [Layout(f"{c}^{ndim}", (c,) * ndim) for c in args.chunks]
    if not args.no_shard:
        inner = (args.shard_chunk,) * ndim
        name = f"sharded {'x'.join(map(str, args.shard))} of {args.shard_chunk}^{ndim}"
        layouts.append(Layout(name, inner, tuple(args.shard)))
    return layouts


def _stored_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and "zarr." not in p.name)


def drop_page_cache(path: Path) -> None:
    """Ask the kernel to drop ``path``'s files from the page cache (posix_fadvise DONTNEED)."""
    os.sync()
    for file in path.rglob("*"):
        if file.is_file():
            fd = os.open(file, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


# --- timing -------------------------------------------------------------------------------------


class Bench:
    """Runs and records rows for one volume."""

    def __init__(self, args: argparse.Namespace, nbytes: int, gpu: bool) -> None:
        self.args = args
        self.nbytes = nbytes
        self.gpu = gpu
        self.rows: list[Row] = []

    def sync(self) -> None:
        if self.gpu:
            import cupy

            cupy.cuda.runtime.deviceSynchronize()

    def measure(
        self,
        layout: str,
        name: str,
        kind: str,
        run: Callable[[], Any],
        *,
        check: Callable[[Any], bool] | None = None,
        before: Callable[[], None] | None = None,
        warmup: int | None = None,
        nbytes: int | None = None,
        note: str = "",
    ) -> Row | None:
        """Time ``run`` (warm-up, then repeats within the row budget); record a row."""
        warmup = self.args.warmup if warmup is None else warmup
        times: list[float] = []
        matches = None
        spent = 0.0
        try:
            for i in range(warmup + self.args.repeats):
                if i > warmup and spent > self.args.row_budget:
                    break
                if before is not None:
                    before()
                self.sync()
                start = time.perf_counter()
                result = run()
                self.sync()
                elapsed = time.perf_counter() - start
                if check is not None and matches is None:
                    matches = bool(check(result))
                del result
                if i >= warmup:
                    times.append(elapsed)
                    spent += elapsed
        except Exception as exc:  # a failing path is a result too: record it and go on
            logger.exception("%s / %s failed", layout, name)
            self.rows.append(Row(layout, name, kind, 0.0, 0.0, 0, None, f"failed: {exc}"))
            return None
        seconds = statistics.median(times)
        row = Row(
            layout,
            name,
            kind,
            (nbytes or self.nbytes) / 1e9 / seconds,
            seconds,
            len(times),
            matches,
            note,
        )
        self.rows.append(row)
        return row


# --- the rows -----------------------------------------------------------------------------------


def _zarr_read(path: Path) -> Any:
    return zarr.open_array(path, mode="r")[...]


def _tensorstore() -> ModuleType | None:
    try:
        import tensorstore
    except ImportError:
        return None
    return tensorstore


def _tensorstore_read(ts: ModuleType, path: Path) -> np.ndarray:
    driver = "zarr3" if (path / "zarr.json").exists() else "zarr"
    spec = {"driver": driver, "kvstore": {"driver": "file", "path": str(path)}}
    return ts.open(spec, read=True).result().read().result()


def _write(path: Path, volume: Any, layout: Layout, codec: Any) -> None:
    array = zarr.create_array(
        path,
        shape=volume.shape,
        chunks=layout.chunks,
        shards=layout.shards,
        dtype=volume.dtype,
        compressors=codec,
        fill_value=0,
        overwrite=True,
    )
    array[...] = volume


def cpu_rows(
    bench: Bench, layout: str, path: Path, host: np.ndarray, *, reads_only: bool = False
) -> None:
    """zarr's CPU read, linumpy's read_volume, tensorstore; threaded file read; cold reads."""

    def same(result: Any) -> bool:
        return np.array_equal(np.asarray(result), host)

    bench.measure(layout, ZARR_CPU, "cpu", lambda: _zarr_read(path), check=same)
    bench.measure(layout, "linumpy read_volume (CPU)", "cpu", lambda: read_volume(path), check=same)
    ts = _tensorstore()
    if ts is not None:
        bench.measure(
            layout,
            "tensorstore read -> numpy",
            "cpu",
            lambda: _tensorstore_read(ts, path),
            check=same,
        )
    if not bench.gpu:
        _file_read_ceiling(bench, layout, path, pinned=False)
    if bench.args.cold:
        drop = functools.partial(drop_page_cache, path)
        note = "cold cache (posix_fadvise DONTNEED)"
        for name, run in (
            (f"{ZARR_CPU}, cold", lambda: _zarr_read(path)),
            ("linumpy read_volume (CPU), cold", lambda: read_volume(path)),
        ):
            bench.measure(layout, name, "cpu", run, check=same, before=drop, warmup=0, note=note)


def gpu_rows(bench: Bench, layout: str, path: Path, device_volume: Any) -> None:
    """The GPU read paths, the fast path per file reader, and cold fast-path reads."""
    import cupy

    from linumpy.gpu._fetch import kvikio_unusable_reason
    from linumpy.gpu.zarr_io import (
        GpuReadSettings,
        gpu_zarr_context,
        last_read_report,
        read_zarr_to_gpu,
    )

    def same(result: Any) -> bool:
        return isinstance(result, cupy.ndarray) and bool(cupy.array_equal(result, device_volume))

    readers = ["pread"] + (["kvikio"] if kvikio_unusable_reason() is None else [])
    for reader in readers:
        settings = GpuReadSettings.from_env(fetch=reader)
        row = bench.measure(
            layout,
            f"linumpy fast path (read_zarr_to_gpu, {reader})",
            "gpu",
            lambda s=settings: read_zarr_to_gpu(path, settings=s),
            check=same,
        )
        report = last_read_report()
        if row is not None and report is not None:
            row.extra = asdict(report)
            phases = ", ".join(f"{k} {1e3 * v:.1f}" for k, v in report.phases.items())
            row.note = (
                f"{report.n_batches} batches, device memory beyond output "
                f"{report.device_extra_bytes / 2**20:.0f} MiB; last run, ms: {phases}"
            )

    def in_context() -> Any:
        with gpu_zarr_context():
            return _zarr_read(path)

    def enable_gpu() -> Any:
        with zarr.config.enable_gpu():
            return _zarr_read(path)

    bench.measure(layout, "gpu_zarr_context (nvCOMP codec in zarr)", "gpu", in_context, check=same)
    bench.measure(layout, ENABLE_GPU, "gpu", enable_gpu, check=same)
    bench.measure(
        layout,
        "zarr CPU read, then cupy.asarray",
        "gpu",
        lambda: cupy.asarray(_zarr_read(path)),
        check=same,
    )
    ts = _tensorstore()
    if ts is not None:
        bench.measure(
            layout,
            "tensorstore read, then cupy.asarray",
            "gpu",
            lambda: cupy.asarray(_tensorstore_read(ts, path)),
            check=same,
        )
    if bench.args.cold:
        settings = GpuReadSettings.from_env()
        bench.measure(
            layout,
            "linumpy fast path, cold",
            "gpu",
            lambda: read_zarr_to_gpu(path, settings=settings),
            check=same,
            before=functools.partial(drop_page_cache, path),
            warmup=0,
            note="cold cache (posix_fadvise DONTNEED)",
        )


def write_rows(
    bench: Bench, layout: Layout, path: Path, host: np.ndarray, device_volume: Any
) -> None:
    """zarr's CPU write (it also makes the volume read afterwards) and the GPU write."""
    cpu_codec = zarr.codecs.ZstdCodec(level=bench.args.level)
    bench.measure(
        layout.name,
        "zarr CPU write (libzstd encode)",
        "cpu",
        lambda: _write(path, host, layout, cpu_codec),
    )
    if device_volume is None:
        return
    from linumpy.gpu.nvcomp_zstd import NvcompZstdCodec
    from linumpy.gpu.zarr_io import gpu_zarr_context

    target = path.with_name(path.name + ".gpu-write")

    def gpu_write() -> None:
        with gpu_zarr_context():
            codec = NvcompZstdCodec(level=bench.args.level)
            _write(target, device_volume, layout, codec)

    row = bench.measure(
        layout.name, "GPU write (gpu_zarr_context, nvCOMP encode)", "gpu", gpu_write
    )
    if row is not None:
        row.matches = bool(np.array_equal(_zarr_read(target), host))
        row.note = "read back on the CPU"
    shutil.rmtree(target, ignore_errors=True)


# --- ceilings -----------------------------------------------------------------------------------


def _plan_files(path: Path) -> tuple[list[Any], np.ndarray, np.ndarray, int]:
    """The volume's stored chunks: reads, sizes, packed staging offsets and total bytes."""
    from linumpy.gpu._fetch import align_up, chunk_sizes

    reads = list(plan_read(zarr.open_array(path, mode="r")).reads)
    sizes = chunk_sizes(reads)
    reads = [r for r, s in zip(reads, sizes, strict=True) if s >= 0]
    sizes = sizes[sizes >= 0]
    offsets = np.concatenate([[0], np.cumsum([align_up(int(s)) for s in sizes])])
    return reads, sizes, offsets[:-1], int(offsets[-1])


def _file_read_ceiling(bench: Bench, layout: str, path: Path, *, pinned: bool) -> Any:
    """Read every stored chunk into one host buffer with the fast path's threaded reader."""
    from linumpy.gpu._fetch import read_into

    reads, sizes, offsets, total = _plan_files(path)
    total = max(total, 1)
    if pinned:
        import cupy

        staging = np.frombuffer(cupy.cuda.alloc_pinned_memory(total), np.uint8, total)
    else:
        staging = np.empty(total, np.uint8)
    threads = default_threads()
    with ThreadPoolExecutor(threads) as pool:
        row = bench.measure(
            layout,
            f"ceiling: {threads}-thread os.preadv of the chunk files into "
            + ("pinned memory" if pinned else "host memory"),
            "ceiling",
            lambda: read_into(
                staging, reads, sizes, offsets, reader="pread", pool=pool, threads=threads
            ),
        )
    if row is not None:
        row.note = f"{total / 1e9 / row.seconds:.1f} GB/s of compressed bytes"
    return reads, sizes, offsets, staging


def gpu_ceilings(bench: Bench, layout: str, path: Path) -> None:
    """Pinned host->device copy, threaded file read, nvCOMP decode of device-resident chunks."""
    import cupy
    from nvidia import nvcomp

    from linumpy.gpu.nvcomp_zstd import nvcomp_context

    reads, sizes, offsets, staging = _file_read_ceiling(bench, layout, path, pinned=True)
    total = staging.nbytes
    device = cupy.empty(total, dtype=np.uint8)
    bench.measure(
        layout,
        "ceiling: pinned host->device copy (the compressed chunks)",
        "ceiling",
        lambda: device.set(staging),
        nbytes=total,
        note="GB/s of copied bytes",
    )
    context = nvcomp_context()
    chunk_nbytes = plan_read(zarr.open_array(path, mode="r")).chunk_nbytes
    decoded = cupy.empty(len(reads) * chunk_nbytes, dtype=np.uint8)

    def decode(batch: int) -> Callable[[], None]:
        def run() -> None:
            with context.stream:
                for first in range(0, len(reads), batch):
                    n = min(batch, len(reads) - first)
                    context.codec.decode(
                        nvcomp.as_arrays(
                            device,
                            [int(o) for o in offsets[first : first + n]],
                            [int(s) for s in sizes[first : first + n]],
                            context.stream.ptr,
                        ),
                        out=nvcomp.as_arrays(
                            decoded[first * chunk_nbytes :],
                            [k * chunk_nbytes for k in range(n)],
                            [chunk_nbytes] * n,
                            context.stream.ptr,
                        ),
                    )
            context.stream.synchronize()

        return run

    free_before = cupy.cuda.runtime.memGetInfo()[0]
    decode(len(reads))()
    workspace = (free_before - cupy.cuda.runtime.memGetInfo()[0]) / 2**20
    for batch in sorted({len(reads), 256, 64, 16}):
        if batch > len(reads):
            continue
        bench.measure(
            layout,
            f"ceiling: nvCOMP decode, chunks on the GPU, batches of {batch}",
            "ceiling",
            decode(batch),
            nbytes=len(reads) * chunk_nbytes,
            note=f"{len(reads)} stored chunks; device memory held by nvCOMP after one "
            f"decode of all: {workspace:.0f} MiB",
        )


# --- output -------------------------------------------------------------------------------------


def markdown(rows: list[Row], header: list[str]) -> str:
    """The rows as a Markdown table, with ratios to enable_gpu() and zarr's CPU read."""
    lines = [*header, ""]
    lines.append("| layout | path | GB/s | x enable_gpu() | x zarr CPU | runs | ok | notes |")
    lines.append("| --- | --- | ---: | ---: | ---: | ---: | --- | --- |")
    baselines: dict[tuple[str, str], float] = {
        (r.layout, r.name): r.gbps for r in rows if r.name in (ENABLE_GPU, ZARR_CPU)
    }
    for r in rows:
        gpu_base = baselines.get((r.layout, ENABLE_GPU))
        cpu_base = baselines.get((r.layout, ZARR_CPU))
        ok = {None: "", True: "yes", False: "**MISMATCH**"}[r.matches]
        lines.append(
            f"| {r.layout} | {r.name} | {r.gbps:.2f} | "
            f"{f'{r.gbps / gpu_base:.1f}' if gpu_base and r.kind != 'ceiling' else ''} | "
            f"{f'{r.gbps / cpu_base:.1f}' if cpu_base and r.kind != 'ceiling' else ''} | "
            f"{r.runs} | {ok} | {r.note} |"
        )
    return "\n".join(lines) + "\n"


def bar_chart(rows: list[Row], path: Path, title: str) -> None:
    """Horizontal bars of GB/s, one group per layout (matplotlib is imported here)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r.runs]
    colors = {"gpu": "tab:green", "cpu": "tab:blue", "ceiling": "tab:gray"}
    fig, ax = plt.subplots(figsize=(11, 0.32 * len(shown) + 1.5))
    labels = [f"{r.layout} | {r.name}" for r in shown]
    ax.barh(range(len(shown)), [r.gbps for r in shown], color=[colors[r.kind] for r in shown])
    ax.set_yticks(range(len(shown)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("GB/s of decompressed volume (ceilings: see table)")
    ax.set_title(title, fontsize=9)
    for i, r in enumerate(shown):
        ax.text(r.gbps, i, f" {r.gbps:.1f}", va="center", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _machine(gpu: bool) -> dict[str, str]:
    info = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "host": platform.node(),
        "cpus": str(os.cpu_count()),
        "python": platform.python_version(),
        "zarr": zarr.__version__,
        "numpy": np.__version__,
    }
    if gpu:
        from linumpy.gpu.zarr_io import describe_gpu

        info |= describe_gpu()
    return info


@contextlib.contextmanager
def _workdir(args: argparse.Namespace) -> Iterator[Path]:
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        yield args.workdir
        return
    path = Path(tempfile.mkdtemp(prefix="volumes-", dir=args.out_dir))
    try:
        yield path
    finally:
        if not args.keep:
            shutil.rmtree(path, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = _build_arg_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    if args.out_dir.exists() and any(args.out_dir.iterdir()) and not args.overwrite:
        parser.error(f"{args.out_dir} exists and is not empty; use -f to overwrite")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    gpu = False
    if not args.cpu_only:
        from linumpy.gpu.zarr_io import gpu_unavailable_reason

        reason = gpu_unavailable_reason()
        gpu = reason is None
        if not gpu:
            print(f"no GPU ({reason}): running the CPU rows only", flush=True)
    machine = _machine(gpu)

    with _workdir(args) as workdir:
        if args.input is not None:
            source = zarr.open_array(args.input, mode="r")
            host = source[...]
            layouts = [Layout(f"input {args.input.name}", tuple(source.chunks), source.shards)]
        else:
            dtype = np.dtype(args.dtype)
            shape = tuple(args.shape) if args.shape else None
            if shape is None:
                depth = max(1, args.size_mib * 2**20 // (1024 * 1024 * dtype.itemsize))
                shape = (depth, 1024, 1024)
            host = None
            layouts = _layouts(args, len(shape))
        device_volume = None
        if gpu:
            import cupy

            if host is None:
                device_volume = oct_like_volume(shape, dtype, cupy)
                host = cupy.asnumpy(device_volume)
            else:
                device_volume = cupy.asarray(host)
        elif host is None:
            host = oct_like_volume(shape, dtype, np)
        bench = Bench(args, host.nbytes, gpu)
        ratios = {}
        for layout in tqdm(layouts, desc="layouts", disable=None):
            if args.input is None:
                path = workdir / f"{layout.name.replace(' ', '_').replace('^', 'c')}.zarr"
                write_rows(bench, layout, path, host, device_volume)
            else:
                path = args.input
            ratios[layout.name] = round(host.nbytes / _stored_bytes(path), 3)
            cpu_rows(bench, layout.name, path, host)
            if gpu:
                gpu_rows(bench, layout.name, path, device_volume)
                gpu_ceilings(bench, layout.name, path)

    header = [
        f"# I/O benchmark, {machine['date']}",
        "",
        f"Volume {host.shape} {host.dtype} ({host.nbytes / 2**20:.1f} MiB), zstd level "
        f"{args.level}; compression ratio per layout: "
        + ", ".join(f"{k} {v}" for k, v in ratios.items())
        + f". Medians of up to {args.repeats} runs after {args.warmup} warm-up run(s); page cache "
        "warm unless marked cold. GB/s = 10^9 bytes of decompressed volume per second.",
        "",
        "Machine: " + "; ".join(f"{k} {v}" for k, v in machine.items()),
    ]
    table = markdown(bench.rows, header)
    print(table, flush=True)
    (args.out_dir / "benchmark_io.md").write_text(table)
    payload = {
        "machine": machine,
        "volume": {"shape": list(host.shape), "dtype": str(host.dtype), "ratios": ratios},
        "settings": {k: str(v) for k, v in vars(args).items()},
        "rows": [asdict(r) for r in bench.rows],
    }
    (args.out_dir / "benchmark_io.json").write_text(json.dumps(payload, indent=2, default=str))
    title = f"{host.shape} {host.dtype}, zstd {args.level}, {machine.get('device', 'CPU only')}"
    bar_chart(bench.rows, args.out_dir / "benchmark_io.png", title[:150])


if __name__ == "__main__":
    main()
