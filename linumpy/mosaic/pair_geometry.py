"""Where two tiles of a pair overlap: the candidates and parts both registrations (pair by
pair, and batched on the GPU) share, so that they agree to the hundredth of a pixel."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from linumpy._numpy_or_cupy import array_module

__all__: list[str] = []

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
    in the order they are tried: two per axis (the shift is known modulo the tile size), less
    those overlapping under ``min_overlap`` of the tile or (with ``axis``) not mostly along it."""
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
    ``displacement`` (integer pixels) from ``a``."""
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

    A margin of ``_RESAMPLE_MARGIN`` pixels where the tile has them (the cubic spline
    prefilter's influence falls by 0.27 per pixel), and a length a multiple of
    ``_RESAMPLE_STEP`` or the whole axis: cupyx.scipy.ndimage compiles its shift kernel for each
    output shape, so pairs of slightly different overlaps share a few compiled kernels.
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
    """The parts of a pair's tiles that refine its displacement near an integer one: ``fixed``,
    tile ``a``'s overlap less a 2-pixel border, long sides trimmed to a multiple of 16 (a few
    FFT shapes, whose cuFFT plans stay cached); ``block``, tile ``b``'s part that is resampled;
    ``moving``, the resampled block's part matching ``fixed``."""

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
