"""Placing tiles into the stitched image: blending weights and accumulation (numpy or cupy)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from linumpy._xp import array_module
from linumpy.errors import LinumpyError
from linumpy.mosaic.transform import TileTransform

__all__ = ["BLENDING_MODES", "Blending", "blending_weights", "stitch"]

Blending = Literal["none", "average", "linear"]
BLENDING_MODES: tuple[Blending, ...] = ("none", "average", "linear")


def parse_blending(value: str) -> Blending:
    """Return ``value`` if it names a blending mode, else raise LinumpyError."""
    if value not in BLENDING_MODES:
        raise LinumpyError(f"blending must be one of {', '.join(BLENDING_MODES)}, got {value!r}")
    return value  # type: ignore[return-value]


def _ramp(size: int, width: int) -> np.ndarray:
    """1 in the middle, falling linearly over ``width`` pixels to ``1 / (width + 1)`` at ends."""
    distance = np.minimum(np.arange(size), np.arange(size)[::-1]) + 1.0
    return np.minimum(distance / (width + 1.0), 1.0)


def blending_weights(transform: TileTransform, blending: Blending) -> np.ndarray:
    """Weight of each pixel of a tile, shape ``(tile_h, tile_w)``, float32.

    ``average`` and ``none`` weigh every pixel 1; ``linear`` feathers the tile's borders with
    linear ramps as wide as the overlap with its neighbours, so that overlapping tiles cross-fade.

    Examples
    --------
    Two 4x4 tiles side by side, overlapping by 2 columns:

    >>> from linumpy.mosaic.stitch import blending_weights
    >>> from linumpy.mosaic.transform import TileTransform
    >>> transform = TileTransform([[4.0, 0.0], [0.0, 2.0]], (0.0, 0.0), (4, 4), (1, 2))
    >>> blending_weights(transform, "linear").round(2)
    array([[0.33, 0.67, 0.67, 0.33],
           [0.33, 0.67, 0.67, 0.33],
           [0.33, 0.67, 0.67, 0.33],
           [0.33, 0.67, 0.67, 0.33]], dtype=float32)
    >>> blending_weights(transform, "average").min()
    np.float32(1.0)
    """
    h, w = transform.tile_shape
    if parse_blending(blending) != "linear":
        return np.ones((h, w), dtype=np.float32)
    overlap_y, overlap_x = transform.overlap()
    return np.outer(_ramp(h, overlap_y), _ramp(w, overlap_x)).astype(np.float32)


def stitch(
    mosaic: Any,
    transform: TileTransform,
    blending: Blending = "linear",
    *,
    on_tile: Callable[[], None] | None = None,
) -> Any:
    """Stitch a mosaic grid into one image.

    Parameters
    ----------
    mosaic
        ``(rows * tile_h, cols * tile_w)`` or ``(Z, rows * tile_h, cols * tile_w)`` mosaic grid,
        numpy or cupy (the computation runs where the data is).
    transform
        The tile layout, normalized (no negative tile position).
    blending
        ``none``: each tile overwrites what the tiles before it (row-major order) put there;
        ``average``: overlaps hold the mean of the tiles; ``linear``: a weighted mean with
        :func:`blending_weights`' feathered borders.
    on_tile
        Called after each tile is placed (for progress bars).

    Returns
    -------
    array
        ``(H, W)`` or ``(Z, H, W)`` float32 stitched image, ``(H, W) = transform.output_shape()``;
        pixels no tile covers are 0.

    Examples
    --------
    A grid of two 1x6 tiles, of 1s and 3s, the second 4 pixels right of the first:

    >>> import numpy as np
    >>> from linumpy.mosaic.stitch import stitch
    >>> from linumpy.mosaic.transform import TileTransform
    >>> transform = TileTransform([[1.0, 0.0], [0.0, 4.0]], (0.0, 0.0), (1, 6), (1, 2))
    >>> mosaic = np.array([[1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3]], dtype=np.uint16)
    >>> stitch(mosaic, transform, "none")
    array([[1., 1., 1., 1., 3., 3., 3., 3., 3., 3.]], dtype=float32)
    >>> stitch(mosaic, transform, "average")
    array([[1., 1., 1., 1., 2., 2., 3., 3., 3., 3.]], dtype=float32)
    >>> stitch(mosaic, transform, "linear").round(2)
    array([[1.  , 1.  , 1.  , 1.  , 1.67, 2.33, 3.  , 3.  , 3.  , 3.  ]],
          dtype=float32)

    A 3D grid ``(Z, rows * tile_h, cols * tile_w)`` is stitched plane by plane:

    >>> stitch(np.stack([mosaic, 2 * mosaic]), transform).shape
    (2, 1, 10)
    """
    xp = array_module(mosaic)
    blending = parse_blending(blending)
    transform.check_mosaic_shape(mosaic.shape)
    h, w = transform.tile_shape
    volume = mosaic if mosaic.ndim == 3 else mosaic[None]
    height, width = transform.output_shape()
    out = xp.zeros((volume.shape[0], height, width), dtype=xp.float32)
    positions = transform.pixel_positions()
    weights = xp.asarray(blending_weights(transform, blending))
    weight_sum = xp.zeros((height, width), dtype=xp.float32)
    scratch = xp.empty((volume.shape[0], h, w), dtype=xp.float32)
    for row, col in transform.tiles():
        y, x = (int(v) for v in positions[row, col])
        ys, xs = transform.grid_slices(row, col)
        target = out[:, y : y + h, x : x + w]
        if blending == "none":
            target[...] = volume[:, ys, xs]
        else:
            xp.multiply(volume[:, ys, xs], weights, out=scratch)
            target += scratch
            weight_sum[y : y + h, x : x + w] += weights
        if on_tile is not None:
            on_tile()
    if blending != "none":
        covered = weight_sum > 0
        out *= xp.where(covered, 1.0 / xp.where(covered, weight_sum, 1.0), 0.0).astype(xp.float32)
    return out if mosaic.ndim == 3 else out[0]
