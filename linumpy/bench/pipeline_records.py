"""What the pipeline benchmark runs and what it records: its mosaics and commands, one run's
configuration, and the results (each command run, each read, the run as a whole).

:mod:`linumpy.bench.pipeline` runs the benchmark; :mod:`linumpy.bench.pipeline_report` prints
and saves its results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "COMMANDS",
    "KERNELS_CACHED",
    "LAYOUTS",
    "MOSAICS",
    "CommandRun",
    "MosaicSpec",
    "PipelineConfig",
    "PipelineResult",
    "ReadRun",
    "scaled",
]

#: The commands timed, by short name: (console command, script module).
COMMANDS = {
    "estimate": ("linum-estimate-transform", "linum_estimate_transform"),
    "stitch": ("linum-stitch-3d", "linum_stitch_3d"),
    "aip": ("linum-aip", "linum_aip"),
    # the estimate, the stitch and the projection of the stitched image in one process
    "job": ("linum-mosaic-pipeline", "linum_mosaic_pipeline"),
}
#: The layouts each mosaic is written in: linumpy's default, and one zstd chunk per tile.
LAYOUTS = ("default", "tile")
#: The count of a GPU run's kernels added to its cupy cache (``CommandRun.counts``).
KERNELS_CACHED = "kernels added to the cache"


@dataclass(frozen=True)
class MosaicSpec:
    """A demo mosaic grid of the benchmark: ``grid`` tiles of ``tile`` voxels (uint16).

    Examples
    --------
    >>> from linumpy.bench.pipeline_records import MOSAICS
    >>> spec = MOSAICS["6x6"]
    >>> spec.grid, spec.tile, round(spec.nbytes / 1e9, 2)
    ((6, 6), (96, 512, 512), 1.81)
    """

    key: str
    grid: tuple[int, int]
    tile: tuple[int, int, int]
    commands: tuple[str, ...] = tuple(COMMANDS)

    @property
    def nbytes(self) -> int:
        """Bytes of the mosaic grid."""
        return math.prod(self.grid) * math.prod(self.tile) * 2

    @property
    def label(self) -> str:
        """``6x6 of 96x512x512``."""
        return f"{self.grid[0]}x{self.grid[1]} of {'x'.join(map(str, self.tile))}"


#: The mosaics: the 6 x 6 grid of (96, 512, 512) tiles (1.81 GB), the 8 x 8 grid of 256^3
#: tiles (2 GiB), and an 8 GiB grid for the projection alone.
MOSAICS = {
    "6x6": MosaicSpec("6x6", (6, 6), (96, 512, 512)),
    "8x8": MosaicSpec("8x8", (8, 8), (256, 256, 256)),
    "8gib": MosaicSpec("8gib", (8, 8), (256, 512, 512), ("aip",)),
}


def scaled(spec: MosaicSpec, scale: float) -> MosaicSpec:
    """``spec`` with each tile side times ``scale`` (multiples of 8, at least 8; 16 in y, x).

    Examples
    --------
    >>> from linumpy.bench.pipeline_records import MOSAICS, scaled
    >>> scaled(MOSAICS["6x6"], 0.125).tile
    (16, 64, 64)
    """
    if scale == 1:
        return spec
    tile = tuple(
        max(16 if axis else 8, int(round(n * scale / 8)) * 8) for axis, n in enumerate(spec.tile)
    )
    return MosaicSpec(spec.key, spec.grid, tile, spec.commands)  # type: ignore[arg-type]


@dataclass(frozen=True)
class PipelineConfig:
    """What one pipeline benchmark run measures.

    Attributes
    ----------
    mosaics, layouts
        Keys of :data:`MOSAICS`, and of :data:`LAYOUTS` (``default``, ``tile``).
    scale
        Tile sides times this (smaller mosaics for smoke tests).
    gpu
        Run the GPU half (skipped, with the reason, when no GPU is usable).
    commands
        Keys of :data:`COMMANDS` to run (each mosaic also limits them).
    compile_sources
        Compile the Python sources of linumpy and its dependencies to bytecode first, as an
        installed package has them (an install with ``--no-compile`` would time the compiler).
    timeout
        Seconds one command may run.
    prepare_kernels
        Also time each command's first GPU run after ``linum-gpu-info --prepare-kernels``
        filled a fresh kernel cache (runs ``"prepare"`` and ``"prepared"``).

    Examples
    --------
    >>> from linumpy.bench.pipeline_records import PipelineConfig
    >>> config = PipelineConfig(mosaics=("6x6",), scale=0.125, gpu=False)
    >>> [spec.tile for spec in config.specs()]
    [(16, 64, 64)]
    """

    mosaics: tuple[str, ...] = ("6x6", "8x8")
    layouts: tuple[str, ...] = LAYOUTS
    scale: float = 1.0
    gpu: bool = True
    commands: tuple[str, ...] = tuple(COMMANDS)
    compile_sources: bool = True
    timeout: float = 600.0
    prepare_kernels: bool = False

    def specs(self) -> list[MosaicSpec]:
        """The mosaics to make, scaled."""
        return [scaled(MOSAICS[key], self.scale) for key in self.mosaics]


@dataclass
class CommandRun:
    """One command run: its wall time (process start to exit) and its ``-v`` phases.

    ``run`` is ``"first"`` for a command's first GPU run (empty kernel cache), ``"mosaic first"``
    for its first GPU run on each later mosaic (the kernels of that mosaic's shapes compiled),
    else ``"warm"`` (:func:`linumpy.bench.pipeline.run_labels`).

    Examples
    --------
    >>> from linumpy.bench.pipeline_records import CommandRun
    >>> run = CommandRun("stitch", "6x6 of 96x512x512, tile", "gpu", "warm", 5.0)
    >>> run.ok
    True
    """

    command: str
    mosaic: str
    device: str
    run: str
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    returncode: int = 0
    error: str = ""
    log: str = ""

    @property
    def ok(self) -> bool:
        """Whether the command succeeded."""
        return self.returncode == 0


@dataclass
class ReadRun:
    """``read_volume`` of a mosaic in this process, best of the timed runs after one warm-up.

    Examples
    --------
    >>> from linumpy.bench.pipeline_records import ReadRun
    >>> ReadRun("6x6 of 96x512x512, tile", "cpu", 0.5, 2.0).gbps
    4.0
    """

    mosaic: str
    device: str
    seconds: float
    nbytes_gb: float
    error: str = ""

    @property
    def gbps(self) -> float:
        """10^9 bytes of volume per second (0 when it failed)."""
        return self.nbytes_gb / self.seconds if self.seconds > 0 and not self.error else 0.0


@dataclass
class PipelineResult:
    """Everything one run measured, with the machine and the mosaics' layouts.

    Examples
    --------
    >>> from linumpy.bench.pipeline_records import PipelineConfig, PipelineResult
    >>> PipelineResult(PipelineConfig(gpu=False), {"cpus": "2"}).runs
    []
    """

    config: PipelineConfig
    machine: dict[str, str]
    gpu_skipped: str = ""
    mosaics: list[dict[str, Any]] = field(default_factory=list)
    runs: list[CommandRun] = field(default_factory=list)
    reads: list[ReadRun] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
