"""Tile layout estimation: phase correlation of overlapping tile pairs and a robust affine fit.

The phase correlation runs on numpy or cupy arrays alike (``--use-gpu``: cupy's FFTs and
``cupyx.scipy.ndimage``): whitened spectra with a band-pass, several peaks each tried with its
wrap-around candidates (by direction and overlap, scored by normalized cross-correlation), and an
iterative refinement on the overlaps whose sub-pixel steps are the matrix-multiply DFT of
scikit-image's ``phase_cross_correlation`` at 1/10 pixel, then a last-decimal step of its own
(cheaper than scikit-image's at 1/100 pixel; figures in the quickstart), and the robust fit. A
pair's refinement is a few dozen small array operations, so it calls no library function that
computes more than it uses: on the GPU every operation is a kernel launch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from linumpy import phases
from linumpy._numpy_or_cupy import array_module, ndimage_module
from linumpy.errors import LinumpyError
from linumpy.mosaic.transform import (
    PairMeasurement,
    TileTransform,
    fit_transform,
    parse_tile_shape,
)
from linumpy.settings import available_cpus

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
_COARSE_UPSAMPLE = 10
_RESAMPLE_MARGIN = 8
_RESAMPLE_STEP = 32


def _device(xp: Any) -> int | None:
    """The current GPU's number for cupy, None for numpy (keys of the caches below)."""
    return None if xp is np else xp.cuda.Device().id


@functools.lru_cache(maxsize=32)
def _band_amplitude(shape: tuple[int, int], band: tuple[float, float], device: int | None) -> Any:
    """Square root of the band-pass weight, of unit mean (so that a pure circular shift
    correlates to 1), on the host or, when ``device`` is not None, on that GPU."""
    radius2 = np.fft.fftfreq(shape[0])[:, None] ** 2 + np.fft.fftfreq(shape[1])[None, :] ** 2
    weight = np.exp(-radius2 / band[1] ** 2) * -np.expm1(-radius2 / band[0] ** 2)
    amplitude = np.sqrt(weight / weight.mean())
    if device is None:
        return amplitude
    import cupy

    with cupy.cuda.Device(device):
        return cupy.asarray(amplitude)


def _whitened_spectrum(image: Any, band: tuple[float, float]) -> Any:
    """Spectrum of ``image`` with unit magnitude, times the square root of the band-pass weight
    (a Gaussian low-pass of width ``band[1]`` times a Gaussian high-pass of width ``band[0]``,
    zero at the mean): the product of two such spectra is the band-limited phase correlation."""
    xp = array_module(image)
    spectrum = xp.fft.fft2(image.astype(xp.float64, copy=False))
    spectrum *= _band_amplitude(tuple(image.shape), band, _device(xp)) / xp.maximum(
        xp.abs(spectrum), 1e-12
    )
    return spectrum


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
    """Translation between two equally shaped 2D images by band-limited phase correlation.

    The images' spectra are whitened and band-passed; the correlation peak is refined to sub-pixel
    precision by the matrix-multiply DFT of Guizar-Sicairos et al. (Opt. Lett. 33, 2008), the
    method of scikit-image's ``phase_cross_correlation``, on the host or on the GPU.

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
        Magnitude of the correlation peak (about 1 for a pure circular shift, near 0 for
        unrelated images, 0 when an image is flat).

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
    fixed_spectrum = _whitened_spectrum(fixed, band)
    moving_spectrum = _whitened_spectrum(xp.asarray(moving), band)
    product = fixed_spectrum * moving_spectrum.conj()
    shift = _refined_shift(product, upsample)
    # |correlation at the shift| over the spectra's norms: scikit-image's invariant error is
    # sqrt(1 - peak^2) (Fienup, 1997)
    powers = [(xp.abs(spectrum) ** 2).sum() for spectrum in (fixed_spectrum, moving_spectrum)]
    norm = math.sqrt(float(powers[0] * powers[1]))
    value = float(xp.abs(_dft_surface(product, shift[:1], shift[1:]))[0, 0])
    return shift, value / norm if norm > 0 else 0.0


@functools.lru_cache(maxsize=64)
def _frequencies(n: int, device: int | None) -> Any:
    """``fftfreq(n)`` on the host or, when ``device`` is not None, on that GPU (asked for at
    every step of every pair's refinement, so kept)."""
    if device is None:
        return np.fft.fftfreq(n)
    import cupy

    with cupy.cuda.Device(device):
        return cupy.fft.fftfreq(n)


def _dft_surface(product: Any, rows: np.ndarray, cols: np.ndarray) -> Any:
    """The inverse DFT of ``product`` (unnormalized) at the positions ``rows`` x ``cols``, in
    pixels and fractions of pixels: the matrix-multiply DFT of Guizar-Sicairos et al. (Opt. Lett.
    33, 2008)."""
    xp = array_module(product)
    row_kernel, col_kernel = (
        xp.exp(2j * np.pi * xp.asarray(positions)[:, None] * _frequencies(n, _device(xp))[None, :])
        for positions, n in zip((rows, cols), product.shape, strict=True)
    )
    return row_kernel @ product @ col_kernel.T


def _dft_peak(
    product: Any, center: np.ndarray, upsample: int, half_width: int, magnitude: bool
) -> np.ndarray:
    """Position of the highest sample, of its magnitude or of its real part, of the inverse DFT
    of ``product`` on the grid of ``1 / upsample`` pixel within ``half_width`` samples of
    ``center``."""
    xp = array_module(product)
    offsets = np.arange(-half_width, half_width + 1) / upsample
    surface = _dft_surface(product, center[0] + offsets, center[1] + offsets)
    surface = xp.abs(surface) if magnitude else surface.real
    index = np.unravel_index(int(surface.argmax()), surface.shape)
    return center + (np.array(index, dtype=np.float64) - half_width) / upsample


def _refined_shift(product: Any, upsample: int) -> np.ndarray:
    """Shift to ``1 / upsample`` pixel from the product of two whitened spectra (the first times
    the second's conjugate): the integer peak of their correlation, then the inverse DFT within
    0.7 pixel of it in 1/10 pixel steps (the 15 x 15 samples of scikit-image's
    ``phase_cross_correlation`` at 10) and within 1/10 pixel of that in ``1 / upsample`` steps
    (21 x 21 samples at 100).

    scikit-image's refinement samples 1.5 pixels at ``1 / upsample``, 150 x 150 samples at 100:
    called for every iteration of every pair, that made the layout estimate slower, and its
    matrix products are large enough to start BLAS threads, which on a busy machine cost more.
    """
    xp = array_module(product)
    shape = np.array(product.shape)
    index = np.array(np.unravel_index(int(xp.abs(xp.fft.ifft2(product)).argmax()), product.shape))
    shift = np.where(index > shape // 2, index - shape, index).astype(np.float64)
    coarse = min(_COARSE_UPSAMPLE, upsample)
    if coarse > 1:
        shift = _dft_peak(product, shift, coarse, math.ceil(1.5 * coarse) // 2, magnitude=True)
    if coarse < upsample:
        shift = _dft_peak(product, shift, upsample, math.ceil(upsample / coarse), magnitude=False)
    return shift


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
    b = xp.asarray(b).astype(xp.float64)
    shape = np.array(a.shape)
    # phase_cross_correlation returns only the highest peak; a background tile's vignetting or a
    # repeated structure can outrank the true one, so the candidates come from several.
    product = _whitened_spectrum(a, band) * _whitened_spectrum(b, band).conj()
    correlation = xp.fft.ifft2(product).real
    best: tuple[float, np.ndarray] | None = None
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


def _in_threads(
    function: Callable[[Any], PairMeasurement],
    items: Sequence[Any],
    threads: int,
    done: Callable[[], Any],
) -> list[PairMeasurement]:
    """``function`` of every item, in order, from a pool of ``threads`` (or this thread alone);
    ``done`` after each.

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


def _fft_length(n: int) -> int:
    """``n`` rounded down to a multiple of 16 when that keeps more than 7/8 of it."""
    return n if n < 128 else n // 16 * 16


def _resample_span(start: int, stop: int, size: int) -> tuple[slice, slice]:
    """The span of a tile's axis to resample for its overlap ``start:stop``, and the overlap
    within that span.

    The span has a margin of at least ``_RESAMPLE_MARGIN`` pixels where the tile has them (the
    cubic spline prefilter's influence falls by 0.27 per pixel, so the overlap is resampled as
    if the whole tile were) and a length that is a multiple of ``_RESAMPLE_STEP`` or the whole
    axis: cupyx.scipy.ndimage compiles its shift kernel for each output shape, so pairs of
    slightly different overlaps share a few shapes, hence a few compiled kernels.
    """
    begin, end = max(start - _RESAMPLE_MARGIN, 0), min(stop + _RESAMPLE_MARGIN, size)
    length = -(-(end - begin) // _RESAMPLE_STEP) * _RESAMPLE_STEP
    if length >= size:
        begin, end = 0, size
    else:
        end = min(begin + length, size)
        begin = end - length
    return slice(begin, end), slice(start - begin, stop - begin)


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
    view_a, _ = _overlap_views(a, b, coarse)
    dy, dx = (int(d) for d in coarse)
    (ys, y_inner), (xs, x_inner) = (
        _resample_span(max(-d, 0), n + min(-d, 0), n)
        for d, n in ((dy, b.shape[0]), (dx, b.shape[1]))
    )
    block, inner = b[ys, xs], (y_inner, x_inner)
    # Leave out the border, where resampling extrapolates when the overlap reaches b's edge, and
    # trim long sides to a multiple of 16 pixels: pairs then share a few FFT shapes (the GPU's
    # cuFFT plans stay in cupy's plan cache of 16).
    crop = tuple(slice(2, 2 + _fft_length(n - 4)) for n in view_a.shape)
    fixed = view_a[crop]
    fraction = np.zeros(2)
    if min(fixed.shape) < 4:
        return fraction
    fixed_spectrum = _whitened_spectrum(fixed, band)
    for _ in range(_SUBPIXEL_ITERATIONS):
        shifted = (
            ndimage.shift(block, tuple(fraction), order=3, mode="nearest")
            if fraction.any()
            else block
        )
        moving_spectrum = _whitened_spectrum(shifted[inner][crop], band)
        residual = _refined_shift(fixed_spectrum * moving_spectrum.conj(), upsample)
        fraction += residual
        if np.abs(residual).max() < 0.5 / upsample:
            break
    return fraction


@phases.recorded("registration")
def estimate_transform(
    aip_grid: Any,
    tile_shape: Sequence[int],
    *,
    min_score: float = 0.3,
    min_overlap: float = 0.05,
    upsample: int = 100,
    progress: bool = False,
    threads: int | None = None,
) -> tuple[TileTransform, list[PairMeasurement]]:
    """Estimate the tile layout of a mosaic grid from its 2D projection.

    On the CPU the pairs are registered in ``threads`` threads (numpy's FFTs and scipy's
    resampling release the GIL), with one BLAS thread each; on the GPU one after another.

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
    threads
        Pairs registered at once on the CPU; the CPUs available to the process by default.

    Returns
    -------
    transform
        The fitted layout, normalized so the smallest tile position is 0.
    measurements
        Every pair measured, reliable or not.

    Examples
    --------
    The layout of a small synthetic 2x3 mosaic grid, from its average intensity projection:

    >>> from linumpy.mosaic.demo import generate_demo_mosaic
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

    def measure(pair: tuple[tuple[int, int], tuple[int, int]]) -> PairMeasurement:
        first, second = pair
        axis = 0 if second[0] != first[0] else 1
        displacement, score = measure_pair(
            tile(first), tile(second), min_overlap=min_overlap, upsample=upsample, axis=axis
        )
        return PairMeasurement(first, second, tuple(displacement.tolist()), score)

    threads = available_cpus() if threads is None else threads
    if array_module(aip_grid) is not np:
        threads = 1  # cupy's calls hold the GIL between short kernels: no gain in threads
    with tqdm(total=len(pairs), desc="tile pairs", unit="pair", disable=not progress) as bar:
        measurements = _in_threads(measure, pairs, threads, bar.update)
    transform = fit_transform(measurements, (h, w), grid_shape, min_score=min_score)
    return transform, measurements
