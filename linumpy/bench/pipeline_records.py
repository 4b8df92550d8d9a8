"""What the pipeline benchmark runs and what it records: its mosaics (named grids, or grids made
to a size), its commands, one run's configuration, and the results (each command run, and the
run as a whole).

:mod:`linumpy.bench.pipeline` runs the benchmark; :mod:`linumpy.bench.pipeline_report` prints
and saves its results.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "COMMANDS",
    "KERNELS_CACHED",
    "LAYOUTS",
    "MOSAICS",
    "RECHUNK",
    "STARTUP",
    "TILES",
    "CommandRun",
    "MosaicSpec",
    "PipelineConfig",
    "PipelineResult",
    "mosaic_spec",
    "parse_size",
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
#: The ceiling's command: the mosaic rewritten in the stitch's output dtype and layout.
RECHUNK = ("linum-rechunk", "linum_rechunk")
#: The commands given ``--dtype`` (the stitch's output dtype).
DTYPE_COMMANDS = ("stitch", "job")
#: The layouts each mosaic is written in: linumpy's default, and one zstd chunk per tile.
LAYOUTS = ("default", "tile")
#: The count of a GPU run's kernels added to its cupy cache (``CommandRun.counts``).
KERNELS_CACHED = "kernels added to the cache"
#: The phase of a command's ``-v`` table that is its start-up, reported apart.
STARTUP = "start-up and imports"
#: Tile shapes of mosaics made to a size: thin OCT tiles, cubes, and deep cubes.
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
    >>> from linumpy.bench.pipeline_records import parse_size
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
    >>> from linumpy.bench.pipeline_records import MOSAICS
    >>> spec = MOSAICS["6x6"]
    >>> spec.grid, spec.tile, round(spec.nbytes / 1e9, 2), spec.label
    ((6, 6), (96, 512, 512), 1.81, '6x6 of 96x512x512')
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


#: Named mosaics: the 6 x 6 grid of (96, 512, 512) tiles (1.81 GB) and the 8 x 8 grid of 256^3
#: tiles (2 GiB). Others are given by size (:func:`mosaic_spec`).
MOSAICS = {
    "6x6": MosaicSpec("6x6", (6, 6), (96, 512, 512)),
    "8x8": MosaicSpec("8x8", (8, 8), (256, 256, 256)),
}


def mosaic_spec(key: str, tile: tuple[int, int, int] = TILES[2]) -> MosaicSpec:
    """A named mosaic, or a grid of ``tile`` tiles holding about ``key`` bytes (``4gib``).

    The grid is square or nearly (rows <= columns); its size is the nearest to the one asked
    of the grids with about the square root of the tile count as rows.

    Raises
    ------
    ValueError
        When ``key`` is neither a name of :data:`MOSAICS` nor a size.

    Examples
    --------
    >>> from linumpy.bench.pipeline_records import mosaic_spec
    >>> mosaic_spec("4gib").label, mosaic_spec("4gib", (256, 256, 256)).label
    ('8x8 of 512x256x256', '10x13 of 256x256x256')
    >>> mosaic_spec("32gib", (96, 512, 512)).grid
    (26, 26)
    """
    if key in MOSAICS:
        return MOSAICS[key]
    count = parse_size(key) / (math.prod(tile) * 2)
    side = max(1, math.isqrt(round(count)))
    grids = [(rows, max(rows, round(count / rows))) for rows in (side, side - 1) if rows > 0]
    rows, cols = min(grids, key=lambda grid: abs(grid[0] * grid[1] - count))
    return MosaicSpec(key, (rows, cols), tile)


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
    mosaics
        Keys of :data:`MOSAICS`, or sizes (``4gib``: a grid of ``tile`` tiles of that size).
    tile
        The tile shape of the mosaics given by size (one of :data:`TILES`, or any).
    layouts
        Keys of :data:`LAYOUTS` (``default``, ``tile``).
    dtypes
        Output dtypes of the stitch (``--dtype``), each a row of its own; empty: its default.
    scale
        Tile sides times this (smaller mosaics for smoke tests).
    gpu
        Run the GPU half (skipped, with the reason, when no GPU is usable).
    commands
        Keys of :data:`COMMANDS` to run (each mosaic also limits them).
    ceiling
        Time the ceiling: ``linum-rechunk`` of each mosaic into the stitch's output dtype and
        layout.
    timeout
        Seconds one command may run.
    prepare_kernels
        Also time each command's first GPU run after ``linum-gpu-info --prepare-kernels``
        filled a fresh kernel cache (runs ``"prepare"`` and ``"prepared"``).

    Examples
    --------
    >>> from linumpy.bench.pipeline_records import PipelineConfig
    >>> config = PipelineConfig(mosaics=("6x6", "1gib"), scale=0.125, gpu=False)
    >>> [spec.label for spec in config.specs()]
    ['6x6 of 16x64x64', '4x4 of 64x32x32']
    """

    mosaics: tuple[str, ...] = ("6x6", "8x8")
    tile: tuple[int, int, int] = TILES[2]
    layouts: tuple[str, ...] = LAYOUTS
    dtypes: tuple[str, ...] = ()
    scale: float = 1.0
    gpu: bool = True
    commands: tuple[str, ...] = tuple(COMMANDS)
    ceiling: bool = True
    timeout: float = 3600.0
    prepare_kernels: bool = False

    def specs(self) -> list[MosaicSpec]:
        """The mosaics to make, scaled."""
        return [scaled(mosaic_spec(key, self.tile), self.scale) for key in self.mosaics]


@dataclass
class CommandRun:
    """One command run: its wall time (process start to exit) and its ``-v`` phases.

    ``run`` is ``"first"`` for a command's first GPU run (empty kernel cache), ``"mosaic first"``
    for its first GPU run on each later mosaic (the kernels of that mosaic's shapes compiled),
    ``"ceiling"`` for the rechunk, else ``"warm"`` (:func:`linumpy.bench.pipeline.run_labels`).
    ``dtype`` is the output's dtype, ``nbytes`` the mosaic's bytes.

    Examples
    --------
    >>> from linumpy.bench.pipeline_records import CommandRun
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
    counts: dict[str, int] = field(default_factory=dict)
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
    outputs: list[dict[str, Any]] = field(default_factory=list)
