"""The mosaic layout: a tile grid and the affine map from tile index to pixel position."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from linumpy.errors import LinumpyError

__all__: list[str] = []

_FORMAT = "linumpy-tile-transform"
_FORMAT_VERSION = 1


def _positive_pair(value: Sequence[int], what: str) -> tuple[int, int]:
    shape = tuple(value)
    if len(shape) != 2 or not all(isinstance(n, int | np.integer) and n > 0 for n in shape):
        raise LinumpyError(f"{what} must be two positive integers, got {value!r}")
    return int(shape[0]), int(shape[1])


def parse_tile_shape(value: Sequence[int]) -> tuple[int, int]:
    """Validate a tile shape ``(height, width)`` in pixels."""
    return _positive_pair(value, "tile shape (height, width)")


def _parse_matrix(value: Sequence[Sequence[float]]) -> tuple[tuple[float, float], ...]:
    rows = [tuple(float(v) for v in row) for row in value]
    if len(rows) != 2 or any(len(row) != 2 for row in rows):
        raise LinumpyError(f"transform matrix must be 2x2, got {value!r}")
    if not all(math.isfinite(v) for row in rows for v in row):
        raise LinumpyError(f"transform matrix must be finite, got {value!r}")
    if abs(np.linalg.det(np.array(rows))) < 1e-9:
        raise LinumpyError(f"transform matrix is singular: {value!r}")
    return rows[0], rows[1]


def _parse_offset(value: Sequence[float]) -> tuple[float, float]:
    offset = tuple(float(v) for v in value)
    if len(offset) != 2 or not all(math.isfinite(v) for v in offset):
        raise LinumpyError(f"transform offset must be two finite numbers, got {value!r}")
    return offset[0], offset[1]


@dataclass(frozen=True)
class TileTransform:
    """Where each tile of a mosaic grid goes in the stitched image.

    Tile ``(row, col)`` of the grid has its top-left pixel at
    ``matrix @ (row, col) + offset`` in the stitched image, in pixels ``(y, x)``.

    Parameters
    ----------
    matrix
        2x2 affine part: column 0 is the displacement between vertically adjacent tiles,
        column 1 between horizontally adjacent tiles.
    offset
        Position of tile ``(0, 0)``.
    tile_shape
        ``(height, width)`` of one tile in pixels.
    grid_shape
        ``(rows, cols)`` of the tile grid.

    Examples
    --------
    A 2x3 grid of 128x128 tiles, 100 pixels apart vertically and 110 horizontally, with a
    slight rotation:

    >>> import tempfile
    >>> from linumpy.mosaic import TileTransform
    >>> transform = TileTransform(
    ...     [[100.0, 2.0], [-1.0, 110.0]], (0.0, 0.0), tile_shape=(128, 128), grid_shape=(2, 3)
    ... )
    >>> transform.pixel_positions()[1]
    array([[100,  -1],
           [102, 109],
           [104, 219]])
    >>> layout = transform.normalized()
    >>> layout.offset, layout.output_shape(), layout.overlap()
    ((0.0, 1.0), (232, 349), (28, 18))
    >>> path = tempfile.mkdtemp() + "/transform.json"
    >>> layout.save(path)
    >>> TileTransform.load(path) == layout
    True
    """

    matrix: tuple[tuple[float, float], tuple[float, float]]
    offset: tuple[float, float]
    tile_shape: tuple[int, int]
    grid_shape: tuple[int, int]

    def __post_init__(self) -> None:
        object.__setattr__(self, "matrix", _parse_matrix(self.matrix))
        object.__setattr__(self, "offset", _parse_offset(self.offset))
        object.__setattr__(self, "tile_shape", parse_tile_shape(self.tile_shape))
        object.__setattr__(
            self, "grid_shape", _positive_pair(self.grid_shape, "grid shape (rows, cols)")
        )

    @property
    def n_tiles(self) -> int:
        """Number of tiles in the grid."""
        return self.grid_shape[0] * self.grid_shape[1]

    def tiles(self) -> Iterator[tuple[int, int]]:
        """Tile indices ``(row, col)`` in row-major order (the order stitching places them)."""
        for row in range(self.grid_shape[0]):
            for col in range(self.grid_shape[1]):
                yield row, col

    def check_mosaic_shape(self, shape: Sequence[int], what: str = "mosaic grid") -> None:
        """Raise :class:`~linumpy.errors.LinumpyError` unless ``shape`` is a 2D or 3D mosaic grid
        of this transform's tiles (its last two axes hold ``rows x cols`` tiles)."""
        rows, cols = self.grid_shape
        h, w = self.tile_shape
        if len(shape) not in (2, 3) or tuple(shape[-2:]) != (rows * h, cols * w):
            raise LinumpyError(
                f"{what} of shape {tuple(shape)} does not hold the transform's {rows}x{cols} grid "
                f"of {h}x{w} tiles"
            )

    def positions(self) -> np.ndarray:
        """Top-left pixel position of every tile, shape ``(rows, cols, 2)``, float64."""
        rows, cols = np.meshgrid(
            np.arange(self.grid_shape[0]), np.arange(self.grid_shape[1]), indexing="ij"
        )
        index = np.stack([rows, cols], axis=-1).astype(np.float64)
        return index @ np.array(self.matrix).T + np.array(self.offset)

    def pixel_positions(self) -> np.ndarray:
        """Positions rounded to the nearest pixel (halves round up), shape ``(rows, cols, 2)``."""
        return np.floor(self.positions() + 0.5).astype(np.int64)

    def normalized(self) -> TileTransform:
        """The same layout shifted so that the smallest tile position is 0 on each axis."""
        shift = self.positions().reshape(-1, 2).min(axis=0)
        offset = (self.offset[0] - shift[0], self.offset[1] - shift[1])
        return TileTransform(self.matrix, offset, self.tile_shape, self.grid_shape)

    def output_shape(self) -> tuple[int, int]:
        """``(height, width)`` of the stitched image (tiles placed at their pixel positions).

        Raises
        ------
        LinumpyError
            When a tile would land at a negative position (call :meth:`normalized` first).
        """
        pos = self.pixel_positions().reshape(-1, 2)
        if (pos < 0).any():
            raise LinumpyError("the transform puts tiles at negative positions; normalize it first")
        top = pos.max(axis=0) + np.array(self.tile_shape)
        return int(top[0]), int(top[1])

    def overlap(self) -> tuple[int, int]:
        """Nominal overlap ``(y, x)`` in pixels of adjacent tiles (0 when they do not touch)."""
        step_y = abs(self.matrix[0][0])
        step_x = abs(self.matrix[1][1])
        return (
            max(0, math.ceil(self.tile_shape[0] - step_y)),
            max(0, math.ceil(self.tile_shape[1] - step_x)),
        )

    def max_position_error(self, other: TileTransform) -> float:
        """Largest distance in pixels between the positions this and ``other`` give any tile."""
        if other.grid_shape != self.grid_shape:
            raise LinumpyError(f"grid shapes differ: {self.grid_shape} and {other.grid_shape}")
        return float(np.linalg.norm(self.positions() - other.positions(), axis=-1).max())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description; :meth:`from_dict` reads it back."""
        return {
            "format": _FORMAT,
            "version": _FORMAT_VERSION,
            "matrix": [list(row) for row in self.matrix],
            "offset": list(self.offset),
            "tile_shape": list(self.tile_shape),
            "grid_shape": list(self.grid_shape),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TileTransform:
        """Build a transform from :meth:`to_dict`'s output, validating every field."""
        if data.get("format") != _FORMAT:
            raise LinumpyError(f"not a linumpy tile transform (format {data.get('format')!r})")
        if data.get("version") != _FORMAT_VERSION:
            raise LinumpyError(f"unsupported tile transform version {data.get('version')!r}")
        missing = [k for k in ("matrix", "offset", "tile_shape", "grid_shape") if k not in data]
        if missing:
            raise LinumpyError(f"tile transform lacks {', '.join(missing)}")
        return cls(data["matrix"], data["offset"], data["tile_shape"], data["grid_shape"])

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the transform as JSON."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TileTransform:
        """Read a transform written by :meth:`save`.

        Raises
        ------
        LinumpyError
            When the file is missing, is not JSON or is not a tile transform (the message names it).
        """
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise LinumpyError(f"cannot read tile transform {os.fspath(path)!r}: {exc}") from exc
        if not isinstance(data, dict):
            raise LinumpyError(f"{os.fspath(path)!r} is not a tile transform")
        try:
            return cls.from_dict(data)
        except (LinumpyError, ValueError, TypeError, KeyError) as exc:
            raise LinumpyError(f"{os.fspath(path)!r}: {exc}") from exc


@dataclass(frozen=True)
class PairMeasurement:
    """Measured displacement between two adjacent tiles.

    Attributes
    ----------
    first, second
        Tile indices ``(row, col)``; ``second`` is one row below or one column right of ``first``.
    displacement
        ``(dy, dx)`` of ``second`` relative to ``first`` in pixels.
    score
        Normalized cross-correlation of the overlap at that displacement (-1 to 1).

    Examples
    --------
    >>> from linumpy.mosaic import PairMeasurement
    >>> pair = PairMeasurement((0, 0), (0, 1), displacement=(1.0, 90.0), score=0.9)
    >>> pair.axis
    1
    >>> PairMeasurement((0, 0), (1, 0), (95.0, -2.0), 0.8).axis
    0
    """

    first: tuple[int, int]
    second: tuple[int, int]
    displacement: tuple[float, float]
    score: float

    @property
    def axis(self) -> int:
        """0 for a vertical pair (next row), 1 for a horizontal pair (next column)."""
        return 0 if self.second[0] != self.first[0] else 1


def _robust_mean(values: np.ndarray, weights: np.ndarray, tolerance: float) -> np.ndarray:
    """Weighted mean of the rows of ``values`` within ``tolerance`` pixels of their median, or
    of the best-scored row when none (or none of any weight) is that close: an even count of
    measurements that disagree has a median between them."""
    for center in (np.median(values, axis=0), values[np.argmax(weights)]):
        inliers = np.linalg.norm(values - center, axis=1) <= tolerance
        if weights[inliers].sum() > 0:
            break
    return np.average(values[inliers], axis=0, weights=weights[inliers])


def describe_fit(
    transform: TileTransform, pairs: Sequence[PairMeasurement], min_score: float
) -> str:
    """One line on a fitted layout: its matrix, its offset and the pairs it was fitted to."""
    used = sum(pair.score >= min_score for pair in pairs)
    matrix = ", ".join(f"[{a:.3f}, {b:.3f}]" for a, b in transform.matrix)
    offset = ", ".join(f"{value:.3f}" for value in transform.offset)
    return f"matrix [{matrix}], offset [{offset}] from {used} of {len(pairs)} tile pairs"


def fit_transform(
    measurements: Sequence[PairMeasurement],
    tile_shape: tuple[int, int],
    grid_shape: tuple[int, int],
    *,
    min_score: float = 0.3,
) -> TileTransform:
    """Fit the affine tile layout to pair measurements, ignoring unreliable ones.

    Pairs scoring below ``min_score`` (tiles without tissue) are dropped; of the rest, those more
    than 2 pixels from the median displacement of their direction are outliers.
    """
    matrix = np.zeros((2, 2))
    for axis in (0, 1):
        pairs = [m for m in measurements if m.axis == axis]
        good = [m for m in pairs if m.score >= min_score]
        if grid_shape[axis] == 1:
            # A single row (column): that column of the matrix never matters; use the tile size.
            matrix[axis, axis] = tile_shape[axis]
            continue
        if not good:
            direction = "vertical" if axis == 0 else "horizontal"
            raise LinumpyError(
                f"no reliable {direction} tile pair (of {len(pairs)}, none scored >= {min_score}): "
                "too little tissue in the overlaps to estimate the layout"
            )
        values = np.array([m.displacement for m in good])
        weights = np.array([m.score for m in good])
        matrix[:, axis] = _robust_mean(values, weights, tolerance=2.0)
    return TileTransform(matrix.tolist(), (0.0, 0.0), tile_shape, grid_shape).normalized()
