"""The pipeline benchmark: the ``linum-*`` commands users run, on the CPU and with ``--use-gpu``.

Demo mosaic grids (:func:`linumpy.mosaic.demo.make_demo_data`) are written in linumpy's default
layout and with one chunk per tile (as other tools write mosaics); ``linum-estimate-transform``,
``linum-stitch-3d`` and ``linum-aip`` then run on each, every run a separate process
(``python -m linumpy.scripts.X ... -v``: start-up, imports and the CUDA context included), page
cache warm. Each command's ``-v`` table (:mod:`linumpy.phases`) gives its phases. The GPU runs
use their own kernel caches (cupy's ``CUPY_CACHE_DIR``, and linumpy's cubins under
``XDG_CACHE_HOME``), empty before a command's first GPU run: that run is what a fresh machine
pays and is reported apart; the next runs load the kernels it compiled. ``read_volume`` of each
mosaic, CPU and GPU, in this process, is the read ceiling.

:func:`run_pipeline_benchmark` runs it (what it runs and records:
:mod:`linumpy.bench.pipeline_records`); :mod:`linumpy.bench.pipeline_report` prints the table and
writes the JSON and the chart; ``linum-benchmark-pipeline`` is its command line.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from linumpy.bench.pipeline_records import (
    COMMANDS,
    KERNELS_CACHED,
    CommandRun,
    MosaicSpec,
    PipelineConfig,
    PipelineResult,
    ReadRun,
)

# PipelineConfig and PipelineResult import from here too, with run_pipeline_benchmark (as the
# script and the notebook do); they are documented in pipeline_records.
__all__ = ["STACKS_GRACE_S", "run_pipeline_benchmark", "run_with_timeout"]


def gpu_reason() -> str | None:
    """Why the GPU half cannot run here, or None."""
    try:
        from linumpy.gpu.zarr_io import gpu_unavailable_reason
    except ImportError as exc:
        return f"linumpy's GPU support cannot be imported ({exc})"
    return gpu_unavailable_reason()


def run_labels(command: str, on_gpu: bool, first_done: set[str]) -> list[str]:
    """The runs of ``command`` on a mosaic, in order; the last (``"warm"``) is the one reported.

    On the GPU, a command's first run (``"first"``, its kernel caches empty, reported apart) or,
    on every later mosaic, one that compiles the kernels its shapes need (``"mosaic first"``:
    cupy compiles some kernels per array shape) comes before it. ``first_done`` holds the
    commands that had their first run, and gains ``command``.

    Examples
    --------
    >>> from linumpy.bench.pipeline import run_labels
    >>> done = set()
    >>> run_labels("aip", True, done), run_labels("aip", True, done), run_labels("aip", False, done)
    (['first', 'warm'], ['mosaic first', 'warm'], ['warm'])
    """
    if not on_gpu:
        return ["warm"]
    if command in first_done:
        return ["mosaic first", "warm"]
    first_done.add(command)
    return ["first", "warm"]


def _describe_layout(path: Path, tile: tuple[int, int, int]) -> tuple[str, dict[str, Any]]:
    from linumpy.io import open_array

    array = open_array(path)
    chunks, shards = tuple(array.chunks), array.shards
    if shards is None and chunks == tile:
        name = "one chunk per tile"
    elif shards is None:
        name = f"{'x'.join(map(str, chunks))} chunks"
    else:
        name = f"{'x'.join(map(str, chunks))} in {'x'.join(map(str, shards))} shards"
    stored = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return name, {
        "chunks": list(chunks),
        "shards": list(shards) if shards else None,
        "stored_bytes": stored,
    }


def _make_mosaic(spec: MosaicSpec, layout: str, path: Path, gpu: bool) -> dict[str, Any]:
    from linumpy._numpy_or_cupy import gpu_module
    from linumpy.mosaic.demo import make_demo_data, read_demo_truth

    start = time.perf_counter()
    # "tile": one chunk per tile and no shards, as other tools write mosaic grids
    options = {"chunks": spec.tile, "shards": None} if layout == "tile" else {}
    make_demo_data(
        path,
        grid_shape=spec.grid,
        tile_shape=spec.tile,
        overwrite=True,
        xp=gpu_module(gpu),
        **options,
    )
    if gpu:  # the commands' processes get the device's memory
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()
    read_demo_truth(path).save(path.with_suffix(".truth.json"))
    name, stored = _describe_layout(path, spec.tile)
    return {
        "key": spec.key,
        "grid": list(spec.grid),
        "tile": list(spec.tile),
        "layout": layout,
        "layout_name": name,
        "nbytes": spec.nbytes,
        **stored,
        "made_s": round(time.perf_counter() - start, 2),
    }


def _read_ceiling(path: Path, label: str, nbytes: int, gpu: bool) -> ReadRun:
    from linumpy.io import read_volume

    device = "gpu" if gpu else "cpu"
    times = []
    # the ceiling: repeated reads, staged as a process's after its first reads (GPU reads only)
    from linumpy.gpu.pinned_buffers import steady_staging

    try:
        with steady_staging():
            for _ in range(3):  # one warm-up, then the best of two
                start = time.perf_counter()
                volume = read_volume(path, gpu=gpu)
                if gpu:
                    import cupy

                    cupy.cuda.runtime.deviceSynchronize()
                times.append(time.perf_counter() - start)
                del volume
                if gpu:
                    cupy.get_default_memory_pool().free_all_blocks()
    except Exception as exc:  # a failing read is a result too
        return ReadRun(label, device, 0.0, nbytes / 1e9, f"{type(exc).__name__}: {exc}"[:300])
    return ReadRun(label, device, min(times[1:]), nbytes / 1e9)


def _script_argv(module: str) -> list[str]:
    """How to run a script: ``python -m linumpy.scripts.X`` when installed, else its file."""
    try:
        if importlib.util.find_spec(f"linumpy.scripts.{module}") is not None:
            return [sys.executable, "-m", f"linumpy.scripts.{module}"]
    except ImportError:
        pass
    # a source checkout on PYTHONPATH, not installed: the scripts folder beside the package
    return [sys.executable, str(Path(__file__).resolve().parents[2] / "scripts" / f"{module}.py")]


def _command_args(command: str, path: Path, out: Path) -> list[str]:
    truth = path.with_suffix(".truth.json")
    if command == "estimate":
        return [str(path), str(out / "transform.json")]
    if command == "stitch":
        return [str(path), str(truth), str(out / "stitched.ome.zarr")]
    if command == "job":
        return [str(path), str(out / "job")]
    return [str(path), str(out / "aip.ome.zarr")]


def _files_in(folder: str | None) -> int:
    if not folder or not os.path.isdir(folder):
        return 0
    return sum(len(names) for _, _, names in os.walk(folder))


def _linumpy_kernels(env: dict[str, str]) -> str | None:
    """linumpy's cubin cache (:mod:`linumpy.gpu.kernel_cache`) under ``env``'s cache home."""
    home = env.get("XDG_CACHE_HOME")
    return os.path.join(home, "linumpy", "kernels") if home else None


#: Seconds a command past its timeout has to print its threads' stacks before it is killed.
STACKS_GRACE_S = 2.0


def run_with_timeout(
    argv: list[str], env: dict[str, str] | None, timeout: float
) -> tuple[int, str, str]:
    """Run ``argv``; return its exit status, stdout and stderr.

    Past ``timeout`` seconds the command is sent SIGUSR1 (``linum-*`` commands then print every
    thread's stack to stderr), given :data:`STACKS_GRACE_S` seconds, then killed: its status is
    -9 and its stderr ends with ``timed out after ... s``.

    Examples
    --------
    >>> import sys
    >>> run_with_timeout([sys.executable, "-c", "print('done')"], None, 60)
    (0, 'done\\n', '')
    """
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
            return process.returncode, stdout, stderr
        except subprocess.TimeoutExpired:
            if hasattr(signal, "SIGUSR1"):
                process.send_signal(signal.SIGUSR1)
            try:
                stdout, stderr = process.communicate(timeout=STACKS_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                stdout, stderr = process.communicate()
        return -9, stdout, f"{stderr}\ntimed out after {timeout:g} s"


def _run_command(
    command: str,
    label: str,
    path: Path,
    out: Path,
    *,
    gpu: bool,
    run: str,
    env: dict[str, str],
    logs: Path,
    timeout: float,
) -> CommandRun:
    from linumpy.phases import parse_table

    argv = [*_script_argv(COMMANDS[command][1]), *_command_args(command, path, out)]
    argv += ["-f", "-v", *(["--use-gpu"] if gpu else [])]
    device = "gpu" if gpu else "cpu"
    log = logs / f"{label.replace(' ', '_').replace(',', '')}-{command}-{device}-{run}.log"
    caches = [env.get("CUPY_CACHE_DIR"), _linumpy_kernels(env)]
    cached = sum(_files_in(cache) for cache in caches)
    # every run writes a new output, as a first run does: replacing one costs its removal
    # (0.5 s for a stitched mosaic), which only the runs after the first would pay
    for item in out.iterdir():
        shutil.rmtree(item) if item.is_dir() else item.unlink()
    start = time.perf_counter()
    code, stdout, stderr = run_with_timeout(argv, env, timeout)
    seconds = time.perf_counter() - start
    log.write_text(f"$ {' '.join(argv)}\n{stdout}\n{stderr}")
    table = parse_table(stderr)
    counts = dict(table.counts or {}) if table else {}
    if gpu and caches[0]:  # kernels the run added to the on-disk caches: what it compiled
        counts[KERNELS_CACHED] = sum(_files_in(cache) for cache in caches) - cached
    error = "" if code == 0 else (stderr.strip().splitlines() or ["failed"])[-1][:300]
    return CommandRun(
        command,
        label,
        device,
        run,
        round(seconds, 3),
        dict(table.seconds) if table else {},
        counts,
        code,
        error,
        str(log),
    )


def _prepared_runs(
    command: str,
    label: str,
    path: Path,
    out: Path,
    *,
    env: dict[str, str],
    logs: Path,
    timeout: float,
) -> list[CommandRun]:
    """``linum-gpu-info --prepare-kernels`` into the empty cache of ``env``, then the command."""
    argv = [*_script_argv("linum_gpu_info"), "--prepare-kernels"]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    seconds = time.perf_counter() - start
    (logs / f"{label.replace(' ', '_').replace(',', '')}-{command}-prepare.log").write_text(
        f"$ {' '.join(argv)}\n{done.stdout}\n{done.stderr}"
    )
    error = "" if done.returncode == 0 else (done.stderr.strip().splitlines() or ["failed"])[-1]
    prepare = CommandRun(
        command,
        label,
        "gpu",
        "prepare",
        round(seconds, 3),
        returncode=done.returncode,
        error=error[:300],
    )
    run = _run_command(
        command, label, path, out, gpu=True, run="prepared", env=env, logs=logs, timeout=timeout
    )
    return [prepare, run]


def _output_difference(cpu: Path, gpu: Path) -> float:
    """Largest |CPU - GPU| of the first 32 planes of two stitched images, over the CPU's max."""
    from linumpy.io import read_volume

    slab = (slice(0, 32), slice(None), slice(None))
    a, b = read_volume(cpu, region=slab), read_volume(gpu, region=slab)
    return float(np.abs(a - b).max()) / (float(np.abs(a).max()) or 1.0)


def run_pipeline_benchmark(
    config: PipelineConfig,
    out_dir: Path,
    *,
    log: Callable[[str], None] = print,
    keep: bool = False,
    on_mosaic: Callable[[PipelineResult], None] | None = None,
) -> PipelineResult:
    """Make each mosaic, time the commands on it (CPU, then GPU), and its reads.

    Logs of every command go to ``out_dir/logs``; the mosaics are written in ``out_dir/data``
    (removed once measured, unless ``keep``); the GPU runs' kernel cache is
    ``out_dir/kernel_cache``, emptied first. ``log`` is called with a line per step,
    ``on_mosaic`` with the result so far after each mosaic (to save partial results).

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from linumpy.bench.pipeline import PipelineConfig, run_pipeline_benchmark
    >>> config = PipelineConfig(mosaics=("6x6",), layouts=("tile",), scale=0.125, gpu=False,
    ...                         commands=("aip",), compile_sources=False)
    >>> result = run_pipeline_benchmark(config, Path(tempfile.mkdtemp()), log=lambda line: None)
    >>> [(run.command, run.device, run.ok, "level 0" in run.phases) for run in result.runs]
    [('aip', 'cpu', True, True)]
    """
    from linumpy.bench.provenance import run_info
    from linumpy.bench.run import machine_info

    reason = gpu_reason() if config.gpu else "not asked for (CPU only)"
    gpu = reason is None
    result = PipelineResult(config, {**machine_info(gpu), **run_info()}, gpu_skipped=reason or "")
    if not gpu and config.gpu:
        log(f"GPU half skipped: no usable GPU ({reason})")
    if config.compile_sources:
        start = time.perf_counter()
        from linumpy.bench.bytecode import compile_sources

        compile_sources()
        log(f"Python sources compiled to bytecode ({time.perf_counter() - start:.1f} s)")
    data, logs, cache = out_dir / "data", out_dir / "logs", out_dir / "kernel_cache"
    for folder in (data, cache):
        shutil.rmtree(folder, ignore_errors=True)
    for folder in (data, logs, cache):
        folder.mkdir(parents=True, exist_ok=True)
    first_done: set[str] = set()
    for spec in config.specs():
        for layout in config.layouts:
            path = data / f"{spec.key}-{layout}.ome.zarr"
            log(f"making {spec.label} ({spec.nbytes / 2**30:.2f} GiB), {layout} layout")
            mosaic = _make_mosaic(spec, layout, path, gpu)
            if any(
                m["key"] == spec.key and m["layout_name"] == mosaic["layout_name"]
                for m in result.mosaics
            ):
                log(f"  {layout} layout is the same as one measured: skipped")
                shutil.rmtree(path, ignore_errors=True)
                continue
            result.mosaics.append(mosaic)
            label = f"{spec.label}, {mosaic['layout_name']}"
            for on_gpu in (False, True) if gpu else (False,):
                result.reads.append(_read_ceiling(path, label, spec.nbytes, on_gpu))
            outs = {}
            for command in (c for c in spec.commands if c in config.commands):
                env = {
                    **os.environ,
                    "CUPY_CACHE_DIR": str(cache / command),
                    "XDG_CACHE_HOME": str(cache / f"{command}-home"),
                }
                for on_gpu in (False, True) if gpu else (False,):
                    out = data / f"out-{command}-{'gpu' if on_gpu else 'cpu'}"
                    out.mkdir(exist_ok=True)
                    outs[command, on_gpu] = out
                    runs = run_labels(command, on_gpu, first_done)
                    for run in runs:
                        done = _run_command(
                            command,
                            label,
                            path,
                            out,
                            gpu=on_gpu,
                            run=run,
                            env=env,
                            logs=logs,
                            timeout=config.timeout,
                        )
                        result.runs.append(done)
                        log(
                            f"  {COMMANDS[command][0]} {done.device} ({run}): {done.seconds:.2f} s"
                            + ("" if done.ok else f" FAILED: {done.error}")
                        )
                    if "first" in runs and config.prepare_kernels:
                        fresh = {
                            **env,
                            "CUPY_CACHE_DIR": str(cache / f"{command}-prepared"),
                            "XDG_CACHE_HOME": str(cache / f"{command}-prepared-home"),
                        }
                        result.runs += _prepared_runs(
                            command, label, path, out, env=fresh, logs=logs, timeout=config.timeout
                        )
                        log(
                            f"  {COMMANDS[command][0]} gpu (prepared): "
                            f"{result.runs[-1].seconds:.2f} s"
                        )
            if ("stitch", True) in outs:
                try:
                    difference = _output_difference(
                        outs["stitch", False] / "stitched.ome.zarr",
                        outs["stitch", True] / "stitched.ome.zarr",
                    )
                    result.outputs.append({"mosaic": label, "max_rel_difference": difference})
                except Exception as exc:  # a failed stitch has no output to compare
                    result.outputs.append({"mosaic": label, "error": str(exc)[:300]})
            if not keep:
                path.with_suffix(".truth.json").unlink(missing_ok=True)
                for item in [path, *outs.values()]:
                    shutil.rmtree(item, ignore_errors=True)
            if on_mosaic is not None:
                on_mosaic(result)
    return result
