"""Tile layout estimation: phase correlation of overlapping tile pairs and a robust affine fit.

The CPU registers pairs in threads, one pair at a time each (:func:`measure_pair`); a cupy
projection has all its pairs registered at once on its GPU
(:mod:`linumpy.mosaic.batched_registration`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from linumpy import phases
from linumpy._numpy_or_cupy import array_module
from linumpy.errors import LinumpyError
from linumpy.mosaic.batched_registration import (
    N_PEAKS,
    refine_subpixel,
    register_pairs,
    top_peaks,
)
from linumpy.mosaic.pair_geometry import (
    candidate_displacements,
    overlap_ncc,
    overlap_views,
    subpixel_parts,
)
from linumpy.mosaic.phase_correlation import (
    DEFAULT_BAND,
    check_pair,
    whitened_spectrum,
)
from linumpy.mosaic.transform import (
    PairMeasurement,
    TileTransform,
    fit_transform,
    parse_tile_shape,
)
from linumpy.settings import available_cpus

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_BAND",
    "PairMeasurement",
    "estimate_transform",
    "fit_transform",
    "measure_pair",
    "registration_threads",
]

#: Tile pixels per registration thread on the CPU: a pair's Python steps hold the GIL, so small
#: tiles gain from a few threads only (measured in docs/quickstart.md, "Tile registration").
PIXELS_PER_THREAD = 128 * 128


def measure_pair(
    a: Any,
    b: Any,
    *,
    min_overlap: float = 0.05,
    upsample: int = 100,
    axis: int | None = None,
    refine_from: float | None = None,
) -> tuple[np.ndarray, float]:
    """Displacement ``(dy, dx)`` of tile ``b``'s top-left corner from tile ``a``'s, and the
    normalized cross-correlation of the overlap there (0 when a tile is flat or no candidate
    overlaps ``min_overlap`` of a tile).

    Of the displacements each of the whole-tile correlation's highest peaks allows (modulo the
    tile size; with ``axis``, mostly along it), the one whose overlap correlates best is kept and
    refined to ``1 / upsample`` pixel, unless it scores below ``refine_from``.
    """
    check_pair(a, b)
    xp = array_module(a)
    a = a.astype(xp.float64)
    b = xp.asarray(b).astype(xp.float64)
    # phase_cross_correlation returns only the highest peak; a background tile's vignetting or a
    # repeated structure can outrank the true one, so the candidates come from several.
    product = whitened_spectrum(a, DEFAULT_BAND) * whitened_spectrum(b, DEFAULT_BAND).conj()
    correlation = xp.fft.ifft2(product).real
    best: tuple[float, np.ndarray] | None = None
    for peak in top_peaks(correlation[None], N_PEAKS)[0]:
        for displacement in candidate_displacements(peak, a.shape, min_overlap, axis):
            score = overlap_ncc(*overlap_views(a, b, displacement))
            if best is None or score > best[0]:
                best = (score, np.array(displacement))
    if best is None:
        return np.zeros(2), 0.0
    score, coarse = best
    parts = subpixel_parts(a.shape, coarse)
    if parts is None or (refine_from is not None and score < refine_from):
        return coarse.astype(np.float64), score
    fraction = refine_subpixel([a[parts.fixed]], [b[parts.block]], parts.moving, upsample)
    return coarse + fraction[0], score


def _in_threads(
    function: Callable[[Any], PairMeasurement],
    items: Sequence[Any],
    threads: int,
    done: Callable[[], Any],
) -> list[PairMeasurement]:
    """``function`` of every item, in order, from a pool of ``threads``; ``done`` after each.

    BLAS is held to one thread meanwhile: the refinement's small matrix products would start
    BLAS threads of their own in every pool thread. An interruption cancels the items not begun.
    """
    threads = min(threads, len(items))
    if threads < 2:
        return [_then(function(item), done) for item in items]
    from threadpoolctl import threadpool_limits

    pool = ThreadPoolExecutor(threads, thread_name_prefix="linumpy-registration")
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            return [_then(result, done) for result in pool.map(function, items)]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _then(result: PairMeasurement, done: Callable[[], Any]) -> PairMeasurement:
    done()
    return result


@phases.recorded("registration")
def estimate_transform(
    aip_grid: Any,
    tile_shape: Sequence[int],
    *,
    min_score: float = 0.3,
    progress: bool = False,
    threads: int | None = None,
) -> tuple[TileTransform, list[PairMeasurement]]:
    """Estimate the tile layout of a mosaic grid from its 2D projection.

    On the CPU the pairs are registered in ``threads`` threads (numpy's FFTs and scipy's
    resampling release the GIL), with one BLAS thread each; on the GPU all at once, which is
    faster than the host's threads (figures in the GPU guide). Pairs whose overlap scores below
    ``min_score`` are not refined to sub-pixel precision: the fit leaves them out.

    Parameters
    ----------
    aip_grid
        ``(rows * tile_h, cols * tile_w)`` image of the mosaic grid, typically the average
        intensity projection along z (numpy or cupy).
    tile_shape
        ``(tile_h, tile_w)``.
    min_score
        The score below which a pair is left out of the fit.
    progress
        Show a progress bar over the tile pairs.
    threads
        Pairs registered at once on the CPU; by default one per 128 x 128 pixels of a tile, at
        most the CPUs available to the process.

    Returns
    -------
    transform
        The fitted layout, normalized so the smallest tile position is 0.
    measurements
        Every pair measured, reliable or not.

    Examples
    --------
    The layout of a small synthetic 2x3 mosaic grid, from its average intensity projection:

    >>> from linumpy.mosaic import estimate_transform, generate_demo_mosaic
    >>> demo = generate_demo_mosaic(grid_shape=(2, 3), tile_shape=(8, 64, 64))
    >>> transform, measurements = estimate_transform(demo.mosaic.mean(axis=0), (64, 64))
    >>> transform.grid_shape, len(measurements)
    ((2, 3), 7)
    >>> transform.max_position_error(demo.transform) < 0.5
    True
    """
    from tqdm import tqdm

    h, w = parse_tile_shape(tile_shape)
    if aip_grid.ndim != 2 or aip_grid.shape[0] % h or aip_grid.shape[1] % w:
        raise LinumpyError(
            f"a mosaic grid projection of shape {aip_grid.shape} is not a grid of {h}x{w} tiles"
        )
    grid_shape = (aip_grid.shape[0] // h, aip_grid.shape[1] // w)
    pairs = [
        ((row, col), (row + dr, col + dc))
        for row in range(grid_shape[0])
        for col in range(grid_shape[1])
        for dr, dc in ((0, 1), (1, 0))
        if row + dr < grid_shape[0] and col + dc < grid_shape[1]
    ]

    def tile(index: tuple[int, int]) -> Any:
        return aip_grid[index[0] * h : (index[0] + 1) * h, index[1] * w : (index[1] + 1) * w]

    def measure(pair: tuple[tuple[int, int], tuple[int, int]]) -> PairMeasurement:
        first, second = pair
        axis = 0 if second[0] != first[0] else 1
        displacement, score = measure_pair(
            tile(first),
            tile(second),
            axis=axis,
            refine_from=min_score,
        )
        return PairMeasurement(first, second, tuple(displacement.tolist()), score)

    if threads is None:
        threads = registration_threads((h, w), available_cpus())
    with tqdm(total=len(pairs), desc="tile pairs", unit="pair", disable=not progress) as bar:
        if array_module(aip_grid) is np:
            logger.info(
                "registering %d tile pairs on the host in %d thread(s)", len(pairs), threads
            )
            measurements = _in_threads(measure, pairs, threads, bar.update)
        else:
            logger.info("registering %d tile pairs on the GPU, all at once", len(pairs))
            measurements = _on_gpu(aip_grid, (h, w), grid_shape, pairs, bar, min_score)
    transform = fit_transform(measurements, (h, w), grid_shape, min_score=min_score)
    return transform, measurements


def _on_gpu(
    aip_grid: Any,
    tile_shape: tuple[int, int],
    grid_shape: tuple[int, int],
    pairs: list[tuple[tuple[int, int], tuple[int, int]]],
    bar: Any,
    min_score: float,
) -> list[PairMeasurement]:
    """Every pair of a cupy projection measured at once (:func:`register_pairs`)."""
    (h, w), (rows, cols) = tile_shape, grid_shape
    tiles = aip_grid.reshape(rows, h, cols, w).transpose(0, 2, 1, 3).reshape(rows * cols, h, w)
    tiles = tiles.astype(array_module(aip_grid).float64)
    indices = np.array([[r * cols + c for r, c in pair] for pair in pairs], dtype=np.int64)
    axes = [0 if second[0] != first[0] else 1 for first, second in pairs]
    found = register_pairs(
        tiles,
        indices.reshape(-1, 2),
        axes,
        refine_from=min_score,
        done=bar.update,
    )
    return [
        PairMeasurement(first, second, tuple(displacement.tolist()), score)
        for (first, second), (displacement, score) in zip(pairs, found, strict=True)
    ]


def registration_threads(tile_shape: Sequence[int], cpus: int) -> int:
    """Threads that register a mosaic's pairs on the CPU: one per :data:`PIXELS_PER_THREAD` of
    a tile, at most ``cpus``."""
    h, w = parse_tile_shape(tile_shape)
    return max(1, min(cpus, math.ceil(h * w / PIXELS_PER_THREAD)))
