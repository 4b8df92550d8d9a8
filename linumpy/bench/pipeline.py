"""The pipeline benchmark: the ``linum-*`` commands users run, on the CPU and with ``--use-gpu``,
beside the same run's ceiling for each mosaic.

Demo mosaic grids of a given size (``linum-make-demo-data``, linumpy's default layout) are made,
then ``linum-estimate-transform``, ``linum-stitch-3d``, ``linum-aip`` and
``linum-mosaic-pipeline`` run on each, every run a process of its own
(``python -m linumpy.scripts.X ... -f -v``: start-up, imports and the CUDA context included),
page cache warm. Each command's ``-v`` table gives its phases: its start-up is reported apart
from the rest of the job, whose GB/s of mosaic is the steady state. The ceiling is
``linum-rechunk`` of the mosaic into the stitch's output dtype and layout: one pass of read,
decode, encode and durable write of the same bytes. On the GPU each command runs twice per
mosaic; its kernel caches are empty before its very first run, what a fresh machine pays
(reported as ``first s``), and the second run is the one measured.

:mod:`linumpy.bench.pipeline_report` gives the results as a table and JSON. This module imports
no more than the standard library until a benchmark runs.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from linumpy.errors import BenchInputError

__all__ = [
    "COMMANDS",
    "TILES",
    "CommandRun",
    "MosaicSpec",
    "PipelineConfig",
    "PipelineResult",
    "gpu_reason",
    "mosaic_spec",
    "parse_size",
    "run_pipeline_benchmark",
]

#: The commands timed, by short name: (console command, script module).
COMMANDS = {
    "estimate": ("linum-estimate-transform", "linum_estimate_transform"),
    "stitch": ("linum-stitch-3d", "linum_stitch_3d"),
    "aip": ("linum-aip", "linum_aip"),
    # the estimate, the stitch and the projection of the stitched image in one process
    "job": ("linum-mosaic-pipeline", "linum_mosaic_pipeline"),
}
#: The ceiling's command: the mosaic rewritten in the stitch's output dtype and layout.
RECHUNK = ("linum-rechunk", "linum_rechunk")
#: The commands given ``--dtype`` (the stitch's output dtype).
DTYPE_COMMANDS = ("stitch", "job")
#: The phase of a command's ``-v`` table that is its start-up, reported apart.
STARTUP = "start-up and imports"
#: Tile shapes of the mosaics: thin OCT tiles, cubes, and deep cubes.
TILES = ((96, 512, 512), (256, 256, 256), (512, 256, 256))

_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_UNITS |= {"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_size(text: str) -> int:
    """Bytes of a size such as ``4gib``, ``512MiB``, ``2GB`` or ``1.5gib``.

    Raises
    ------
    ValueError
        When ``text`` is not a positive size.

    Examples
    --------
    >>> from linumpy.bench.pipeline import parse_size
    >>> parse_size("4gib"), parse_size("2GB"), parse_size("1.5MiB")
    (4294967296, 2000000000, 1572864)
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([kmgt]i?)?b?\s*", text.lower())
    if not match or float(match[1]) <= 0:
        raise ValueError(f"{text!r} is not a size such as 4gib, 512mib or 2gb")
    return int(float(match[1]) * _UNITS[match[2] or ""])


@dataclass(frozen=True)
class MosaicSpec:
    """A demo mosaic grid of the benchmark: ``grid`` tiles of ``tile`` voxels (uint16).

    Examples
    --------
    >>> from linumpy.bench.pipeline import MosaicSpec
    >>> spec = MosaicSpec("2gib", (8, 8), (256, 256, 256))
    >>> spec.nbytes == 2**31, spec.label
    (True, '8x8 of 256x256x256')
    """

    key: str
    grid: tuple[int, int]
    tile: tuple[int, int, int]

    @property
    def nbytes(self) -> int:
        """Bytes of the mosaic grid."""
        return math.prod(self.grid) * math.prod(self.tile) * 2

    @property
    def label(self) -> str:
        """``8x8 of 256x256x256``."""
        return f"{self.grid[0]}x{self.grid[1]} of {'x'.join(map(str, self.tile))}"


def mosaic_spec(size: str, tile: tuple[int, int, int] = TILES[2]) -> MosaicSpec:
    """A grid of ``tile`` tiles holding about ``size`` bytes (``4gib``).

    The grid is square or nearly (rows <= columns); its size is the nearest to the one asked
    of the grids with about the square root of the tile count as rows.

    Raises
    ------
    ValueError
        When ``size`` is not a size.

    Examples
    --------
    >>> from linumpy.bench.pipeline import mosaic_spec
    >>> mosaic_spec("4gib").label, mosaic_spec("4gib", (256, 256, 256)).label
    ('8x8 of 512x256x256', '10x13 of 256x256x256')
    >>> mosaic_spec("32gib", (96, 512, 512)).grid
    (26, 26)
    """
    count = parse_size(size) / (math.prod(tile) * 2)
    side = max(1, math.isqrt(round(count)))
    grids = [(rows, max(rows, round(count / rows))) for rows in (side, side - 1) if rows > 0]
    rows, cols = min(grids, key=lambda grid: abs(grid[0] * grid[1] - count))
    return MosaicSpec(size, (rows, cols), tile)


@dataclass(frozen=True)
class PipelineConfig:
    """What one pipeline benchmark run measures.

    Attributes
    ----------
    mosaics
        Sizes of the mosaics (``4gib``: a grid of ``tile`` tiles of about that size).
    tile
        The tile shape of the mosaics (one of :data:`TILES`, or any).
    dtypes
        Output dtypes of the stitch (``--dtype``), each a row of its own; empty: its default.
    gpu
        Run the GPU half (skipped, with the reason, when no GPU is usable).
    commands
        Keys of :data:`COMMANDS` to run.
    """

    mosaics: tuple[str, ...] = ("4gib",)
    tile: tuple[int, int, int] = TILES[2]
    dtypes: tuple[str, ...] = ()
    gpu: bool = True
    commands: tuple[str, ...] = tuple(COMMANDS)


@dataclass
class CommandRun:
    """One command run: its wall time (process start to exit) and its ``-v`` phases.

    ``run`` is ``"first"`` for a command's first GPU run on a mosaic, ``"ceiling"`` for the
    rechunk, else ``"warm"``. ``dtype`` is the output's dtype, ``nbytes`` the mosaic's bytes.

    Examples
    --------
    >>> from linumpy.bench.pipeline import CommandRun
    >>> run = CommandRun("stitch", "6x6", "cpu", "warm", 5.0, {"start-up and imports": 1.0,
    ...                  "level 0": 2.0}, nbytes=8 * 10**9)
    >>> run.ok, run.startup, run.gbps, run.level0_gbps
    (True, 1.0, 2.0, 4.0)
    """

    command: str
    mosaic: str
    device: str
    run: str
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)
    returncode: int = 0
    error: str = ""
    log: str = ""
    dtype: str = ""
    nbytes: int = 0

    @property
    def ok(self) -> bool:
        """Whether the command succeeded."""
        return self.returncode == 0

    @property
    def startup(self) -> float:
        """Seconds of start-up and imports (0 when the command did not report them)."""
        return float(self.phases.get(STARTUP, 0.0))

    @property
    def gbps(self) -> float:
        """10^9 bytes of mosaic per second of the job after its start-up (0 when it failed)."""
        steady = self.seconds - self.startup
        return self.nbytes / steady / 1e9 if self.ok and steady > 0 else 0.0

    @property
    def level0_gbps(self) -> float:
        """10^9 bytes of mosaic per second of level 0 (0 without that phase)."""
        seconds = self.phases.get("level 0", 0.0)
        return self.nbytes / seconds / 1e9 if self.ok and seconds > 0 else 0.0


@dataclass
class PipelineResult:
    """Every run of one benchmark, with the machine it ran on."""

    config: PipelineConfig
    machine: dict[str, str]
    gpu_skipped: str = ""
    runs: list[CommandRun] = field(default_factory=list)


def _script_argv(module: str) -> list[str]:
    """How to run a script: ``python -m linumpy.scripts.X`` (a process of its own)."""
    return [sys.executable, "-m", f"linumpy.scripts.{module}"]


def _timed(argv: list[str], run: CommandRun, env: dict[str, str], log: Path) -> CommandRun:
    """Run ``argv`` with ``-f -v``; fill ``run`` with its time, phases, status and log."""
    from linumpy.phases import parse_table

    argv = [*argv, "-f", "-v", *(["--use-gpu"] if run.device == "gpu" else [])]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    run.seconds = round(time.perf_counter() - start, 3)
    log.write_text(f"$ {' '.join(argv)}\n{done.stdout}\n{done.stderr}")
    table = parse_table(done.stderr)
    run.phases = dict(table.seconds) if table else {}
    run.returncode, run.log = done.returncode, str(log)
    if done.returncode != 0:
        run.error = (done.stderr.strip().splitlines() or ["failed"])[-1][:300]
    return run


def _layout_of(path: Path) -> tuple[tuple[int, ...], tuple[int, ...] | None, str]:
    """Chunks, shards and dtype of an image's level 0 (or of an array)."""
    from linumpy.io import open_array

    array = open_array(path, 0)
    return tuple(array.chunks), tuple(array.shards) if array.shards else None, str(array.dtype)


def _make_mosaic(spec: MosaicSpec, path: Path, gpu: bool) -> None:
    """Write the mosaic with ``linum-make-demo-data`` (a process of its own) and its true tile
    layout beside it (the stitch's input)."""
    from linumpy.mosaic.demo import read_demo_truth

    argv = [*_script_argv("linum_make_demo_data"), str(path), "-f"]
    argv += ["--grid", *map(str, spec.grid), "--tile-shape", *map(str, spec.tile)]
    done = subprocess.run(
        argv + (["--use-gpu"] if gpu else []), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["failed"])[-1]
        code = done.returncode
        raise BenchInputError(f"linum-make-demo-data {path} failed (exit {code}): {last}")
    read_demo_truth(path).save(path.with_suffix(".truth.json"))


def _command_args(command: str, path: Path, out: Path, dtype: str) -> list[str]:
    typed = ["--dtype", dtype] if dtype and command in DTYPE_COMMANDS else []
    if command == "estimate":
        return [str(path), str(out / "transform.json")]
    if command == "stitch":
        truth = path.with_suffix(".truth.json")
        return [str(path), str(truth), str(out / "stitched.ome.zarr"), *typed]
    if command == "job":
        return [str(path), str(out / "job"), *typed]
    return [str(path), str(out / "aip.ome.zarr")]


def _typed_copy(path: Path, dtype: str, target: Path) -> Path:
    """Level 0 of ``path`` as a zarr array of ``dtype`` in the same layout (the ceiling's input
    for an output dtype other than the mosaic's), written a shard (or chunk) at a time."""
    import numpy as np
    import zarr

    from linumpy.io import open_array

    if target.exists():
        return target
    source = open_array(path, 0)
    copy = zarr.create_array(
        str(target),
        shape=source.shape,
        dtype=dtype,
        chunks=source.chunks,
        shards=source.shards,
        compressors=zarr.codecs.ZstdCodec(level=2),
        fill_value=0,
    )
    block = tuple(source.shards or source.chunks)
    for corner in np.ndindex(*(-(-n // b) for n, b in zip(source.shape, block, strict=True))):
        region = tuple(slice(i * b, (i + 1) * b) for i, b in zip(corner, block, strict=True))
        copy[region] = np.asarray(source[region]).astype(dtype)
    return target


def _ceiling(spec: MosaicSpec, device: str, dtype: str, out_dir: Path) -> CommandRun:
    """``linum-rechunk`` of the mosaic into the dtype and level-0 layout of the image the stitch
    wrote on ``device`` (rechunk's default layout and ``dtype``, or the mosaic's, without one);
    for a dtype other than the mosaic's, of a copy of the mosaic in it, made untimed."""
    data = out_dir / "data"
    path, stitched = data / "mosaic.ome.zarr", data / f"out-stitch-{device}" / "stitched.ome.zarr"
    argv = []
    out_dtype = dtype or _layout_of(path)[2]
    if stitched.exists():
        chunks, shards, out_dtype = _layout_of(stitched)
        argv += ["--chunks", *map(str, chunks)]
        argv += ["--shards", *map(str, shards)] if shards else ["--no-shards"]
    source = path
    if _layout_of(path)[2] != out_dtype:
        source = _typed_copy(path, out_dtype, data / f"mosaic-{out_dtype}.zarr")
    target = data / f"rechunked-{device}.ome.zarr"
    argv = [*_script_argv(RECHUNK[1]), str(source), str(target), *argv]
    record = CommandRun(
        "rechunk", spec.label, device, "ceiling", 0.0, dtype=out_dtype, nbytes=spec.nbytes
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(out_dir / "kernel_cache" / "rechunk")}
    log = out_dir / "logs" / f"{spec.key}-rechunk-{out_dtype}-{device}.log"
    try:
        return _timed(argv, record, env, log)
    finally:
        shutil.rmtree(target, ignore_errors=True)


def gpu_reason() -> str | None:
    """Why the GPU half cannot run here, or None."""
    from linumpy.bench.run import gpu_reason as reason

    return reason()


def run_pipeline_benchmark(
    config: PipelineConfig,
    out_dir: Path,
    *,
    log: Callable[[str], None] = print,
    on_mosaic: Callable[[PipelineResult], None] | None = None,
) -> PipelineResult:
    """Make each mosaic, time the commands on it (CPU, then GPU), and their ceilings.

    Each command's output goes to ``out_dir/logs``; the mosaics and outputs are written in
    ``out_dir/data``, removed once measured, the GPU runs' kernel caches in
    ``out_dir/kernel_cache``, removed at the end. ``log`` is called with a line per run,
    ``on_mosaic`` with the result so far after each mosaic (to save partial results).

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from linumpy.bench.pipeline import PipelineConfig, run_pipeline_benchmark
    >>> config = PipelineConfig(mosaics=("1mib",), tile=(8, 32, 32), gpu=False,
    ...                         commands=("aip",))
    >>> result = run_pipeline_benchmark(config, Path(tempfile.mkdtemp()), log=lambda line: None)
    >>> [(run.command, run.run, run.ok, "level 0" in run.phases) for run in result.runs]
    [('aip', 'warm', True, True), ('rechunk', 'ceiling', True, True)]
    """
    from linumpy.bench.run import machine_info

    reason = gpu_reason() if config.gpu else "not asked for (CPU only)"
    result = PipelineResult(config, machine_info(reason is None), gpu_skipped=reason or "")
    if config.gpu and reason is not None:
        log(f"GPU half skipped: no usable GPU ({reason})")
    devices = ("cpu", "gpu") if reason is None else ("cpu",)
    data, cache = out_dir / "data", out_dir / "kernel_cache"
    shutil.rmtree(cache, ignore_errors=True)
    (out_dir / "logs").mkdir(parents=True, exist_ok=True)
    try:
        for size in config.mosaics:
            spec = mosaic_spec(size, config.tile)
            shutil.rmtree(data, ignore_errors=True)
            data.mkdir(parents=True)
            log(f"making {spec.label} ({spec.nbytes / 2**30:.2f} GiB)")
            _make_mosaic(spec, data / "mosaic.ome.zarr", reason is None)
            for index, dtype in enumerate(config.dtypes or ("",)):
                for command in (c for c in COMMANDS if c in config.commands):
                    if index == 0 or command in DTYPE_COMMANDS:  # the others: timed once
                        for device in devices:
                            runs = _command_runs(command, device, spec, dtype, out_dir)
                            result.runs += runs
                            log("\n".join(map(_line, runs)))
                for device in devices:
                    result.runs.append(_ceiling(spec, device, dtype, out_dir))
                    log(_line(result.runs[-1]))
            shutil.rmtree(data, ignore_errors=True)
            if on_mosaic is not None:
                on_mosaic(result)
    finally:
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
    return result


def _command_runs(
    command: str, device: str, spec: MosaicSpec, dtype: str, out_dir: Path
) -> list[CommandRun]:
    """Time ``command`` on the mosaic in ``out_dir/data``: on the GPU its first run, then the
    one measured. Its kernel caches are its own, empty before its first run of the benchmark."""
    cache = out_dir / "kernel_cache" / command
    env = {**os.environ, "CUPY_CACHE_DIR": str(cache / "cupy"), "XDG_CACHE_HOME": str(cache)}
    path = out_dir / "data" / "mosaic.ome.zarr"
    out = out_dir / "data" / f"out-{command}-{device}"
    runs = []
    for run in ("first", "warm") if device == "gpu" else ("warm",):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()  # every run writes a new output, as a first run does
        record = CommandRun(command, spec.label, device, run, 0.0, dtype=dtype, nbytes=spec.nbytes)
        argv = [*_script_argv(COMMANDS[command][1]), *_command_args(command, path, out, dtype)]
        log = out_dir / "logs" / f"{spec.key}-{command}-{dtype or 'default'}-{device}-{run}.log"
        _timed(argv, record, env, log)
        if command == "stitch" and record.ok:
            record.dtype = _layout_of(out / "stitched.ome.zarr")[2]  # the dtype it wrote
        runs.append(record)
    return runs


def _line(run: CommandRun) -> str:
    name = RECHUNK[0] if run.command == "rechunk" else COMMANDS[run.command][0]
    status = "" if run.ok else f" FAILED: {run.error}"
    what = " ".join(filter(None, [name, run.device, run.dtype, f"({run.run})"]))
    return f"  {what}: {run.seconds:.2f} s{status}"
