"""A mosaic grid's whole job in one process: its tile layout, the 3-D stitch and its projection.

The steps of ``linum-estimate-transform``, ``linum-stitch-3d`` and ``linum-aip``, paying Python's
start-up and imports and, on the GPU, the CUDA context and kernel loading once. Each output is
staged beside its place and moved there once complete.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from numpy.typing import DTypeLike

from linumpy.io.layout import ShardsArg
from linumpy.io.reader import read_volume
from linumpy.io.staging import staged_output
from linumpy.mosaic.pipeline import (
    estimate_transform_omezarr,
    projection_omezarr,
    save_png,
    stitch_omezarr,
)
from linumpy.mosaic.stitch import Blending
from linumpy.mosaic.transform import PairMeasurement, TileTransform
from linumpy.parallel import Cluster

__all__: list[str] = []


@dataclass(frozen=True)
class JobOutputs:
    """Where a mosaic job writes: the tile transform (JSON), the stitched image, its projection
    and, optionally, an 8-bit PNG preview of the projection.

    Examples
    --------
    >>> from linumpy.mosaic import JobOutputs
    >>> outputs = JobOutputs.in_folder("out", png=True)
    >>> [path.name for path in outputs.paths()]
    ['transform.json', 'stitched.ome.zarr', 'stitched_aip.ome.zarr', 'stitched_aip.png']
    """

    transform: Path
    stitched: Path
    projection: Path
    png: Path | None = None

    @classmethod
    def in_folder(cls, folder: str | os.PathLike[str], *, png: bool = False) -> JobOutputs:
        """The outputs' usual names in ``folder`` (those of ``make demo``)."""
        folder = Path(folder)
        return cls(
            folder / "transform.json",
            folder / "stitched.ome.zarr",
            folder / "stitched_aip.ome.zarr",
            folder / "stitched_aip.png" if png else None,
        )

    def paths(self) -> list[Path]:
        """Every output path, in the order they are written."""
        return [self.transform, self.stitched, self.projection, *([self.png] if self.png else [])]


@dataclass(frozen=True)
class JobResult:
    """What a mosaic job found and wrote: its outputs, the tile layout and the pairs it was fitted
    to, and the projection's shape.

    Examples
    --------
    >>> from linumpy.mosaic import JobOutputs, JobResult, TileTransform
    >>> layout = TileTransform(((60.0, 0.0), (0.0, 60.0)), (0.0, 0.0), (64, 64), (1, 2))
    >>> JobResult(JobOutputs.in_folder("out"), layout, [], (64, 124)).projection_shape
    (64, 124)
    """

    outputs: JobOutputs
    transform: TileTransform
    pairs: list[PairMeasurement]
    projection_shape: tuple[int, ...]


def run_mosaic_job(
    source: str | os.PathLike[str],
    outputs: JobOutputs,
    *,
    gpu: bool = False,
    tile_shape: tuple[int, int] | None = None,
    min_score: float = 0.3,
    blending: Blending = "linear",
    dtype: DTypeLike | None = None,
    n_levels: int = 3,
    chunks: tuple[int, ...] | None = None,
    shards: ShardsArg = "auto",
    zstd_level: int | None = None,
    progress: bool = False,
    cluster: Cluster | None = None,
) -> JobResult:
    """Estimate a 3-D mosaic grid's tile layout, stitch it and project the stitched image.

    Parameters
    ----------
    source
        3-D mosaic grid OME-Zarr image.
    outputs
        Where to write (existing outputs are replaced).
    gpu
        Run every step on the GPU.
    tile_shape, min_score
        As for :func:`linumpy.mosaic.estimate_transform_omezarr`.
    blending, dtype, n_levels, chunks, shards, zstd_level
        As for :func:`linumpy.mosaic.stitch_omezarr` (the stitched image).
    progress
        Show progress bars.
    cluster
        Where the stitch and the projection run; local threads by default.

    Returns
    -------
    JobResult

    Raises
    ------
    LinumpyError
        When an output does not fit (a full disk, a quota, a file size limit), naming it; the
        outputs finished before it stay.

    Examples
    --------
    >>> import tempfile
    >>> from linumpy.io import read_volume
    >>> from linumpy.mosaic import JobOutputs, make_demo_data, read_demo_truth, run_mosaic_job
    >>> folder = tempfile.mkdtemp()
    >>> _ = make_demo_data(folder + "/grid.ome.zarr", grid_shape=(2, 3), tile_shape=(8, 64, 64))
    >>> result = run_mosaic_job(folder + "/grid.ome.zarr", JobOutputs.in_folder(folder))
    >>> result.transform.max_position_error(read_demo_truth(folder + "/grid.ome.zarr")) < 0.5
    True
    >>> result.projection_shape == read_volume(result.outputs.projection).shape
    True
    """
    transform, pairs = estimate_transform_omezarr(
        source,
        tile_shape=tile_shape,
        gpu=gpu,
        progress=progress,
        cluster=cluster,
        min_score=min_score,
    )
    with staged_output(outputs.transform) as partial:
        transform.save(partial)
    common: dict[str, Any] = {"gpu": gpu, "progress": progress, "cluster": cluster}
    with staged_output(outputs.stitched) as partial:
        stitch_omezarr(
            source,
            partial,
            transform,
            blending=blending,
            dtype=dtype,
            n_levels=n_levels,
            chunks=chunks,
            shards=shards,
            zstd_level=zstd_level,
            **common,
        )
    with staged_output(outputs.projection) as partial:
        shape = projection_omezarr(outputs.stitched, partial, **common)
        if outputs.png is not None:  # before the projection moves into place, as linum-aip
            with staged_output(outputs.png) as partial_png:
                save_png(read_volume(partial), partial_png)
    return JobResult(outputs, transform, pairs, shape)
