"""One benchmark run: the volume, each layout written, its ceilings and rows measured in turn."""

from __future__ import annotations

import datetime
import importlib.metadata
import platform
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import zarr

from linumpy.bench.ceilings import (
    cpu_decode_ceiling,
    file_read_ceiling,
    gpu_ceilings,
    host_buffer,
)
from linumpy.bench.files import BenchInputError, array_directory, stored_files
from linumpy.bench.rows import Layout, cpu_read_rows, gpu_read_rows, write_rows
from linumpy.bench.timing import Row, Timer
from linumpy.bench.volume import oct_volume
from linumpy.io import open_array, read_volume
from linumpy.settings import DEFAULT_ZSTD_LEVEL, available_cpus

__all__ = ["BenchConfig", "BenchResult", "gpu_reason", "machine_info", "run_benchmark"]

# 128^3 and 64^3 chunk files, and both in (128, 512, 512) shards.
_DEFAULT_LAYOUTS = (
    Layout.cubic(128, 3),
    Layout.cubic(64, 3),
    Layout.cubic(128, 3, shards=(128, 512, 512)),
    Layout.cubic(64, 3, shards=(128, 512, 512)),
)


@dataclass(frozen=True)
class BenchConfig:
    """What one benchmark run measures.

    Attributes
    ----------
    shape, dtype, zstd_level
        The generated volume and its compression, by default at the level linumpy writes at
        (ignored with ``input``).
    layouts
        The layouts to write the volume in and measure (ignored with ``input``).
    input
        Measure this zarr array or OME-Zarr image (its level 0) instead, in its own layout.
    gpu
        Run the GPU rows and ceilings too (needs a usable GPU).
    writes
        Time the writes (else the volume is written once, untimed).
    warmup, repeats, budget
        Untimed runs, at most this many timed runs, and the seconds after which a row stops
        repeating (see :class:`~linumpy.bench.timing.Timer`).
    workdir
        Where the volumes are written, each removed once measured (None: a temporary folder).

    Examples
    --------
    >>> from linumpy.bench import BenchConfig
    >>> config = BenchConfig(shape=(16, 32, 32), gpu=False)
    >>> [layout.name for layout in config.layouts]
    ['128^3', '64^3', 'sharded 128^3 in 128x512x512', 'sharded 64^3 in 128x512x512']
    """

    shape: tuple[int, ...] = (512, 1024, 1024)
    dtype: str = "uint16"
    zstd_level: int = DEFAULT_ZSTD_LEVEL
    layouts: tuple[Layout, ...] = _DEFAULT_LAYOUTS
    input: Path | None = None
    gpu: bool = True
    writes: bool = True
    warmup: int = 1
    repeats: int = 3
    budget: float = 4.0
    workdir: Path | None = None


@dataclass
class BenchResult:
    """The rows of one run, with the machine and the volume they were measured on.

    Examples
    --------
    >>> from linumpy.bench import BenchConfig, BenchResult
    >>> result = BenchResult(BenchConfig(gpu=False), {"cpus": "2"}, (8, 8, 8), "uint16")
    >>> result.rows, result.ratios
    ([], {})
    """

    config: BenchConfig
    machine: dict[str, str]
    shape: tuple[int, ...]
    dtype: str
    ratios: dict[str, float] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def machine_info(gpu: bool) -> dict[str, str]:
    """Date, command line, host, CPUs and library versions (and the GPU's, with ``gpu``) of
    this run.

    Examples
    --------
    >>> from linumpy.bench.run import machine_info
    >>> info = machine_info(False)
    >>> sorted(info)[:3], "zarr" in info
    (['command', 'cpus', 'dask'], True)
    """
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
        info["runtime"] = str(cupy.cuda.runtime.runtimeGetVersion())
        info["cupy"] = cupy.__version__
        for name in ("nvidia-nvcomp-cu13", "nvidia-nvcomp-cu12", "kvikio-cu13", "kvikio-cu12"):
            if (version := _version(name)) != "-":
                info[name] = version
    return info


def gpu_reason() -> str | None:
    """Why the GPU rows cannot run here, or None when a GPU is usable."""
    try:
        from linumpy.gpu.zarr_io import gpu_unavailable_reason
    except ImportError as exc:
        return f"linumpy's GPU support cannot be imported ({exc})"
    return gpu_unavailable_reason()


def _input_volume(config: BenchConfig) -> tuple[Path, np.ndarray, Layout]:
    """The input's level-0 array folder, its content and layout."""
    assert config.input is not None
    array = open_array(config.input, 0)
    path = array_directory(array)
    shards = array.shards
    name = f"input {config.input.name}"
    return path, read_volume(path), Layout(name, tuple(array.chunks), shards)


def _ceilings(timer: Timer, config: BenchConfig, layout: str, path: Path, nbytes: int) -> int:
    """Measure the layout's ceilings; return the stored bytes (0 when they could not run)."""
    threads = available_cpus()
    try:
        files = stored_files(zarr.open_array(path, mode="r"))
    except BenchInputError as exc:
        timer.skip(layout, "ceilings", "ceiling", "none", f"skipped: {exc}")
        return 0
    buffer = host_buffer(files.nbytes, pinned=config.gpu)
    read = file_read_ceiling(
        timer, layout, files, buffer, nbytes=nbytes, threads=threads, pinned=config.gpu
    )
    if read.runs:
        files = files.with_frames(buffer)
        cpu_decode_ceiling(timer, layout, files, buffer, threads=threads)
        if config.gpu:
            gpu_ceilings(timer, layout, files, buffer, nbytes=nbytes)
    return files.stored_bytes


def run_benchmark(
    config: BenchConfig, *, on_layout: Callable[[BenchResult], None] | None = None
) -> BenchResult:
    """Run the benchmark that ``config`` describes and return its rows.

    For each layout: the writes (which leave the array read next), the ceilings, the CPU reads,
    and, with ``config.gpu``, the GPU reads. A row that fails is recorded with its error and the
    run goes on. ``on_layout`` is called with the result so far after each layout (to save
    partial results, say).

    Raises
    ------
    LinumpyError
        When ``config.input`` is not a readable zarr array or OME-Zarr image.

    Examples
    --------
    >>> from linumpy.bench import BenchConfig, Layout, run_benchmark
    >>> config = BenchConfig(
    ...     shape=(16, 32, 32), layouts=(Layout.cubic(8, 3),), gpu=False, warmup=0, repeats=1
    ... )
    >>> result = run_benchmark(config)
    >>> all(row.ok for row in result.rows if row.runs), result.ratios["8^3"] > 1
    (True, True)
    """
    sync = None
    if config.gpu:
        import cupy

        sync = cupy.cuda.runtime.deviceSynchronize
    timer = Timer(warmup=config.warmup, repeats=config.repeats, budget=config.budget, sync=sync)
    # GPU rows measure repeated reads: staged as a process's after its first reads
    from linumpy.gpu.pinned_buffers import steady_staging

    if config.workdir is not None:
        config.workdir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=".linumpy-bench-", dir=config.workdir))
    try:
        with steady_staging():
            return _run(config, timer, workdir, on_layout)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run(
    config: BenchConfig,
    timer: Timer,
    workdir: Path,
    on_layout: Callable[[BenchResult], None] | None,
) -> BenchResult:
    if config.input is not None:
        path, volume, layout = _input_volume(config)
        plan = [(layout, path)]
        config = replace(config, writes=False)
    else:
        plan = [(layout, workdir / f"layout-{i}.zarr") for i, layout in enumerate(config.layouts)]
        volume = oct_volume(config.shape, config.dtype)
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
        if on_layout is not None:
            on_layout(result)
    return result
