"""downsample_mean: exact integer means, float pairs in their own precision, slabs as whole."""

from __future__ import annotations

import numpy as np
import pytest

from linumpy.io import downsample_mean


def _float64_mean(array: np.ndarray, axes: list[int]) -> np.ndarray:
    """The reference: pairs averaged in float64 (exact for these integers), the odd last element
    paired with itself, then rounded half to even."""
    work = array.astype(np.float64)
    for axis in axes:
        if work.shape[axis] % 2:
            work = np.concatenate([work, np.take(work, [-1], axis=axis)], axis=axis)
        even = np.take(work, np.arange(0, work.shape[axis], 2), axis=axis)
        odd = np.take(work, np.arange(1, work.shape[axis], 2), axis=axis)
        work = (even + odd) / 2
    return work


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32])
@pytest.mark.parametrize("shape", [(7, 9, 11), (8, 10, 12), (1, 5, 6), (5,)])
def test_integers_are_exact_means_rounded_half_to_even(dtype, shape) -> None:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(1)
    volume = rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    axes = [a for a in range(len(shape)) if shape[a] > 1]
    expected = np.clip(np.rint(_float64_mean(volume, axes)), info.min, info.max).astype(dtype)
    result = downsample_mean(volume)
    assert result.dtype == dtype
    np.testing.assert_array_equal(result, expected)


def test_ties_go_to_even_and_extremes_stay_in_range() -> None:
    pairs = np.array([1, 2, 2, 3, -3, -2, -5, -4], dtype=np.int16)
    np.testing.assert_array_equal(downsample_mean(pairs), [2, 2, -2, -4])
    top = np.full((3, 3, 3), 65535, dtype=np.uint16)
    assert (downsample_mean(top) == 65535).all()


@pytest.mark.parametrize("dtype", [np.uint16, np.float32, np.int64, np.bool_])
def test_slabs_of_a_large_array_equal_the_whole(dtype) -> None:
    rng = np.random.default_rng(2)
    volume = rng.random((13, 601, 599)) * 3000
    volume = (volume > 1500) if np.dtype(dtype).kind == "b" else volume.astype(dtype)
    assert volume.nbytes > 2**21  # halved in slabs
    axes = [0, 1, 2]
    whole = downsample_mean(volume[:2], axes)
    result = downsample_mean(volume, axes)
    assert result.shape == (7, 301, 300)
    np.testing.assert_array_equal(result[:1], whole)
    if np.dtype(dtype).kind == "f":  # float pairs: one axis after the other, in float32
        work = volume
        for axis in axes:
            if work.shape[axis] % 2:
                work = np.concatenate([work, np.take(work, [-1], axis=axis)], axis=axis)
            work = (
                work.take(range(0, work.shape[axis], 2), axis)
                + work.take(range(1, work.shape[axis], 2), axis)
            ) * np.float32(0.5)
        np.testing.assert_array_equal(result, work)
    elif np.dtype(dtype).kind == "b":
        np.testing.assert_array_equal(result, _float64_mean(volume, axes) >= 0.5)
    else:
        np.testing.assert_array_equal(result, np.rint(_float64_mean(volume, axes)).astype(dtype))


def test_channels_stay_apart() -> None:
    volume = np.arange(2 * 4 * 4, dtype=np.uint16).reshape(2, 4, 4)
    result = downsample_mean(volume, axes=[1, 2])
    assert result.shape == (2, 2, 2)
    np.testing.assert_array_equal(result[1], downsample_mean(volume[1]))


@pytest.mark.gpu
def test_device_arrays_equal_host_arrays() -> None:
    import cupy as cp

    rng = np.random.default_rng(3)
    for dtype in (np.uint16, np.int16, np.float32):
        volume = (rng.random((9, 65, 67)) * 3000).astype(dtype)
        result = cp.asnumpy(downsample_mean(cp.asarray(volume)))
        np.testing.assert_array_equal(result, downsample_mean(volume))
