"""The 2x mean of OME-Zarr pyramid levels, on numpy or cupy arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from linumpy._numpy_or_cupy import array_module

__all__ = ["downsample_mean"]


def downsample_mean(array: Any, axes: Sequence[int] | None = None) -> Any:
    """Halve the ``axes`` longer than 1 (all by default) by averaging pairs, as OME-Zarr pyramid
    levels are built.

    An odd last element is paired with itself. Floats are averaged in their own precision;
    integers in float64, then rounded (half to even) and clipped to their dtype.

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
    """
    xp = array_module(array)
    dtype = array.dtype
    work = array if dtype.kind in "fc" else array.astype(xp.float64)
    half = work.dtype.type(0.5)
    for axis in range(work.ndim) if axes is None else axes:
        size = work.shape[axis]
        if size < 2:
            continue
        if size % 2:
            last = [slice(None)] * work.ndim
            last[axis] = slice(size - 1, size)
            work = xp.concatenate([work, work[tuple(last)]], axis=axis)
        even = [slice(None)] * work.ndim
        odd = [slice(None)] * work.ndim
        even[axis] = slice(0, None, 2)
        odd[axis] = slice(1, None, 2)
        work = (work[tuple(even)] + work[tuple(odd)]) * half
    if dtype.kind in "fc":
        return work
    if dtype.kind == "b":
        return work >= 0.5
    info = np.iinfo(dtype)
    return xp.clip(xp.round(work), info.min, info.max).astype(dtype)
