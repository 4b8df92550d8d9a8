"""fit_transform keeps the best-scored displacement when a direction's measurements disagree."""

from __future__ import annotations

import numpy as np

from linumpy.mosaic.transform import PairMeasurement, fit_transform


def test_two_disagreeing_pairs_keep_the_best_scored() -> None:
    # the median of two disagreeing displacements lies between them, near neither
    measurements = [
        PairMeasurement((0, 0), (1, 0), (31.5, -2.0), 0.63),
        PairMeasurement((0, 1), (1, 1), (51.4, 1.4), 0.97),
        PairMeasurement((0, 0), (0, 1), (-1.8, 50.9), 0.99),
        PairMeasurement((1, 0), (1, 1), (-1.8, 50.9), 0.95),
    ]
    transform = fit_transform(measurements, (64, 64), (2, 2), min_score=0.5)
    np.testing.assert_allclose(np.asarray(transform.matrix)[:, 0], (51.4, 1.4))
    np.testing.assert_allclose(np.asarray(transform.matrix)[:, 1], (-1.8, 50.9))


def test_agreeing_pairs_are_averaged_by_score() -> None:
    measurements = [
        PairMeasurement((0, 0), (1, 0), (50.0, 1.0), 0.5),
        PairMeasurement((0, 1), (1, 1), (51.0, 1.0), 1.0),
        PairMeasurement((0, 0), (0, 1), (0.0, 50.0), 0.9),
    ]
    transform = fit_transform(measurements, (64, 64), (2, 2), min_score=0.2)
    np.testing.assert_allclose(np.asarray(transform.matrix)[:, 0], ((50 * 0.5 + 51) / 1.5, 1.0))
