"""The pipeline benchmark: the ``linum-*`` commands users run, on the CPU and with ``--use-gpu``,
beside the same run's ceiling for each mosaic.

Each command runs on demo mosaics (``linum-make-demo-data``) as a process of its own
(``python -m linumpy.scripts.X ... -f -v``), page cache warm; its ``-v`` table gives its start-up
apart from the rest of the job, whose GB/s of mosaic is the steady state. On the GPU each command
runs once untimed first (its kernels compiled into the caches). The ceiling is ``linum-rechunk``
of the mosaic into the stitch's output layout: one pass of read, decode, encode and durable write
of the same bytes.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from linumpy.bench.report import machine_info, markdown_table, write_json
from linumpy.errors import LinumpyError
from linumpy.parallel import parse_size
from linumpy.phases import STARTUP, parse_table

#: The commands timed, by short name: (console command, script module).
COMMANDS = {
    "estimate": ("linum-estimate-transform", "linum_estimate_transform"),
    "stitch": ("linum-stitch-3d", "linum_stitch_3d"),
    "aip": ("linum-aip", "linum_aip"),
    # the estimate, the stitch and the projection of the stitched image in one process
    "job": ("linum-mosaic-pipeline", "linum_mosaic_pipeline"),
}
#: The ceiling's command: the mosaic rewritten in the stitch's output layout.
RECHUNK = ("linum-rechunk", "linum_rechunk")


@dataclass(frozen=True)
class MosaicSpec:
    """A demo mosaic grid of the benchmark: ``grid`` tiles of ``tile`` voxels (uint16)."""

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


def mosaic_spec(size: str, tile: tuple[int, int, int]) -> MosaicSpec:
    """A grid of ``tile`` tiles holding about ``size`` bytes (``4gib``), square or nearly (rows
    <= columns): of the grids with about the square root of the tile count as rows, the one
    nearest in size."""
    count = parse_size(size) / (math.prod(tile) * 2)
    side = max(1, math.isqrt(round(count)))
    grids = [(rows, max(rows, round(count / rows))) for rows in (side, side - 1) if rows > 0]
    rows, cols = min(grids, key=lambda grid: abs(grid[0] * grid[1] - count))
    return MosaicSpec(size, (rows, cols), tile)


@dataclass(frozen=True)
class PipelineConfig:
    """What one run measures: mosaics of about these sizes (``4gib``) in ``tile`` tiles, the
    GPU half with ``gpu`` (skipped, with the reason, without a usable GPU), and the
    :data:`COMMANDS` named."""

    mosaics: tuple[str, ...] = ("4gib",)
    tile: tuple[int, int, int] = (512, 256, 256)
    gpu: bool = True
    commands: tuple[str, ...] = tuple(COMMANDS)


@dataclass
class CommandRun:
    """One command run (``rechunk``: the ceiling): its wall time, process start to exit, its
    ``-v`` phases, and the bytes of its mosaic."""

    command: str
    mosaic: str
    device: str
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    returncode: int = 0
    error: str = ""
    log: str = ""
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


def _timed(argv: list[str], run: CommandRun, log: Path) -> CommandRun:
    """Run ``argv`` with ``-f -v``; fill ``run`` with its time, phases, status and log."""
    argv = [*argv, "-f", "-v", *(["--use-gpu"] if run.device == "gpu" else [])]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    run.seconds = round(time.perf_counter() - start, 3)
    log.write_text(f"$ {' '.join(argv)}\n{done.stdout}\n{done.stderr}")
    table = parse_table(done.stderr)
    run.phases = dict(table.seconds) if table else {}
    run.returncode, run.log = done.returncode, str(log)
    if done.returncode != 0:
        run.error = (done.stderr.strip().splitlines() or ["failed"])[-1][:300]
    return run


def _make_mosaic(spec: MosaicSpec, path: Path) -> None:
    """Write the mosaic with ``linum-make-demo-data`` (a process of its own) and its true tile
    layout beside it (the stitch's input)."""
    from linumpy.mosaic.demo import read_demo_truth

    argv = [*_script_argv("linum_make_demo_data"), str(path), "-f"]
    argv += ["--grid", *map(str, spec.grid), "--tile-shape", *map(str, spec.tile)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["failed"])[-1]
        code = done.returncode
        raise LinumpyError(f"linum-make-demo-data {path} failed (exit {code}): {last}")
    read_demo_truth(path).save(path.with_suffix(".truth.json"))


def _command_args(command: str, path: Path, out: Path) -> list[str]:
    if command == "estimate":
        return [str(path), str(out / "transform.json")]
    if command == "stitch":
        truth = path.with_suffix(".truth.json")
        return [str(path), str(truth), str(out / "stitched.ome.zarr")]
    if command == "job":
        return [str(path), str(out / "job")]
    return [str(path), str(out / "aip.ome.zarr")]


def _ceiling(spec: MosaicSpec, device: str, out_dir: Path) -> CommandRun:
    """``linum-rechunk`` of the mosaic into the level-0 layout of the image the stitch wrote on
    ``device`` (rechunk's default layout without one)."""
    from linumpy.io import open_array

    data = out_dir / "data"
    stitched = data / f"out-stitch-{device}" / "stitched.ome.zarr"
    target = data / f"rechunked-{device}.ome.zarr"
    argv = [*_script_argv(RECHUNK[1]), str(data / "mosaic.ome.zarr"), str(target)]
    if stitched.exists():
        level0 = open_array(stitched, 0)
        argv += ["--chunks", *map(str, level0.chunks)]
        argv += ["--shards", *map(str, level0.shards)] if level0.shards else ["--no-shards"]
    log = out_dir / "logs" / f"{spec.key}-rechunk-{device}.log"
    try:
        return _timed(argv, CommandRun("rechunk", spec.label, device, nbytes=spec.nbytes), log)
    finally:
        shutil.rmtree(target, ignore_errors=True)


def _command_run(command: str, device: str, spec: MosaicSpec, out_dir: Path) -> CommandRun:
    """Time ``command`` on the mosaic in ``out_dir/data``; on the GPU after an untimed run that
    compiles its kernels into the caches. Every run writes a new output."""
    path = out_dir / "data" / "mosaic.ome.zarr"
    out = out_dir / "data" / f"out-{command}-{device}"
    argv = [*_script_argv(COMMANDS[command][1]), *_command_args(command, path, out)]
    log = out_dir / "logs" / f"{spec.key}-{command}-{device}.log"
    for _ in range(2 if device == "gpu" else 1):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        run = _timed(argv, CommandRun(command, spec.label, device, nbytes=spec.nbytes), log)
    return run


def run_pipeline_benchmark(
    config: PipelineConfig, out_dir: Path, *, log: Callable[[str], None] = print
) -> PipelineResult:
    """Make each mosaic, time the commands on it (CPU, then GPU), then its ceilings; ``log`` is
    called with a line per run. Each command's output goes to ``out_dir/logs``; the mosaics and
    outputs are written in ``out_dir/data``, removed once measured."""
    from linumpy.cli.parser import gpu_reason

    reason = gpu_reason() if config.gpu else "not asked for (CPU only)"
    result = PipelineResult(config, machine_info(reason is None), gpu_skipped=reason or "")
    if config.gpu and reason is not None:
        log(f"GPU half skipped: no usable GPU ({reason})")
    devices = ("cpu", "gpu") if reason is None else ("cpu",)
    data = out_dir / "data"
    (out_dir / "logs").mkdir(parents=True, exist_ok=True)
    try:
        for size in config.mosaics:
            spec = mosaic_spec(size, config.tile)
            shutil.rmtree(data, ignore_errors=True)
            data.mkdir(parents=True)
            log(f"making {spec.label} ({spec.nbytes / 2**30:.2f} GiB)")
            _make_mosaic(spec, data / "mosaic.ome.zarr")
            for command in (c for c in COMMANDS if c in config.commands):
                for device in devices:
                    result.runs.append(_command_run(command, device, spec, out_dir))
                    log(_line(result.runs[-1]))
            for device in devices:
                result.runs.append(_ceiling(spec, device, out_dir))
                log(_line(result.runs[-1]))
    finally:
        shutil.rmtree(data, ignore_errors=True)
    return result


def _name(run: CommandRun) -> str:
    return COMMANDS.get(run.command, RECHUNK)[0]


def _line(run: CommandRun) -> str:
    status = "" if run.ok else f" FAILED: {run.error}"
    return f"  {_name(run)} {run.device}: {run.seconds:.2f} s{status}"


def _gbps(value: float) -> float | None:
    return float(f"{value:.4g}") if value > 0 else None  # 4 digits, however small


def pipeline_rows(result: PipelineResult) -> list[dict[str, object]]:
    """One row per run: seconds, start-up apart, GB/s of mosaic after the start-up and through
    level 0, and the GB/s of the ceiling (the rechunk of the mosaic on the same device) and the
    fraction of it."""
    ceilings = {(r.mosaic, r.device): r for r in result.runs if r.command == "rechunk" and r.ok}
    rows = []
    for run in result.runs:
        ceiling = ceilings.get((run.mosaic, run.device))
        share = run.gbps / ceiling.gbps if ceiling and ceiling.gbps and run.gbps else 0.0
        rows.append(
            {
                "command": _name(run) + (" (ceiling)" if run.command == "rechunk" else ""),
                "mosaic": run.mosaic,
                "device": run.device,
                "s": round(run.seconds, 2) if run.ok else "failed",
                "start-up s": round(run.startup, 2) if run.phases else None,
                "GB/s": _gbps(run.gbps),
                "level 0 GB/s": _gbps(run.level0_gbps),
                "ceiling GB/s": _gbps(ceiling.gbps) if ceiling else None,
                "x ceiling": round(share, 2) if share else None,
            }
        )
    return rows


def _cell(key: str, value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):  # small GB/s (tiny mosaics) to 3 digits, the rest to 2 decimals
        return f"{value:.3g}" if key.endswith("GB/s") and value < 1 else f"{value:.2f}"
    return str(value)


def pipeline_table(result: PipelineResult) -> str:
    """The result as a Markdown table (:func:`pipeline_rows`), and why the GPU half was skipped."""
    rows = pipeline_rows(result)
    header = list(rows[0]) if rows else ["command", "mosaic", "device"]
    lines = [[_cell(key, value) for key, value in row.items()] for row in rows]
    skipped = f"\n\nGPU half skipped: {result.gpu_skipped}." if result.gpu_skipped else ""
    return markdown_table(header, lines, 3) + skipped


def write_pipeline_json(result: PipelineResult, path: Path) -> None:
    """The run as JSON: machine, settings, rows and every run with its phases."""
    write_json(
        path,
        "linum-benchmark-pipeline",
        result.machine,
        settings=asdict(result.config),
        gpu_skipped=result.gpu_skipped,
        rows=pipeline_rows(result),
        runs=[asdict(r) for r in result.runs],
    )
