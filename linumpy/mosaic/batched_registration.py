"""Every tile pair of a mosaic registered at once on the GPU (or, to check it, with numpy).

The steps of :func:`linumpy.mosaic.registration.measure_pair`, each for many pairs per call: a
pair on the GPU is a few dozen short kernels, each waited for by the host; batched, a mosaic's
registration waits a few dozen times in all. The results agree with the host's to 0.01 pixel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from linumpy._numpy_or_cupy import array_module, ndimage_module, to_numpy
from linumpy.mosaic.pair_geometry import (
    SUBPIXEL_ITERATIONS,
    SubpixelParts,
    candidate_displacements,
    overlap_ncc,
    overlap_views,
    subpixel_parts,
    wrapped_peak,
)
from linumpy.mosaic.phase_correlation import DEFAULT_BAND, refined_shifts, whitened_spectrum

__all__: list[str] = []

#: Correlation peaks tried for each pair (the highest can be a background tile's vignetting).
N_PEAKS = 4
#: Bytes of complex pair products computed at once (pairs are taken in batches of that size).
BATCH_BYTES = 256 << 20

_BLOCK = 256
# One block per candidate overlap (tile a, tile b, dy, dx: b sits at (dy, dx) from a): the sums
# of the overlap's centred products, with the means from a first pass, as the host's NCC.
_MOMENTS_SOURCE = r"""
extern "C" __global__ void overlap_moments(
    const double* tiles, const int* candidates, const int h, const int w, double* moments)
{
    __shared__ double shared[3][256];
    const int* c = candidates + 4 * blockIdx.x;
    const double* a = tiles + (long long)c[0] * h * w;
    const double* b = tiles + (long long)c[1] * h * w;
    const int dy = c[2], dx = c[3];
    const int cols = w - abs(dx);
    const int ay = max(dy, 0), ax = max(dx, 0), by = max(-dy, 0), bx = max(-dx, 0);
    const long long n = (long long)(h - abs(dy)) * cols;
    const int t = threadIdx.x;
    double sum_a = 0.0, sum_b = 0.0;
    for (long long i = t; i < n; i += blockDim.x) {
        const int y = (int)(i / cols), x = (int)(i % cols);
        sum_a += a[(long long)(ay + y) * w + ax + x];
        sum_b += b[(long long)(by + y) * w + bx + x];
    }
    shared[0][t] = sum_a;
    shared[1][t] = sum_b;
    __syncthreads();
    for (int step = blockDim.x / 2; step > 0; step >>= 1) {
        if (t < step) {
            shared[0][t] += shared[0][t + step];
            shared[1][t] += shared[1][t + step];
        }
        __syncthreads();
    }
    const double mean_a = shared[0][0] / n, mean_b = shared[1][0] / n;
    __syncthreads();
    double aa = 0.0, bb = 0.0, ab = 0.0;
    for (long long i = t; i < n; i += blockDim.x) {
        const int y = (int)(i / cols), x = (int)(i % cols);
        const double da = a[(long long)(ay + y) * w + ax + x] - mean_a;
        const double db = b[(long long)(by + y) * w + bx + x] - mean_b;
        aa += da * da;
        bb += db * db;
        ab += da * db;
    }
    shared[0][t] = ab;
    shared[1][t] = aa;
    shared[2][t] = bb;
    __syncthreads();
    for (int step = blockDim.x / 2; step > 0; step >>= 1) {
        if (t < step) {
            shared[0][t] += shared[0][t + step];
            shared[1][t] += shared[1][t + step];
            shared[2][t] += shared[2][t + step];
        }
        __syncthreads();
    }
    if (t == 0) {
        moments[3 * blockIdx.x] = shared[0][0];
        moments[3 * blockIdx.x + 1] = shared[1][0];
        moments[3 * blockIdx.x + 2] = shared[2][0];
    }
}
"""


def register_pairs(
    tiles: Any,
    pairs: np.ndarray,
    axes: Sequence[int | None],
    *,
    min_overlap: float = 0.05,
    upsample: int = 100,
    refine_from: float | None = None,
    done: Callable[[int], Any] | None = None,
) -> list[tuple[np.ndarray, float]]:
    """Displacement and score of each pair (indices of tiles ``a`` and ``b`` in ``tiles``, a
    float64 ``(n, h, w)`` cupy or numpy stack) as ``measure_pair`` gives them; ``axes``: each
    pair's axis, or None; ``done`` is called with the count of pairs each time more are done."""
    shape = tiles.shape[1:]
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if not len(pairs):
        return []
    peaks = _peaks(tiles, pairs, N_PEAKS)
    candidates: list[tuple[int, int, int, int]] = []
    owners: list[int] = []
    for index, ((first, second), axis) in enumerate(zip(pairs.tolist(), axes, strict=True)):
        for peak in peaks[index]:
            for displacement in candidate_displacements(peak, shape, min_overlap, axis):
                candidates.append((first, second, *displacement))
                owners.append(index)
    scores = _overlap_scores(tiles, candidates)
    best: dict[int, int] = {}
    for position, owner in enumerate(owners):  # the first of equal scores, as measure_pair
        if owner not in best or scores[position] > scores[best[owner]]:
            best[owner] = position
    results = [(np.zeros(2), 0.0)] * len(pairs)
    groups: dict[tuple[int, ...], list[tuple[int, np.ndarray, SubpixelParts]]] = {}
    for owner, position in best.items():
        coarse = np.array(candidates[position][2:], dtype=np.float64)
        results[owner] = (coarse, float(scores[position]))
        if refine_from is not None and scores[position] < refine_from:
            continue
        parts = subpixel_parts(shape, coarse)
        if parts is not None:
            groups.setdefault(parts.key, []).append((owner, coarse, parts))
    if done is not None:
        done(len(pairs) - sum(len(members) for members in groups.values()))
    for members in groups.values():
        fixed = [tiles[pairs[owner, 0]][parts.fixed] for owner, _, parts in members]
        blocks = [tiles[pairs[owner, 1]][parts.block] for owner, _, parts in members]
        fractions = refine_subpixel(fixed, blocks, members[0][2].moving, upsample)
        for (owner, coarse, _), fraction in zip(members, fractions, strict=True):
            results[owner] = (coarse + fraction, results[owner][1])
        if done is not None:
            done(len(members))
    return results


def _peaks(tiles: Any, pairs: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` highest local peaks of each pair's whole-tile correlation, highest first,
    as shifts in ``(-n/2, n/2]``: ``(p, count, 2)``."""
    xp = array_module(tiles)
    h, w = tiles.shape[1:]
    per_batch = max(1, BATCH_BYTES // (h * w * 16))
    found = []
    for start in range(0, len(pairs), per_batch):
        batch = pairs[start : start + per_batch]
        used, inverse = np.unique(batch, return_inverse=True)
        spectra = whitened_spectrum(tiles[xp.asarray(used)], DEFAULT_BAND)
        inverse = xp.asarray(inverse.reshape(-1, 2))
        products = spectra[inverse[:, 0]] * spectra[inverse[:, 1]].conj()
        del spectra
        found.append(top_peaks(xp.fft.ifft2(products).real, count))
        del products
    return np.concatenate(found)


def top_peaks(correlations: Any, count: int) -> np.ndarray:
    """The ``count`` highest local peaks ``(p, count, 2)`` of a stack of circular correlations
    ``(p, h, w)``, as shifts in ``(-n/2, n/2]``: each the highest sample once 5 x 5 samples
    around the ones found before are left out."""
    xp = array_module(correlations)
    n, h, w = correlations.shape
    surface = correlations.copy().reshape(n, -1)
    offsets = xp.arange(-2, 3)
    rows = xp.arange(n)[:, None, None]
    found = []
    for _ in range(count):
        flat = surface.argmax(axis=1)
        found.append(flat)
        ys = (flat // w)[:, None] + offsets
        xs = (flat % w)[:, None] + offsets
        surface[rows, (ys % h)[:, :, None] * w + (xs % w)[:, None, :]] = -xp.inf
    flat = to_numpy(xp.stack(found, axis=1))
    return wrapped_peak(np.stack(np.unravel_index(flat, (h, w)), axis=-1), (h, w))


def _overlap_scores(tiles: Any, candidates: list[tuple[int, int, int, int]]) -> np.ndarray:
    """Normalized cross-correlation of the overlap of each candidate ``(a, b, dy, dx)``."""
    if not candidates:
        return np.zeros(0)
    xp = array_module(tiles)
    if xp is np:
        return np.array(
            [overlap_ncc(*overlap_views(tiles[a], tiles[b], d)) for a, b, *d in candidates]
        )
    from linumpy.gpu.kernel_cache import raw_kernel

    h, w = tiles.shape[1:]
    table = xp.asarray(np.array(candidates, dtype=np.int32))
    moments = xp.empty((len(candidates), 3), dtype=np.float64)
    kernel = raw_kernel(_MOMENTS_SOURCE, "overlap_moments")
    kernel(
        (len(candidates),),
        (_BLOCK,),
        (xp.ascontiguousarray(tiles, dtype=np.float64), table, np.int32(h), np.int32(w), moments),
    )
    ab, aa, bb = moments.get().T
    norm = np.sqrt(aa * bb)
    return np.divide(ab, norm, out=np.zeros_like(ab), where=norm > 0)


def refine_subpixel(
    fixed: Sequence[Any],
    blocks: Sequence[Any],
    moving: tuple[slice, slice],
    upsample: int,
) -> np.ndarray:
    """The sub-pixel part ``(g, 2)`` of the displacement of ``g`` pairs whose parts
    (:class:`~linumpy.mosaic.pair_geometry.SubpixelParts`) share one shape.

    Phase correlation of two crops underestimates a sub-pixel shift (the crops' edges correlate at
    zero shift), so each block is resampled by its current estimate and the residual measured
    again until it vanishes.
    """
    xp = array_module(fixed[0])
    ndimage = ndimage_module(xp)
    fixed_spectra = whitened_spectrum(xp.stack(list(fixed)), DEFAULT_BAND)
    fractions = np.zeros((len(blocks), 2))
    active = np.arange(len(blocks))
    shifted = [block[moving] for block in blocks]
    for iteration in range(SUBPIXEL_ITERATIONS):
        for i in active if iteration else ():
            shifted[i] = ndimage.shift(blocks[i], tuple(fractions[i]), order=3, mode="nearest")
            shifted[i] = shifted[i][moving]
        # every pair is correlated at each step, converged or not: a stack of one size keeps
        # one cuFFT plan for the whole refinement (a plan per size would cost more than the FFTs)
        products = fixed_spectra * whitened_spectrum(xp.stack(shifted), DEFAULT_BAND).conj()
        residual = refined_shifts(products, upsample)[active]
        fractions[active] += residual
        active = active[np.abs(residual).max(axis=1) >= 0.5 / upsample]
        if not active.size:
            break
    return fractions
