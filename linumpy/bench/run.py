"""One ``linum-benchmark-io`` run: the volume, each layout written, its ceilings and rows."""

from __future__ import annotations

import math
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import zarr

from linumpy import settings
from linumpy.bench.ceilings import cpu_decode_ceiling, file_read_ceiling, gpu_ceilings
from linumpy.bench.files import array_directory, stored_files
from linumpy.bench.report import fractions, machine_info, write_json
from linumpy.bench.rows import Layout, cpu_read_rows, gpu_read_rows, write_rows
from linumpy.bench.timing import Row, Timer
from linumpy.bench.volume import oct_volume
from linumpy.errors import LinumpyError
from linumpy.io import open_array, read_volume
from linumpy.settings import available_cpus


@dataclass(frozen=True)
class BenchConfig:
    """What one run measures: a generated uint16 volume of ``shape`` written in each layout at
    linumpy's zstd level, or the array or image (level 0) ``input`` in its own layout; the GPU
    rows with ``gpu``; the writes with ``writes``; up to ``repeats`` timed runs per row; the
    volumes written in ``workdir`` (None: a temporary folder), each removed once measured."""

    shape: tuple[int, ...] = (512, 1024, 1024)
    layouts: tuple[Layout, ...] = ()
    input: Path | None = None
    gpu: bool = True
    writes: bool = True
    repeats: int = 3
    workdir: Path | None = None
    zstd_level: int = field(default_factory=lambda: settings.get().zstd_level)


@dataclass
class BenchResult:
    """The rows of one run, with the machine and the volume they were measured on."""

    config: BenchConfig
    machine: dict[str, str]
    shape: tuple[int, ...]
    dtype: str
    ratios: dict[str, float] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)


def _ceilings(timer: Timer, config: BenchConfig, layout: str, path: Path, nbytes: int) -> int:
    """Measure the layout's ceilings; return the stored bytes (0 when they could not run)."""
    threads = available_cpus()
    try:
        files = stored_files(zarr.open_array(path, mode="r"))
    except LinumpyError as exc:
        timer.skip(layout, "ceilings", "ceiling", "none", f"skipped: {exc}")
        return 0
    if config.gpu:  # page-locked: the host->device copy ceiling reads it
        from linumpy.gpu.pinned_buffers import pinned_empty

        buffer = pinned_empty(files.nbytes)
    else:
        buffer = np.empty(files.nbytes, np.uint8)
    read = file_read_ceiling(
        timer, layout, files, buffer, nbytes=nbytes, threads=threads, pinned=config.gpu
    )
    if read.runs:
        files = files.with_frames(buffer)
        cpu_decode_ceiling(timer, layout, files, buffer, threads=threads)
        if config.gpu:
            gpu_ceilings(timer, layout, files, buffer, nbytes=nbytes)
    return files.stored_bytes


def run_benchmark(config: BenchConfig) -> BenchResult:
    """Run the benchmark: for each layout the writes (which leave the array read next), the
    ceilings, the CPU reads and, with ``config.gpu``, the GPU reads. A row that fails is
    recorded with its error and the run goes on."""
    sync = None
    if config.gpu:
        import cupy

        sync = cupy.cuda.runtime.deviceSynchronize
    timer = Timer(repeats=config.repeats, sync=sync)
    # GPU rows measure repeated reads: staged as a process's after its first reads
    from linumpy.gpu.pinned_buffers import steady_staging

    if config.workdir is not None:
        config.workdir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=".linumpy-bench-", dir=config.workdir))
    try:
        with steady_staging():
            return _run(config, timer, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run(config: BenchConfig, timer: Timer, workdir: Path) -> BenchResult:
    if config.input is not None:  # its level 0, in its own layout
        array = open_array(config.input, 0)
        path = array_directory(array)
        layout = Layout(f"input {config.input.name}", tuple(array.chunks), array.shards)
        plan, volume = [(layout, path)], read_volume(path)
    else:
        plan = [(layout, workdir / f"layout-{i}.zarr") for i, layout in enumerate(config.layouts)]
        volume = oct_volume(config.shape)
    device_volume = None
    if config.gpu:
        import cupy

        device_volume = cupy.asarray(volume)
    result = BenchResult(config, machine_info(config.gpu), volume.shape, str(volume.dtype))
    result.rows = timer.rows  # the same list: rows show up as they are measured
    for layout, path in plan:
        if config.input is None:
            write_rows(
                timer,
                layout,
                path,
                volume,
                zstd_level=config.zstd_level,
                device_volume=device_volume,
                timed=config.writes,
            )
        stored = _ceilings(timer, config, layout.name, path, volume.nbytes)
        if stored:
            result.ratios[layout.name] = round(volume.nbytes / stored, 3)
        cpu_read_rows(timer, layout.name, path, volume)
        if device_volume is not None:
            gpu_read_rows(timer, layout.name, path, device_volume)
        if config.input is None:
            shutil.rmtree(path, ignore_errors=True)
    return result


def header(result: BenchResult) -> list[str]:
    """The lines that say what was measured, on what."""
    config = result.config
    nbytes = math.prod(result.shape) * np.dtype(result.dtype).itemsize
    ratios = ", ".join(f"{k} {v}" for k, v in result.ratios.items())
    return [
        f"Volume {tuple(result.shape)} {result.dtype} ({nbytes / 2**20:.1f} MiB), zstd level "
        f"{config.zstd_level}." + (f" Compression ratio: {ratios}." if ratios else ""),
        f"Medians of up to {config.repeats} timed runs after a warm-up run, page cache warm. "
        "GB/s = 10^9 bytes of decompressed volume per second, ceilings too.",
        "Machine: " + "; ".join(f"{k} {v}" for k, v in result.machine.items()),
    ]


def write_result(result: BenchResult, path: Path) -> None:
    """The run as JSON: machine, volume, settings and rows (each with its ``fractions``)."""
    write_json(
        path,
        "linum-benchmark-io",
        result.machine,
        volume={"shape": list(result.shape), "dtype": result.dtype, "ratios": result.ratios},
        settings={k: str(v) for k, v in asdict(result.config).items()},
        rows=[
            asdict(r) | {"fractions": f}
            for r, f in zip(result.rows, fractions(result.rows), strict=True)
        ],
    )
