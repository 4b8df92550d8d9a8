"""The 2x mean of OME-Zarr pyramid levels, on numpy or cupy arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from linumpy._numpy_or_cupy import array_module

__all__ = ["downsample_mean"]

#: Input bytes a host array is halved in at once: temporaries that stay in cache and are reused.
_SLAB_BYTES = 2**20


def _sum_dtype(dtype: np.dtype, n_axes: int) -> np.dtype | None:
    """The integer dtype that holds the exact sum of ``2 ** n_axes`` values of ``dtype``, or None
    when only float64 does (64-bit integers)."""
    if dtype.kind == "b":
        return np.dtype(np.uint8 if n_axes < 8 else np.uint32)
    if dtype.kind not in "iu" or dtype.itemsize > 4:
        return None
    bits = 8 * dtype.itemsize + n_axes
    if bits <= 31:
        return np.dtype(np.int32 if dtype.kind == "i" else np.uint32)
    return np.dtype(np.int64)


def _pair_sums(array: Any, axis: int, dtype: Any) -> Any:
    """Sums of neighbouring pairs along ``axis`` in ``dtype``, an odd last element paired with
    itself, computed without copying the input."""
    xp = array_module(array)
    size = array.shape[axis]
    half = size // 2
    shape = list(array.shape)
    shape[axis] = -(-size // 2)
    out = xp.empty(shape, dtype=dtype)

    def at(index: slice) -> tuple[slice, ...]:
        where = [slice(None)] * array.ndim
        where[axis] = index
        return tuple(where)

    xp.add(
        array[at(slice(0, 2 * half, 2))],
        array[at(slice(1, 2 * half, 2))],
        out=out[at(slice(0, half))],
        dtype=dtype,
    )
    if size % 2:
        last = array[at(slice(size - 1, size))]
        xp.add(last, last, out=out[at(slice(half, half + 1))], dtype=dtype)
    return out


def downsample_mean(array: Any, axes: Sequence[int] | None = None) -> Any:
    """Halve the ``axes`` longer than 1 (all by default) by averaging pairs, as OME-Zarr pyramid
    levels are built.

    An odd last element is paired with itself. Floats are averaged pair by pair in their own
    precision, axis after axis; integers exactly (summed in a wider integer type), then rounded
    half to even. Booleans come out True where at least half the values are.

    Examples
    --------
    >>> import numpy as np
    >>> downsample_mean(np.array([[1, 2, 3], [5, 6, 7]], dtype=np.uint8))
    array([[4, 5]], dtype=uint8)
    >>> downsample_mean(np.array([1.0, 2.0, 4.0, 8.0]))
    array([1.5, 6. ])
    >>> downsample_mean(np.array([[1.0, 3.0], [5.0, 7.0]]), axes=[1])  # channels stay apart
    array([[2.],
           [6.]])
    >>> downsample_mean(np.array([1, 2, 2, 3, -3, -2], dtype=np.int16))  # halves to even
    array([ 2,  2, -2], dtype=int16)
    """
    xp = array_module(array)
    shrink = [a for a in (range(array.ndim) if axes is None else axes) if array.shape[a] > 1]
    if not shrink:
        return array.copy()
    if xp is not np or array.ndim < 2 or array.nbytes <= 2 * _SLAB_BYTES:
        return _downsample(array, shrink)
    # slabs of an even number of planes give the same pairs, and their temporaries stay small
    shape = [-(-n // 2) if axis in shrink else n for axis, n in enumerate(array.shape)]
    out = np.empty(shape, dtype=array.dtype)
    step = max(2, _SLAB_BYTES // max(1, array[0].nbytes) // 2 * 2)
    for start in range(0, array.shape[0], step):
        part = _downsample(array[start : start + step], shrink)
        first = start // 2 if 0 in shrink else start
        out[first : first + part.shape[0]] = part
    return out


def _downsample(array: Any, shrink: Sequence[int]) -> Any:
    """:func:`downsample_mean` along ``shrink`` (axes longer than 1), in one piece."""
    dtype = array.dtype
    total = _sum_dtype(dtype, len(shrink))
    if total is None:
        work = array if dtype.kind in "fc" else array.astype(np.float64)
        half = work.dtype.type(0.5)
        for axis in shrink:
            work = _pair_sums(work, axis, work.dtype)
            work *= half
        if dtype.kind in "fc":
            return work
        xp = array_module(array)
        info = np.iinfo(dtype)
        return xp.clip(xp.rint(work), info.min, info.max).astype(dtype)
    sums = array
    for axis in shrink:
        sums = _pair_sums(sums, axis, total)
    shift = len(shrink)
    if dtype.kind == "b":
        return sums >= (1 << (shift - 1))
    # sums / 2**shift rounded half to even: floor((sums + half - 1 + odd quotient) / 2**shift)
    rounded = sums >> shift
    rounded &= 1
    rounded += sums
    rounded += (1 << (shift - 1)) - 1
    rounded >>= shift
    return rounded.astype(dtype)
