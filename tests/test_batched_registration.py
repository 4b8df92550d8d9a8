"""Every pair at once (linumpy.mosaic.batched_registration) against one pair at a time."""

from __future__ import annotations

import numpy as np
import pytest

from linumpy.mosaic import batched_registration
from linumpy.mosaic.batched_registration import register_pairs
from linumpy.mosaic.demo import generate_demo_mosaic
from linumpy.mosaic.pair_geometry import overlap_ncc, overlap_views
from linumpy.mosaic.registration import measure_pair

TILE = 64


@pytest.fixture(scope="module")
def tiles() -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The float64 tiles of a 4 x 5 demo grid's projection, its pairs and their axes."""
    demo = generate_demo_mosaic(grid_shape=(4, 5), tile_shape=(16, TILE, TILE))
    aip = demo.mosaic.mean(axis=0)
    stack = aip.reshape(4, TILE, 5, TILE).transpose(0, 2, 1, 3).reshape(20, TILE, TILE)
    pairs, axes = [], []
    for row in range(4):
        for col in range(5):
            for dr, dc, axis in ((0, 1, 1), (1, 0, 0)):
                if row + dr < 4 and col + dc < 5:
                    pairs.append((row * 5 + col, (row + dr) * 5 + col + dc))
                    axes.append(axis)
    return stack.astype(np.float64), np.array(pairs), axes


def _one_at_a_time(stack, pairs, axes, **options):
    return [
        measure_pair(stack[a], stack[b], axis=axis, **options)
        for (a, b), axis in zip(pairs, axes, strict=True)
    ]


def _register(stack, pairs, axes, **options):
    options = {"min_overlap": 0.05, "upsample": 100, **options}
    return register_pairs(stack, pairs, axes, **options)


def test_all_pairs_at_once_equal_one_pair_at_a_time(tiles) -> None:
    stack, pairs, axes = tiles
    counted = []
    together = _register(stack, pairs, axes, done=counted.append)
    alone = _one_at_a_time(stack, pairs, axes)
    assert sum(counted) == len(pairs)
    for (displacement, score), (expected, expected_score) in zip(together, alone, strict=True):
        np.testing.assert_array_equal(displacement, expected)
        assert score == expected_score


def test_pairs_in_batches_equal_pairs_in_one(tiles, monkeypatch) -> None:
    stack, pairs, axes = tiles
    whole = _register(stack, pairs, axes)
    monkeypatch.setattr(batched_registration, "BATCH_BYTES", 3 * TILE * TILE * 16)
    for (displacement, score), (expected, expected_score) in zip(
        _register(stack, pairs, axes), whole, strict=True
    ):
        np.testing.assert_array_equal(displacement, expected)
        assert score == expected_score


def test_pairs_without_enough_overlap_are_zero_as_one_at_a_time(tiles) -> None:
    stack, pairs, axes = tiles
    # no candidate overlaps more than the whole tile: every pair is (0, 0) with score 0
    for d, s in _register(stack, pairs[:4], axes[:4], min_overlap=1.01):
        np.testing.assert_array_equal(d, [0, 0])
        assert s == 0.0
    alone = _one_at_a_time(stack, pairs[:4], axes[:4], min_overlap=0.9)
    for (d, s), (expected, expected_score) in zip(
        _register(stack, pairs[:4], axes[:4], min_overlap=0.9), alone, strict=True
    ):
        np.testing.assert_array_equal(d, expected)
        assert s == expected_score
    # overlaps too thin to refine keep their integer displacement, as measure_pair's do
    thin = np.zeros((2, TILE, TILE))
    thin[0, :, -4:] = thin[1, :, :4] = np.arange(TILE * 4).reshape(TILE, 4)
    (found, score), (expected, expected_score) = (
        _register(thin, np.array([[0, 1]]), [1], min_overlap=0.01)[0],
        measure_pair(thin[0], thin[1], axis=1, min_overlap=0.01),
    )
    np.testing.assert_array_equal(found, expected)
    assert score == expected_score
    assert found[1] == TILE - 4 and found[1] == int(found[1])


@pytest.mark.gpu
def test_the_gpu_batch_matches_the_host(tiles) -> None:
    import cupy

    stack, pairs, axes = tiles
    on_host = _register(stack, pairs, axes)
    on_gpu = _register(cupy.asarray(stack), pairs, axes)
    kept = [i for i, (_, score) in enumerate(on_host) if score >= 0.3]
    assert len(kept) >= len(pairs) // 2
    for i in kept:
        np.testing.assert_allclose(on_gpu[i][0], on_host[i][0], atol=0.011)
        assert on_gpu[i][1] == pytest.approx(on_host[i][1], abs=1e-9)


@pytest.mark.gpu
def test_the_overlap_kernel_scores_as_the_host(tiles) -> None:
    import cupy

    stack = tiles[0]
    rng = np.random.default_rng(0)
    candidates = [
        (int(a), int(b), int(dy), int(dx))
        for a, b, dy, dx in zip(
            rng.integers(0, 20, 40),
            rng.integers(0, 20, 40),
            rng.integers(-TILE + 1, TILE, 40),
            rng.integers(-TILE + 1, TILE, 40),
            strict=True,
        )
    ]
    flat = np.zeros((2, TILE, TILE))
    flat[1] = 5.0
    scores = batched_registration._overlap_scores(cupy.asarray(stack), candidates)
    expected = [overlap_ncc(*overlap_views(stack[a], stack[b], d)) for a, b, *d in candidates]
    np.testing.assert_allclose(scores, expected, atol=1e-9)
    # a flat overlap has no correlation to score
    assert batched_registration._overlap_scores(cupy.asarray(flat), [(0, 1, 3, -2)])[0] == 0.0


def test_pairs_below_the_fit_score_keep_their_integer_displacement(tiles) -> None:
    stack, pairs, axes = tiles
    refined = _register(stack, pairs, axes)
    together = _register(stack, pairs, axes, refine_from=0.5)
    alone = _one_at_a_time(stack, pairs, axes, refine_from=0.5)
    low = [i for i, (_, score) in enumerate(refined) if score < 0.5]
    assert low and len(low) < len(pairs)
    for i, ((displacement, score), (expected, expected_score)) in enumerate(
        zip(together, alone, strict=True)
    ):
        np.testing.assert_array_equal(displacement, expected)
        assert score == expected_score == refined[i][1]
        if i in low:  # the best candidate's integer displacement (refining may wander far off)
            np.testing.assert_array_equal(displacement, np.round(displacement))
        else:
            np.testing.assert_array_equal(displacement, refined[i][0])


def test_no_pairs_measure_nothing(tiles) -> None:
    assert _register(tiles[0][:1], np.zeros((0, 2), dtype=int), []) == []
