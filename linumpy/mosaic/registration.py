"""Tile layout estimation: phase correlation of overlapping tile pairs and a robust affine fit.

Every function takes numpy or cupy arrays and computes with the module of its input.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from linumpy._xp import array_module, ndimage_module
from linumpy.errors import LinumpyError
from linumpy.mosaic.transform import TileTransform, parse_tile_shape

__all__ = [
    "PairMeasurement",
    "estimate_transform",
    "fit_transform",
    "measure_pair",
    "phase_correlation",
]


#: Default pass band of the phase correlation, in cycles per pixel: below it, illumination and
#: vignetting; above it, detector noise that no two acquisitions share.
DEFAULT_BAND = (0.01, 0.25)
_SUBPIXEL_ITERATIONS = 8


def _cross_power(fixed: Any, moving: Any, band: tuple[float, float]) -> Any:
    """Band-limited normalized cross-power spectrum, scaled so a pure circular shift peaks at 1."""
    xp = array_module(fixed)
    product = xp.fft.fft2(fixed - fixed.mean()) * xp.fft.fft2(moving - moving.mean()).conj()
    fy = xp.fft.fftfreq(fixed.shape[0])[:, None]
    fx = xp.fft.fftfreq(fixed.shape[1])[None, :]
    radius2 = fy**2 + fx**2
    weight = xp.exp(-radius2 / band[1] ** 2) * -xp.expm1(-radius2 / band[0] ** 2)
    weight *= weight.size / weight.sum()
    return product * weight / xp.maximum(xp.abs(product), 1e-12)


def _dft_surface(cross_power: Any, center: np.ndarray, step: float, half_width: int) -> Any:
    """Inverse DFT of ``cross_power`` on a grid of ``2 * half_width + 1`` points per axis, ``step``
    pixels apart, centred on ``center``: two small matrix products (the matrix-multiply DFT of
    Guizar-Sicairos et al., Opt. Lett. 33, 2008)."""
    xp = array_module(cross_power)
    offsets = xp.arange(-half_width, half_width + 1, dtype=xp.float64) * step
    kernels = []
    for axis, n in enumerate(cross_power.shape):
        freq = xp.fft.fftfreq(n)
        kernels.append(
            xp.exp(2j * np.pi * (float(center[axis]) + offsets)[:, None] * freq[None, :])
        )
    return (kernels[0] @ cross_power @ kernels[1].T).real


def _refine_peak(cross_power: Any, peak: np.ndarray, upsample: int) -> np.ndarray:
    """Sub-pixel peak of the inverse DFT of ``cross_power`` near the integer ``peak``, to
    ``1 / upsample`` pixel: first on a 0.1-pixel grid over +-1 pixel, then around its maximum."""
    center = np.asarray(peak, dtype=np.float64)
    for step, half_width in ((0.1, 10), (1.0 / upsample, math.ceil(upsample / 10))):
        surface = _dft_surface(cross_power, center, step, half_width)
        index = np.unravel_index(int(surface.argmax()), surface.shape)
        center = center + (np.array(index, dtype=np.float64) - half_width) * step
    return center


def _top_peaks(correlation: Any, count: int) -> list[np.ndarray]:
    """Integer positions of the ``count`` highest local peaks, highest first, in ``(-n/2, n/2]``."""
    xp = array_module(correlation)
    surface = correlation.copy()
    shape = np.array(surface.shape)
    peaks = []
    for _ in range(count):
        index = np.array(np.unravel_index(int(surface.argmax()), surface.shape))
        peaks.append(np.where(index > shape // 2, index - shape, index).astype(np.float64))
        rows = xp.arange(index[0] - 2, index[0] + 3) % shape[0]
        cols = xp.arange(index[1] - 2, index[1] + 3) % shape[1]
        surface[rows[:, None], cols[None, :]] = -xp.inf
    return peaks


def _check_pair(fixed: Any, moving: Any) -> None:
    if fixed.shape != moving.shape or fixed.ndim != 2:
        raise LinumpyError(f"need two 2D images of one shape, got {fixed.shape} and {moving.shape}")


def phase_correlation(
    fixed: Any,
    moving: Any,
    *,
    upsample: int = 100,
    band: tuple[float, float] = DEFAULT_BAND,
) -> tuple[np.ndarray, float]:
    """Translation between two equally shaped 2D images by phase correlation.

    Parameters
    ----------
    fixed, moving
        2D images (numpy or cupy).
    upsample
        Sub-pixel precision is ``1 / upsample`` pixel.
    band
        ``(low, high)`` pass band in cycles per pixel: the normalized cross-power spectrum is
        weighted by a Gaussian low-pass of width ``high`` times a Gaussian high-pass of width
        ``low``.

    Returns
    -------
    shift
        ``(dy, dx)`` such that ``fixed[y, x] ~ moving[y - dy, x - dx]``, each in ``(-n/2, n/2]``
        (the correlation is circular).
    peak
        Height of the correlation peak (about 1 for a pure circular shift, near 0 for unrelated
        images).

    Examples
    --------
    >>> import numpy as np
    >>> from linumpy.mosaic.registration import phase_correlation
    >>> image = np.random.default_rng(0).random((64, 64))
    >>> shift, peak = phase_correlation(np.roll(image, (3, -5), axis=(0, 1)), image)
    >>> shift.round(2), round(peak, 2)
    (array([ 3., -5.]), 1.0)
    """
    _check_pair(fixed, moving)
    xp = array_module(fixed)
    cross_power = _cross_power(fixed.astype(xp.float64), moving.astype(xp.float64), band)
    correlation = xp.fft.ifft2(cross_power).real
    (peak,) = _top_peaks(correlation, 1)
    height = float(correlation[int(peak[0]), int(peak[1])])
    return _refine_peak(cross_power, peak, upsample), height


def _overlap_views(a: Any, b: Any, displacement: Sequence[int]) -> tuple[Any, Any]:
    """The parts of tiles ``a`` and ``b`` that see the same place when ``b`` sits at
    ``displacement`` (integer pixels) from ``a``."""
    dy, dx = (int(d) for d in displacement)
    h, w = a.shape
    view_a = a[max(dy, 0) : h + min(dy, 0), max(dx, 0) : w + min(dx, 0)]
    view_b = b[max(-dy, 0) : h + min(-dy, 0), max(-dx, 0) : w + min(-dx, 0)]
    return view_a, view_b


def _ncc(a: Any, b: Any) -> float:
    xp = array_module(a)
    a = a - a.mean()
    b = b - b.mean()
    norm = float(xp.sqrt((a * a).sum() * (b * b).sum()))
    return float((a * b).sum()) / norm if norm > 0 else 0.0


def measure_pair(
    a: Any,
    b: Any,
    *,
    min_overlap: float = 0.05,
    upsample: int = 100,
    band: tuple[float, float] = DEFAULT_BAND,
    n_peaks: int = 4,
    axis: int | None = None,
) -> tuple[np.ndarray, float]:
    """Displacement of tile ``b`` relative to tile ``a`` from their overlapping content.

    The whole-tile phase correlation gives the displacement modulo the tile size at each of its
    highest peaks; of the four displacements each peak allows, the one whose overlap correlates best
    is kept, and a phase correlation of the two overlapping parts refines it to sub-pixel precision.

    Parameters
    ----------
    a, b
        2D tiles of one shape (for instance each tile's average intensity projection).
    min_overlap
        Smallest overlap, as a fraction of the tile's area, a candidate may have.
    upsample, band
        See :func:`phase_correlation`.
    n_peaks
        How many correlation peaks to try.
    axis
        0 when ``b`` is the next tile down, 1 when it is the next tile right: the displacement must
        then be mostly along that axis. None accepts any direction.

    Returns
    -------
    displacement
        ``(dy, dx)`` of ``b``'s top-left corner relative to ``a``'s, in pixels.
    score
        Normalized cross-correlation of the overlap at that displacement (-1 to 1; 0 when a tile
        is flat or no candidate overlaps enough).

    Examples
    --------
    Two 64x64 tiles of one scene, the second 48 pixels right of the first:

    >>> import numpy as np
    >>> from linumpy.mosaic.registration import measure_pair
    >>> scene = np.random.default_rng(0).random((64, 112))
    >>> displacement, score = measure_pair(scene[:, :64], scene[:, 48:], axis=1)
    >>> displacement.round(2), round(score, 2)
    (array([ 0., 48.]), 1.0)
    """
    _check_pair(a, b)
    xp = array_module(a)
    a = a.astype(xp.float64)
    b = b.astype(xp.float64)
    shape = np.array(a.shape)
    cross_power = _cross_power(a, b, band)
    correlation = xp.fft.ifft2(cross_power).real
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    for peak in _top_peaks(correlation, n_peaks):
        # b[y, x] ~ a[y + d, x + d]: the circular shift is d modulo the tile size.
        base = np.mod(peak, shape).astype(int)
        for dy in (base[0], base[0] - shape[0]):
            for dx in (base[1], base[1] - shape[1]):
                area = (shape[0] - abs(dy)) * (shape[1] - abs(dx))
                if area < min_overlap * shape.prod():
                    continue
                if axis is not None and abs((dy, dx)[axis]) < abs((dy, dx)[1 - axis]):
                    continue
                score = _ncc(*_overlap_views(a, b, (dy, dx)))
                if best is None or score > best[0]:
                    best = (score, np.array([dy, dx]))
    if best is None:
        return np.zeros(2), 0.0
    score, coarse = best
    return coarse + _subpixel(a, b, coarse, upsample, band), score


def _subpixel(
    a: Any, b: Any, coarse: np.ndarray, upsample: int, band: tuple[float, float]
) -> np.ndarray:
    """Sub-pixel part of the displacement of ``b`` relative to ``a`` near the integer ``coarse``.

    Phase correlation of two crops underestimates a sub-pixel shift (the crops' edges correlate at
    zero shift), so ``b`` is resampled by the current estimate and the residual measured again
    until it vanishes: the estimate converges to the shift itself.
    """
    xp = array_module(a)
    ndimage = ndimage_module(xp)
    fraction = np.zeros(2)
    for _ in range(_SUBPIXEL_ITERATIONS):
        shifted = (
            ndimage.shift(b, tuple(fraction), order=3, mode="nearest") if fraction.any() else b
        )
        view_a, view_b = _overlap_views(a, shifted, coarse)
        # Leave out the border that resampling filled in.
        view_a, view_b = view_a[2:-2, 2:-2], view_b[2:-2, 2:-2]
        if min(view_a.shape) < 4:
            break
        residual, _ = phase_correlation(view_a, view_b, upsample=upsample, band=band)
        fraction += residual
        if np.abs(residual).max() < 0.5 / upsample:
            break
    return fraction


@dataclass(frozen=True)
class PairMeasurement:
    """Measured displacement between two adjacent tiles.

    Attributes
    ----------
    first, second
        Tile indices ``(row, col)``; ``second`` is one row below or one column right of ``first``.
    displacement
        ``(dy, dx)`` of ``second`` relative to ``first`` in pixels.
    score
        Normalized cross-correlation of the overlap (see :func:`measure_pair`).

    Examples
    --------
    >>> from linumpy.mosaic.registration import PairMeasurement
    >>> pair = PairMeasurement((0, 0), (0, 1), displacement=(1.0, 90.0), score=0.9)
    >>> pair.axis
    1
    >>> PairMeasurement((0, 0), (1, 0), (95.0, -2.0), 0.8).axis
    0
    """

    first: tuple[int, int]
    second: tuple[int, int]
    displacement: tuple[float, float]
    score: float

    @property
    def axis(self) -> int:
        """0 for a vertical pair (next row), 1 for a horizontal pair (next column)."""
        return 0 if self.second[0] != self.first[0] else 1


def _robust_mean(values: np.ndarray, weights: np.ndarray, tolerance: float) -> np.ndarray:
    """Weighted mean of the rows of ``values`` within ``tolerance`` pixels of their median."""
    median = np.median(values, axis=0)
    inliers = np.linalg.norm(values - median, axis=1) <= tolerance
    return np.average(values[inliers], axis=0, weights=weights[inliers])


def fit_transform(
    measurements: Sequence[PairMeasurement],
    tile_shape: tuple[int, int],
    grid_shape: tuple[int, int],
    *,
    min_score: float = 0.3,
    tolerance: float = 2.0,
) -> TileTransform:
    """Fit the affine tile layout to pair measurements, ignoring unreliable ones.

    Pairs scoring below ``min_score`` (tiles without tissue) are dropped; of the rest, those more
    than ``tolerance`` pixels from the median displacement of their direction are outliers.

    Raises
    ------
    LinumpyError
        When a direction with adjacent tiles has no reliable pair.

    Examples
    --------
    A 2x2 grid of 100x100 tiles; the vertical pair scoring 0.1 (no tissue) is ignored:

    >>> import numpy as np
    >>> from linumpy.mosaic.registration import PairMeasurement, fit_transform
    >>> measurements = [
    ...     PairMeasurement((0, 0), (0, 1), (1.0, 90.0), 0.9),
    ...     PairMeasurement((1, 0), (1, 1), (1.0, 90.0), 0.8),
    ...     PairMeasurement((0, 0), (1, 0), (95.0, -2.0), 0.9),
    ...     PairMeasurement((0, 1), (1, 1), (60.0, 10.0), 0.1),
    ... ]
    >>> transform = fit_transform(measurements, (100, 100), (2, 2))
    >>> np.round(transform.matrix, 6), transform.offset
    (array([[95.,  1.],
           [-2., 90.]]), (0.0, 2.0))
    """
    matrix = np.zeros((2, 2))
    for axis in (0, 1):
        pairs = [m for m in measurements if m.axis == axis]
        good = [m for m in pairs if m.score >= min_score]
        if grid_shape[axis] == 1:
            # A single row (column): that column of the matrix never matters; use the tile size.
            matrix[axis, axis] = tile_shape[axis]
            continue
        if not good:
            direction = "vertical" if axis == 0 else "horizontal"
            raise LinumpyError(
                f"no reliable {direction} tile pair (of {len(pairs)}, none scored >= {min_score}): "
                "too little tissue in the overlaps to estimate the layout"
            )
        values = np.array([m.displacement for m in good])
        weights = np.array([m.score for m in good])
        matrix[:, axis] = _robust_mean(values, weights, tolerance)
    return TileTransform(matrix.tolist(), (0.0, 0.0), tile_shape, grid_shape).normalized()


def estimate_transform(
    aip_grid: Any,
    tile_shape: Sequence[int],
    *,
    min_score: float = 0.3,
    min_overlap: float = 0.05,
    upsample: int = 100,
    progress: bool = False,
) -> tuple[TileTransform, list[PairMeasurement]]:
    """Estimate the tile layout of a mosaic grid from its 2D projection.

    Parameters
    ----------
    aip_grid
        ``(rows * tile_h, cols * tile_w)`` image of the mosaic grid, typically the average
        intensity projection along z (numpy or cupy).
    tile_shape
        ``(tile_h, tile_w)``.
    min_score, min_overlap, upsample
        See :func:`fit_transform` and :func:`measure_pair`.
    progress
        Show a progress bar over the tile pairs.

    Returns
    -------
    transform
        The fitted layout, normalized so the smallest tile position is 0.
    measurements
        Every pair measured, reliable or not.

    Examples
    --------
    The layout of a small synthetic 2x3 mosaic grid, from its average intensity projection:

    >>> from linumpy.io.demo import generate_demo_mosaic
    >>> from linumpy.mosaic.registration import estimate_transform
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

    measurements = []
    for first, second in tqdm(pairs, desc="tile pairs", unit="pair", disable=not progress):
        axis = 0 if second[0] != first[0] else 1
        displacement, score = measure_pair(
            tile(first), tile(second), min_overlap=min_overlap, upsample=upsample, axis=axis
        )
        measurements.append(PairMeasurement(first, second, tuple(displacement.tolist()), score))
    transform = fit_transform(measurements, (h, w), grid_shape, min_score=min_score)
    return transform, measurements
