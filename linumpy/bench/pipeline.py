"""The pipeline benchmark: the ``linum-*`` commands users run, on the CPU and with ``--use-gpu``,
beside the same run's ceiling for each mosaic.

Demo mosaic grids (``linum-make-demo-data``), named or made to a size, are written in linumpy's
default layout and with one chunk per tile (as other tools write mosaics);
``linum-estimate-transform``, ``linum-stitch-3d``, ``linum-aip`` and ``linum-mosaic-pipeline``
then run on each, every run a separate process (``python -m linumpy.scripts.X ... -v``: start-up,
imports and the CUDA context included), page cache warm. Each command's ``-v`` table gives its
phases; its start-up is reported apart from the rest of the job, whose GB/s of mosaic is the
steady state. The ceiling is ``linum-rechunk`` of the mosaic into the stitch's output dtype and
layout: one pass of read, decode, encode and durable write of the same bytes. The GPU runs use
their own kernel caches (cupy's ``CUPY_CACHE_DIR``, and linumpy's cubins under
``XDG_CACHE_HOME``), empty before a command's first GPU run: that run is what a fresh machine
pays and is reported apart; the next runs load the kernels it compiled.

:func:`run_pipeline_benchmark` runs it (what it runs and records:
:mod:`linumpy.bench.pipeline_records`); :mod:`linumpy.bench.pipeline_report` prints the table and
writes the JSON and the chart; ``linum-benchmark-pipeline`` is its command line.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from linumpy.bench.commands import (
    STACKS_GRACE_S,
    empty_folder,
    log_name,
    run_with_timeout,
    script_argv,
    timed,
)
from linumpy.bench.pipeline_records import (
    COMMANDS,
    DTYPE_COMMANDS,
    RECHUNK,
    CommandRun,
    MosaicSpec,
    PipelineConfig,
    PipelineResult,
)
from linumpy.errors import BenchInputError

# PipelineConfig and PipelineResult import from here too, with run_pipeline_benchmark (as the
# script and the notebook do); they are documented in pipeline_records.
__all__ = ["STACKS_GRACE_S", "run_pipeline_benchmark", "run_with_timeout"]

# how the benchmark runs a script (python -m linumpy.scripts.X, or the file of a checkout)
_script_argv = script_argv


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


def _layout_of(path: Path, level: int = 0) -> tuple[tuple[int, ...], tuple[int, ...] | None, str]:
    """Chunks, shards and dtype of an image's level (or of an array)."""
    from linumpy.io import open_array

    array = open_array(path, level)
    shards = tuple(array.shards) if array.shards else None
    return tuple(array.chunks), shards, str(array.dtype)


def _describe_layout(path: Path, tile: tuple[int, int, int]) -> tuple[str, dict[str, Any]]:
    chunks, shards, dtype = _layout_of(path)
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
        "dtype": dtype,
        "stored_bytes": stored,
    }


def _make_mosaic(
    spec: MosaicSpec, layout: str, path: Path, gpu: bool, timeout: float
) -> dict[str, Any]:
    """Write the mosaic with ``linum-make-demo-data`` (its command line, a process of its own)
    and its true tile layout beside it."""
    from linumpy.mosaic.demo import read_demo_truth

    argv = [*script_argv("linum_make_demo_data"), str(path), "-f"]
    argv += ["--grid", *map(str, spec.grid), "--tile-shape", *map(str, spec.tile)]
    # "tile": one chunk per tile and no shards, as other tools write mosaic grids
    argv += (["--no-shards"] if layout == "tile" else []) + (["--use-gpu"] if gpu else [])
    start = time.perf_counter()
    code, _, stderr = run_with_timeout(argv, None, timeout)
    if code != 0:
        last = (stderr.strip().splitlines() or ["failed"])[-1]
        raise BenchInputError(f"linum-make-demo-data {path} failed (exit {code}): {last}")
    made = round(time.perf_counter() - start, 2)
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
        "made_s": made,
    }


def _command_args(command: str, path: Path, out: Path, dtype: str) -> list[str]:
    truth = path.with_suffix(".truth.json")
    typed = ["--dtype", dtype] if dtype and command in DTYPE_COMMANDS else []
    if command == "estimate":
        return [str(path), str(out / "transform.json")]
    if command == "stitch":
        return [str(path), str(truth), str(out / "stitched.ome.zarr"), *typed]
    if command == "job":
        return [str(path), str(out / "job"), *typed]
    return [str(path), str(out / "aip.ome.zarr")]


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
    dtype: str = "",
    nbytes: int = 0,
) -> CommandRun:
    device = "gpu" if gpu else "cpu"
    empty_folder(out)
    argv = [*script_argv(COMMANDS[command][1]), *_command_args(command, path, out, dtype)]
    record = CommandRun(command, label, device, run, 0.0, dtype=dtype, nbytes=nbytes)
    log = log_name(logs, label, command, dtype or "default", device, run.replace(" ", "_"))
    timed(argv, record, env=env, log=log, timeout=timeout)
    stitched = out / "stitched.ome.zarr"
    if command == "stitch" and record.ok and stitched.exists():
        record.dtype = _layout_of(stitched)[2]  # the dtype the stitch wrote
    return record


def _prepared_runs(
    command: str,
    label: str,
    path: Path,
    out: Path,
    *,
    env: dict[str, str],
    logs: Path,
    timeout: float,
    nbytes: int,
) -> list[CommandRun]:
    """``linum-gpu-info --prepare-kernels`` into the empty cache of ``env``, then the command."""
    argv = [*script_argv("linum_gpu_info"), "--prepare-kernels"]
    start = time.perf_counter()
    code, stdout, stderr = run_with_timeout(argv, env, timeout)
    seconds = round(time.perf_counter() - start, 3)
    log_name(logs, label, command, "prepare").write_text(f"$ {' '.join(argv)}\n{stdout}\n{stderr}")
    error = "" if code == 0 else (stderr.strip().splitlines() or ["failed"])[-1][:300]
    prepare = CommandRun(command, label, "gpu", "prepare", seconds, returncode=code, error=error)
    run = _run_command(
        command, label, path, out, gpu=True, run="prepared", env=env, logs=logs, timeout=timeout,
        nbytes=nbytes,
    )  # fmt: skip
    return [prepare, run]


def _output_difference(cpu: Path, gpu: Path) -> tuple[float, int]:
    """Largest |CPU - GPU| of the first planes of two stitched images (at most 32, and at most
    256 MiB of float64 per image), over the CPU's max; and the planes compared."""
    from linumpy.io import open_array, read_volume

    shape = open_array(cpu, 0).shape
    planes = max(1, min(32, shape[0], 2**28 // (8 * shape[1] * shape[2])))
    slab = (slice(0, planes), slice(None), slice(None))
    a = read_volume(cpu, region=slab).astype(np.float64)
    b = read_volume(gpu, region=slab).astype(np.float64)
    return float(np.abs(a - b).max()) / (float(np.abs(a).max()) or 1.0), planes


def _typed_copy(path: Path, dtype: str, target: Path) -> Path:
    """Level 0 of ``path`` as a zarr array of ``dtype`` in the same layout (the ceiling's input
    for an output dtype other than the mosaic's), written a shard (or chunk) at a time."""
    import zarr

    from linumpy.io import open_array

    if target.exists():
        return target
    source = open_array(path, 0)
    block = tuple(source.shards or source.chunks)
    copy = zarr.create_array(
        str(target),
        shape=source.shape,
        dtype=dtype,
        chunks=source.chunks,
        shards=source.shards,
        compressors=zarr.codecs.ZstdCodec(level=2),
        fill_value=0,
    )
    for corner in np.ndindex(*(-(-n // b) for n, b in zip(source.shape, block, strict=True))):
        region = tuple(
            slice(i * b, min((i + 1) * b, n))
            for i, b, n in zip(corner, block, source.shape, strict=True)
        )
        copy[region] = np.asarray(source[region]).astype(dtype)
    return target


def _typed_name(path: Path, dtype: str) -> Path:
    return path.with_name(f"{path.name.split('.')[0]}-{dtype}.zarr")


def _ceiling(
    path: Path,
    label: str,
    data: Path,
    stitched: Path | None,
    dtype: str,
    *,
    gpu: bool,
    env: dict[str, str],
    logs: Path,
    timeout: float,
    nbytes: int,
) -> CommandRun:
    """``linum-rechunk`` of the mosaic (a copy in ``dtype`` when it holds another) into the
    stitched output's level-0 layout (rechunk's default without one)."""
    source = path
    if _layout_of(path)[2] != dtype:
        source = _typed_copy(path, dtype, _typed_name(path, dtype))
    out = data / f"out-rechunk-{'gpu' if gpu else 'cpu'}"
    empty_folder(out)
    argv = [*script_argv(RECHUNK[1]), str(source), str(out / "rechunked.ome.zarr")]
    if stitched is not None and stitched.exists():
        chunks, shards, _ = _layout_of(stitched)
        argv += ["--chunks", *map(str, chunks)]
        argv += ["--shards", *map(str, shards)] if shards else ["--no-shards"]
    record = CommandRun("rechunk", label, "gpu" if gpu else "cpu", "ceiling", 0.0, dtype=dtype)
    record.nbytes = nbytes
    log = log_name(logs, label, "rechunk", dtype, record.device)
    return timed(argv, record, env=env, log=log, timeout=timeout)


def _measure_mosaic(
    config: PipelineConfig,
    spec: MosaicSpec,
    path: Path,
    label: str,
    result: PipelineResult,
    *,
    devices: tuple[bool, ...],
    first_done: set[str],
    data: Path,
    cache: Path,
    logs: Path,
    log: Callable[[str], None],
) -> list[Path]:
    """Time the commands and the ceilings on one mosaic; return the folders it wrote."""
    outs: dict[tuple[str, bool], Path] = {}
    commands = [c for c in spec.commands if c in config.commands]
    mosaic_dtype = _layout_of(path)[2]
    for index, dtype in enumerate(config.dtypes or ("",)):
        for command in commands:
            if index and command not in DTYPE_COMMANDS:
                continue  # the other commands write no stitched image: timed once
            env = {
                **os.environ,
                "CUPY_CACHE_DIR": str(cache / command),
                "XDG_CACHE_HOME": str(cache / f"{command}-home"),
            }
            for on_gpu in devices:
                out = outs.setdefault((command, on_gpu), data / f"out-{command}-{on_gpu:d}")
                runs = run_labels(command, on_gpu, first_done)
                for run in runs:
                    done = _run_command(
                        command, label, path, out, gpu=on_gpu, run=run, env=env, logs=logs,
                        timeout=config.timeout, dtype=dtype, nbytes=spec.nbytes,
                    )  # fmt: skip
                    result.runs.append(done)
                    log(
                        f"  {COMMANDS[command][0]} {done.device} {dtype or ''} ({run}): "
                        f"{done.seconds:.2f} s" + ("" if done.ok else f" FAILED: {done.error}")
                    )
                if "first" in runs and config.prepare_kernels:
                    fresh = {
                        **env,
                        "CUPY_CACHE_DIR": str(cache / f"{command}-prepared"),
                        "XDG_CACHE_HOME": str(cache / f"{command}-prepared-home"),
                    }
                    result.runs += _prepared_runs(
                        command, label, path, out, env=fresh, logs=logs,
                        timeout=config.timeout, nbytes=spec.nbytes,
                    )  # fmt: skip
                    log(f"  {COMMANDS[command][0]} gpu (prepared): {result.runs[-1].seconds:.2f} s")
        stitched = {
            on_gpu: outs[key] / "stitched.ome.zarr"
            for on_gpu in devices
            if (key := ("stitch", on_gpu)) in outs
        }
        cpu, gpu = stitched.get(False), stitched.get(True)
        if cpu is not None and gpu is not None:
            try:
                difference, planes = _output_difference(cpu, gpu)
                result.outputs.append(
                    {"mosaic": label, "dtype": dtype, "max_rel_difference": difference}
                    | {"planes": planes}
                )
            except Exception as exc:  # a failed stitch has no output to compare
                result.outputs.append({"mosaic": label, "dtype": dtype, "error": str(exc)[:300]})
        if "job" in commands and not dtype:
            for run in result.runs:  # the job's stitched image has the stitch's default dtype
                if run.command == "job" and run.mosaic == label and not run.dtype:
                    run.dtype = next(
                        (
                            r.dtype
                            for r in result.runs
                            if r.command == "stitch" and r.mosaic == label
                        ),
                        "",
                    )
        if not config.ceiling:
            continue
        for on_gpu in devices:
            target = stitched.get(on_gpu)
            written = target is not None and target.exists()
            out_dtype = _layout_of(target)[2] if written else dtype or mosaic_dtype
            env = {**os.environ, "XDG_CACHE_HOME": str(cache / "rechunk-home")}
            done = _ceiling(
                path, label, data, target if written else None, out_dtype, gpu=on_gpu,
                env=env, logs=logs, timeout=config.timeout, nbytes=spec.nbytes,
            )  # fmt: skip
            result.runs.append(done)
            log(
                f"  ceiling: {RECHUNK[0]} {done.device} {out_dtype}: {done.seconds:.2f} s"
                + ("" if done.ok else f" FAILED: {done.error}")
            )
    copies = [_typed_name(path, dtype) for dtype in config.dtypes]
    return [*outs.values(), *data.glob("out-rechunk-*"), *copies]


def run_pipeline_benchmark(
    config: PipelineConfig,
    out_dir: Path,
    *,
    log: Callable[[str], None] = print,
    keep: bool = False,
    on_mosaic: Callable[[PipelineResult], None] | None = None,
) -> PipelineResult:
    """Make each mosaic, time the commands on it (CPU, then GPU), and their ceilings.

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
    ...                         commands=("aip",), ceiling=False)
    >>> result = run_pipeline_benchmark(config, Path(tempfile.mkdtemp()), log=lambda line: None)
    >>> [(run.command, run.device, run.ok, "level 0" in run.phases) for run in result.runs]
    [('aip', 'cpu', True, True)]
    """
    from linumpy.bench.run import machine_info

    reason = gpu_reason() if config.gpu else "not asked for (CPU only)"
    gpu = reason is None
    result = PipelineResult(config, machine_info(gpu), gpu_skipped=reason or "")
    if not gpu and config.gpu:
        log(f"GPU half skipped: no usable GPU ({reason})")
    data, logs, cache = out_dir / "data", out_dir / "logs", out_dir / "kernel_cache"
    for folder in (data, cache):
        shutil.rmtree(folder, ignore_errors=True)
    for folder in (data, logs, cache):
        folder.mkdir(parents=True, exist_ok=True)
    first_done: set[str] = set()
    devices = (False, True) if gpu else (False,)
    for spec in config.specs():
        for layout in config.layouts:
            path = data / f"{spec.key}-{layout}.ome.zarr"
            log(f"making {spec.label} ({spec.nbytes / 2**30:.2f} GiB), {layout} layout")
            mosaic = _make_mosaic(spec, layout, path, gpu, config.timeout)
            if any(
                m["key"] == spec.key and m["layout_name"] == mosaic["layout_name"]
                for m in result.mosaics
            ):
                log(f"  {layout} layout is the same as one measured: skipped")
                shutil.rmtree(path, ignore_errors=True)
                continue
            result.mosaics.append(mosaic)
            label = f"{spec.label}, {mosaic['layout_name']}"
            written = _measure_mosaic(
                config, spec, path, label, result, devices=devices, first_done=first_done,
                data=data, cache=cache, logs=logs, log=log,
            )  # fmt: skip
            if not keep:
                path.with_suffix(".truth.json").unlink(missing_ok=True)
                for item in [path, *written]:
                    shutil.rmtree(item, ignore_errors=True)
            if on_mosaic is not None:
                on_mosaic(result)
    return result
