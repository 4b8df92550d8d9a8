"""Placing tiles into the stitched image: blending weights and accumulation (numpy or cupy)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import numpy as np
from numpy.typing import DTypeLike

from linumpy._numpy_or_cupy import array_module
from linumpy.errors import LinumpyError
from linumpy.mosaic.blend import PlacedTile, blend_tiles, store_values
from linumpy.mosaic.transform import TileTransform

__all__: list[str] = []

Blending = Literal["none", "average", "linear"]
BLENDING_MODES: tuple[Blending, ...] = ("none", "average", "linear")


def parse_blending(value: str) -> Blending:
    """Return ``value`` if it names a blending mode, else raise LinumpyError."""
    if value not in BLENDING_MODES:
        raise LinumpyError(f"blending must be one of {', '.join(BLENDING_MODES)}, got {value!r}")
    return value  # type: ignore[return-value]


#: The dtypes a stitched image can be written in.
OUTPUT_DTYPES: tuple[str, ...] = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "float32")


def stitch_dtype(
    tiles: DTypeLike, dtype: DTypeLike | None = None, *, option: str = "dtype"
) -> np.dtype:
    """The stitched image's dtype for tiles of dtype ``tiles``: ``dtype`` (one of
    :data:`OUTPUT_DTYPES`, ``option`` naming it in errors), by default the tiles' own, float32
    for tiles of another dtype. An integer dtype for float tiles is refused: their blend is not
    an integer."""
    source = np.dtype(tiles)
    if dtype is None:
        return np.dtype(source.name if source.name in OUTPUT_DTYPES else np.float32)
    try:
        chosen = np.dtype(dtype)
    except TypeError:
        chosen = None
    if chosen is None or chosen.name not in OUTPUT_DTYPES:
        raise LinumpyError(f"{option} must be one of {', '.join(OUTPUT_DTYPES)}, got {dtype!r}")
    if chosen.kind in "iu" and source.kind not in "biu":
        raise LinumpyError(f"{option} {chosen} cannot hold a blend of {source} tiles: give float32")
    return np.dtype(chosen.name)  # in the native byte order


def _ramp(size: int, width: int) -> np.ndarray:
    """1 in the middle, falling linearly over ``width`` pixels to ``1 / (width + 1)`` at ends."""
    distance = np.minimum(np.arange(size), np.arange(size)[::-1]) + 1.0
    return np.minimum(distance / (width + 1.0), 1.0)


def blending_weights(transform: TileTransform, blending: Blending) -> np.ndarray:
    """Weight of each pixel of a tile, ``(tile_h, tile_w)`` float32: 1 for ``average`` and
    ``none``; for ``linear``, ramps over the borders as wide as the overlaps (a cross-fade)."""
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
    dtype: DTypeLike = np.float32,
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
    dtype
        The result's dtype (see :func:`stitch_dtype`): values are blended in float32, and for an
        integer dtype rounded to the nearest integer (half to even) and clipped to its range.

    Returns
    -------
    array
        ``(H, W)`` or ``(Z, H, W)`` stitched image, ``(H, W) = transform.output_shape()``;
        pixels no tile covers are 0.

    Examples
    --------
    A grid of two 1x6 tiles, of 1s and 3s, the second 4 pixels right of the first:

    >>> import numpy as np
    >>> from linumpy.mosaic import TileTransform, stitch
    >>> transform = TileTransform([[1.0, 0.0], [0.0, 4.0]], (0.0, 0.0), (1, 6), (1, 2))
    >>> mosaic = np.array([[1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3]], dtype=np.uint16)
    >>> stitch(mosaic, transform, "none")
    array([[1., 1., 1., 1., 3., 3., 3., 3., 3., 3.]], dtype=float32)
    >>> stitch(mosaic, transform, "average")
    array([[1., 1., 1., 1., 2., 2., 3., 3., 3., 3.]], dtype=float32)
    >>> stitch(mosaic, transform, "linear").round(2)
    array([[1.  , 1.  , 1.  , 1.  , 1.67, 2.33, 3.  , 3.  , 3.  , 3.  ]],
          dtype=float32)
    >>> stitch(mosaic, transform, "linear", dtype=mosaic.dtype)  # rounded
    array([[1, 1, 1, 1, 2, 2, 3, 3, 3, 3]], dtype=uint16)

    A 3D grid ``(Z, rows * tile_h, cols * tile_w)`` is stitched plane by plane:

    >>> stitch(np.stack([mosaic, 2 * mosaic]), transform).shape
    (2, 1, 10)
    """
    transform.check_mosaic_shape(mosaic.shape)
    return stitch_region(mosaic, transform, blending, dtype=dtype)


def tiles_in_region(
    transform: TileTransform, origin: Sequence[int], shape: Sequence[int]
) -> tuple[slice, slice] | None:
    """The grid rows and columns (slices, the smallest rectangle) of the tiles that overlap the
    region ``origin`` (y, x), ``shape`` (height, width) of the stitched image; None for none."""
    h, w = transform.tile_shape
    (y0, x0), (dy, dx) = origin, shape
    positions = transform.pixel_positions()
    py, px = positions[..., 0], positions[..., 1]
    hit = (py < y0 + dy) & (py + h > y0) & (px < x0 + dx) & (px + w > x0)
    if not hit.any():
        return None
    rows, cols = np.nonzero(hit)
    return slice(int(rows.min()), int(rows.max()) + 1), slice(int(cols.min()), int(cols.max()) + 1)


def stitch_region(
    mosaic: Any,
    transform: TileTransform,
    blending: Blending = "linear",
    *,
    origin: Sequence[int] = (0, 0),
    shape: Sequence[int] | None = None,
    grid_origin: Sequence[int] = (0, 0),
    dtype: DTypeLike = np.float32,
    threads: int = 1,
) -> Any:
    """Stitch the region ``origin``, ``shape`` of the output (the whole image by default) from
    ``mosaic``, the grid's tiles from grid row and column ``grid_origin`` on (tiles outside it
    are skipped), in ``threads`` bands of rows. Every pixel comes out as :func:`stitch` computes
    it for the whole image, so regions stitched apart and put together equal :func:`stitch`."""
    xp = array_module(mosaic)
    blending = parse_blending(blending)
    dtype = np.dtype(dtype)
    h, w = transform.tile_shape
    volume = mosaic if mosaic.ndim == 3 else mosaic[None]
    if volume.shape[1] % h or volume.shape[2] % w:
        raise LinumpyError(f"mosaic part {mosaic.shape} is not made of whole {h}x{w} tiles")
    n_rows, n_cols = volume.shape[1] // h, volume.shape[2] // w
    height, width = transform.output_shape() if shape is None else (int(n) for n in shape)
    if threads > 1 and height > 1:
        bands = _stitch_bands(
            mosaic,
            transform,
            blending,
            (origin, (height, width)),
            grid_origin,
            dtype,
            threads,
        )
        return xp.concatenate(bands, axis=-2)
    out = xp.zeros((volume.shape[0], height, width), dtype=dtype)
    positions = transform.pixel_positions() - np.asarray(origin, dtype=np.int64)
    placed = []  # each tile: its rectangle in the region, and its offsets in volume and weights
    for row, col in transform.tiles():
        r, c = row - grid_origin[0], col - grid_origin[1]
        y, x = (int(v) for v in positions[row, col])
        ty0, ty1 = max(0, -y), min(h, height - y)
        tx0, tx1 = max(0, -x), min(w, width - x)
        if not (0 <= r < n_rows and 0 <= c < n_cols) or ty0 >= ty1 or tx0 >= tx1:
            continue
        placed.append(
            PlacedTile((y + ty0, y + ty1, x + tx0, x + tx1), (r * h - y, c * w - x), (y, x))
        )
    if blending == "none":
        for tile in placed:
            store_values(tile.pixels(volume, tile.rect), tile.slices(out, tile.rect))
    else:
        blend_tiles(volume, placed, xp.asarray(blending_weights(transform, blending)), out)
    return out if mosaic.ndim == 3 else out[0]


def _stitch_bands(
    mosaic: Any,
    transform: TileTransform,
    blending: Blending,
    region: tuple[Sequence[int], tuple[int, int]],
    grid_origin: Sequence[int],
    dtype: np.dtype,
    threads: int,
) -> list[Any]:
    """:func:`stitch_region` in bands of rows, one per thread, each from its tiles."""
    xp = array_module(mosaic)
    (y0, x0), (height, width) = region
    h, w = transform.tile_shape
    g0, g1 = (int(g) for g in grid_origin)
    n_rows, n_cols = mosaic.shape[-2] // h, mosaic.shape[-1] // w
    n = min(threads, height)
    edges = [height * i // n for i in range(n + 1)]

    def band(start: int, stop: int) -> Any:
        hit = tiles_in_region(transform, (y0 + start, x0), (stop - start, width))
        if hit is None:
            return xp.zeros((*mosaic.shape[:-2], stop - start, width), dtype=dtype)
        # the band's tiles that ``mosaic`` holds, in its own grid coordinates
        r0, r1 = max(hit[0].start - g0, 0), min(hit[0].stop - g0, n_rows)
        c0, c1 = max(hit[1].start - g1, 0), min(hit[1].stop - g1, n_cols)
        if r0 >= r1 or c0 >= c1:
            return xp.zeros((*mosaic.shape[:-2], stop - start, width), dtype=dtype)
        return stitch_region(
            mosaic[..., r0 * h : r1 * h, c0 * w : c1 * w],
            transform,
            blending,
            origin=(y0 + start, x0),
            shape=(stop - start, width),
            grid_origin=(g0 + r0, g1 + c0),
            dtype=dtype,
        )

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(band, edges[:-1], edges[1:]))
