"""Band-limited phase correlation, on numpy or cupy arrays alike.

The spectra are whitened and band-passed; the correlation peak is refined to sub-pixel precision by
the matrix-multiply DFT of Guizar-Sicairos et al. (Opt. Lett. 33, 2008), as scikit-image's
``phase_cross_correlation`` does, with a cheaper last step. A refinement calls no library function
that computes more than it uses: on the GPU every operation is a kernel launch.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from linumpy._numpy_or_cupy import array_module, to_numpy
from linumpy.errors import LinumpyError
from linumpy.mosaic.pair_geometry import wrapped_peak

__all__: list[str] = []

#: Default pass band of the phase correlation, in cycles per pixel: below it, illumination and
#: vignetting; above it, detector noise that no two acquisitions share.
DEFAULT_BAND = (0.01, 0.25)
_COARSE_UPSAMPLE = 10


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


def whitened_spectrum(image: Any, band: tuple[float, float]) -> Any:
    """Spectrum of ``image`` (or of each of a stack) of unit magnitude, times the square root of
    the band-pass weight: the product of two such spectra is the band-limited phase correlation."""
    xp = array_module(image)
    spectrum = xp.fft.fft2(image.astype(xp.float64, copy=False))
    spectrum *= _band_amplitude(tuple(image.shape[-2:]), band, _device(xp)) / xp.maximum(
        xp.abs(spectrum), 1e-12
    )
    return spectrum


def check_pair(fixed: Any, moving: Any) -> None:
    """Refuse images that are not two 2D images of one shape."""
    if fixed.shape != moving.shape or fixed.ndim != 2:
        raise LinumpyError(f"need two 2D images of one shape, got {fixed.shape} and {moving.shape}")


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
    """The inverse DFT of each of a stack of products ``(n, h, w)`` (unnormalized) at the
    positions ``rows[i]`` x ``cols[i]`` (``(n, r)`` and ``(n, c)``), in fractions of pixels."""
    xp = array_module(product)
    row_kernel, col_kernel = (
        xp.exp(2j * np.pi * xp.asarray(positions)[:, :, None] * _frequencies(n, _device(xp)))
        for positions, n in zip((rows, cols), product.shape[-2:], strict=True)
    )
    return row_kernel @ product @ col_kernel.transpose(0, 2, 1)


def _argmax_each(surfaces: Any) -> Any:
    """Index ``(i, j)`` of the highest sample of each of a stack of 2D surfaces, as ``(n, 2)``
    (on the surfaces' device: the refinement waits for the GPU once, at its end)."""
    xp = array_module(surfaces)
    flat = surfaces.reshape(len(surfaces), -1).argmax(axis=1)
    return xp.stack((flat // surfaces.shape[2], flat % surfaces.shape[2]), axis=1)


def _dft_peaks(product: Any, centers: Any, upsample: int, half_width: int, magnitude: bool) -> Any:
    """Position of the highest sample, of its magnitude or of its real part, of the inverse DFT
    of each of a stack of products on the grid of ``1 / upsample`` pixel within ``half_width``
    samples of its ``centers`` row."""
    xp = array_module(product)
    offsets = xp.arange(-half_width, half_width + 1, dtype=xp.float64) / upsample
    surface = _dft_surface(product, centers[:, :1] + offsets, centers[:, 1:] + offsets)
    surface = xp.abs(surface) if magnitude else surface.real
    return centers + (_argmax_each(surface) - half_width) / upsample


def refined_shifts(products: Any, upsample: int) -> np.ndarray:
    """Shifts ``(n, 2)`` to ``1 / upsample`` pixel from a stack of products of two whitened
    spectra: the integer peak of each correlation, then the inverse DFT within 0.7 pixel of it in
    1/10 pixel steps and within 1/10 pixel of that in ``1 / upsample`` steps (21 x 21 samples,
    where scikit-image samples 150 x 150: large enough matrix products to start BLAS threads).
    """
    xp = array_module(products)
    shifts = wrapped_peak(_argmax_each(xp.abs(xp.fft.ifft2(products))), products.shape[-2:])
    coarse = min(_COARSE_UPSAMPLE, upsample)
    if coarse > 1:
        shifts = _dft_peaks(products, shifts, coarse, math.ceil(1.5 * coarse) // 2, magnitude=True)
    if coarse < upsample:
        shifts = _dft_peaks(
            products, shifts, upsample, math.ceil(upsample / coarse), magnitude=False
        )
    return to_numpy(shifts)
