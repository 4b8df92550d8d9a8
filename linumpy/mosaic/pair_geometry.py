"""Where two tiles of a pair overlap, for the registration one pair at a time and in batches.

Both registrations (:mod:`linumpy.mosaic.registration`, pair by pair on numpy or cupy, and
:mod:`linumpy.mosaic.batched_registration`, every pair at once on the GPU) take the same
candidates from a correlation peak and refine the same parts of the two tiles, so that they agree
to the hundredth of a pixel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from linumpy._numpy_or_cupy import array_module

__all__ = ["candidate_displacements", "overlap_views"]

#: At most this many resample-and-correlate steps refine a pair's sub-pixel displacement.
SUBPIXEL_ITERATIONS = 8
_RESAMPLE_MARGIN = 8
_RESAMPLE_STEP = 32


def wrapped_peak(index: Any, shape: Sequence[int]) -> Any:
    """A circular correlation's peak at ``index`` (the last axis; numpy or cupy) as a shift in
    ``(-n/2, n/2]`` per axis."""
    xp = array_module(index)
    index, shape = xp.asarray(index), xp.asarray(shape)
    return xp.where(index > shape // 2, index - shape, index).astype(xp.float64)


def candidate_displacements(
    peak: np.ndarray, shape: Sequence[int], min_overlap: float, axis: int | None
) -> list[tuple[int, int]]:
    """The displacements of tile ``b`` from tile ``a`` that a circular correlation peak allows,
    in the order they are tried.

    ``b[y, x] ~ a[y + d, x + d]`` makes the circular shift ``d`` modulo the tile size, so each
    axis has two candidates; those whose overlap is below ``min_overlap`` of the tile's area, or
    (with ``axis``) not mostly along ``axis``, are left out.

    Examples
    --------
    A peak 12 pixels left of the origin in 64 x 64 tiles: ``b`` 52 pixels right of ``a`` (or 12
    left), and, at the same row, nothing else for a right neighbour:

    >>> import numpy as np
    >>> from linumpy.mosaic.pair_geometry import candidate_displacements
    >>> candidate_displacements(np.array([0.0, -12.0]), (64, 64), 0.05, axis=1)
    [(0, 52), (0, -12)]
    """
    h, w = (int(n) for n in shape)
    base = np.mod(peak, (h, w)).astype(int)
    found = []
    for dy in (int(base[0]), int(base[0]) - h):
        for dx in (int(base[1]), int(base[1]) - w):
            if (h - abs(dy)) * (w - abs(dx)) < min_overlap * h * w:
                continue
            if axis is not None and abs((dy, dx)[axis]) < abs((dy, dx)[1 - axis]):
                continue
            found.append((dy, dx))
    return found


def overlap_slices(shape: Sequence[int], displacement: Sequence[int]) -> tuple[tuple, tuple]:
    """The slices of tiles ``a`` and ``b`` (of ``shape``) that see the same place when ``b``
    sits at ``displacement`` (integer pixels) from ``a``."""
    (dy, dx), (h, w) = (int(d) for d in displacement), (int(n) for n in shape)
    in_a = (slice(max(dy, 0), h + min(dy, 0)), slice(max(dx, 0), w + min(dx, 0)))
    in_b = (slice(max(-dy, 0), h + min(-dy, 0)), slice(max(-dx, 0), w + min(-dx, 0)))
    return in_a, in_b


def overlap_views(a: Any, b: Any, displacement: Sequence[int]) -> tuple[Any, Any]:
    """The parts of tiles ``a`` and ``b`` that see the same place when ``b`` sits at
    ``displacement`` (integer pixels) from ``a``.

    Examples
    --------
    >>> import numpy as np
    >>> from linumpy.mosaic.pair_geometry import overlap_views
    >>> scene = np.arange(8 * 12).reshape(8, 12)
    >>> in_a, in_b = overlap_views(scene[:, :8], scene[:, 4:], (0, 4))
    >>> in_a.shape, bool((in_a == in_b).all())
    ((8, 4), True)
    """
    in_a, in_b = overlap_slices(a.shape, displacement)
    return a[in_a], b[in_b]


def overlap_ncc(a: Any, b: Any) -> float:
    """Normalized cross-correlation of two equally shaped overlaps (0 when one is flat)."""
    xp = array_module(a)
    a = a - a.mean()
    b = b - b.mean()
    norm = float(xp.sqrt((a * a).sum() * (b * b).sum()))
    return float((a * b).sum()) / norm if norm > 0 else 0.0


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


@dataclass(frozen=True)
class SubpixelParts:
    """The parts of a pair's tiles that refine its displacement near an integer one.

    Attributes
    ----------
    fixed
        Slices of tile ``a``: its overlap without a 2-pixel border, long sides trimmed to a
        multiple of 16 pixels (pairs then share a few FFT shapes, so the GPU's cuFFT plans stay
        in cupy's plan cache).
    block
        Slices of tile ``b`` that are resampled.
    moving
        Slices of the resampled block that correspond to ``fixed``.
    """

    fixed: tuple[slice, slice]
    block: tuple[slice, slice]
    moving: tuple[slice, slice]

    @property
    def key(self) -> tuple[int, ...]:
        """Equal for pairs whose parts have the same shapes and relative positions."""
        (ys, xs), (my, mx) = self.block, self.moving
        return (ys.stop - ys.start, xs.stop - xs.start, my.start, my.stop, mx.start, mx.stop)


def subpixel_parts(shape: Sequence[int], coarse: Sequence[int]) -> SubpixelParts | None:
    """The :class:`SubpixelParts` of a pair of tiles of ``shape`` at the integer displacement
    ``coarse``, or None when the overlap is too thin to refine (under 4 pixels once trimmed)."""
    in_a, _ = overlap_slices(shape, coarse)
    dy, dx = (int(d) for d in coarse)
    h, w = (int(n) for n in shape)
    (ys, y_inner), (xs, x_inner) = (
        _resample_span(max(-d, 0), n + min(-d, 0), n) for d, n in ((dy, h), (dx, w))
    )
    lengths = [_fft_length(part.stop - part.start - 4) for part in in_a]
    if min(lengths) < 4:
        return None
    fixed = tuple(slice(part.start + 2, part.start + 2 + n) for part, n in zip(in_a, lengths))
    moving = tuple(
        slice(inner.start + 2, inner.start + 2 + n) for inner, n in zip((y_inner, x_inner), lengths)
    )
    return SubpixelParts(fixed, (ys, xs), moving)
