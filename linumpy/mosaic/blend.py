"""Blending tiles placed in a region: one pass over the pixels a tile covers alone, float32 sums
over the overlaps (numpy or cupy).

Per pixel the arithmetic is that of float32 sums over the whole image, ``0 + t1 * w1 + t2 * w2
...`` in tile order times ``1 / (w1 + w2 ...)``, so a region stitched here equals the whole
image's, bit for bit in float32; an integer output holds those values rounded to the nearest
integer (half to even) and clipped to its range. A pixel one tile covers alone is that tile's
value, weighted and normalised once, or copied where that gives the same (integer tiles into an
integer dtype that holds them; weights of 1).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from linumpy._numpy_or_cupy import array_module, to_numpy
from linumpy.mosaic.pieces import Rect, TilePieces, minus, tile_pieces

__all__: list[str] = []


def _float32_bounds(dtype: np.dtype) -> tuple[np.float32, np.float32]:
    """The smallest and largest float32 within an integer dtype's range."""
    info = np.iinfo(dtype)
    low, high = np.float32(info.min), np.float32(info.max)
    if int(high) > info.max:  # float32 rounds 2**31 - 1 and 2**32 - 1 up
        high = np.nextafter(high, np.float32(0))
    return low, high


@dataclass(frozen=True)
class PlacedTile:
    """A tile in a region: its rectangle there, and where region pixel ``(y, x)`` is in the
    mosaic part (``(y, x) + offset``) and in the tile's weights (``(y, x) - position``)."""

    rect: Rect
    offset: tuple[int, int]
    position: tuple[int, int]

    @staticmethod
    def slices(array: Any, rect: Rect, shift: tuple[int, int] = (0, 0)) -> Any:
        """``array[..., rect]``, the rectangle shifted by ``shift``."""
        y0, y1, x0, x1 = rect
        return array[..., y0 + shift[0] : y1 + shift[0], x0 + shift[1] : x1 + shift[1]]

    def pixels(self, volume: Any, rect: Rect) -> Any:
        return self.slices(volume, rect, self.offset)

    def weights(self, weights: Any, rect: Rect) -> Any:
        return self.slices(weights, rect, (-self.position[0], -self.position[1]))


def store_values(values: Any, target: Any) -> None:
    """``target[...] = values`` (tiles, or float32 values that may be overwritten), rounded and
    clipped as float32 values are for an integer ``target``; copied as they are when that gives
    the same (integer tiles that float32 and ``target`` hold exactly)."""
    xp = array_module(target)
    if target.dtype.kind == "f" or _exact_copy(values.dtype, target.dtype):
        target[...] = values
        return
    if values.dtype != np.float32:
        values = values.astype(xp.float32)
    xp.rint(values, out=values)
    xp.clip(values, *_float32_bounds(target.dtype), out=values)
    target[...] = values


def _exact_copy(tiles: np.dtype, dtype: np.dtype) -> bool:
    """Whether a tile copied into ``dtype`` equals its float32 blend rounded: integer tiles
    float32 holds exactly, ``dtype`` holding every value of theirs (a weighted mean of one
    tile, ``t * w / w`` in float32, is within a few ulps of ``t``)."""
    return (
        dtype.kind in "iu"
        and tiles.kind in "biu"
        and np.can_cast(tiles, np.float32, "safe")
        and np.can_cast(tiles, dtype, "safe")
    )


def _unit_weight_copy(tiles: np.dtype) -> bool:
    """Whether ``t * 1`` (numpy's promotion with float32 weights, then float32) is the tile
    cast to float32: integers float64 holds exactly, and floats."""
    return tiles.kind == "f" or (tiles.kind in "biu" and tiles.itemsize <= 4)


def blend_tiles(
    volume: Any,
    placed: list[PlacedTile],
    weights: Any,
    out: Any,
) -> None:
    """Weighted means of the ``placed`` tiles (in the stitch's order) of ``volume`` into ``out``
    (zeros): one pass where a tile covers a pixel alone, float32 sums where tiles overlap."""
    xp = array_module(out)
    depth, height, width = out.shape
    # the weight sums and their inverses over the plane (2D: cheap), as the whole region's
    weight_sum = xp.zeros((height, width), dtype=xp.float32)
    for tile in placed:
        tile.slices(weight_sum, tile.rect)[...] += tile.weights(weights, tile.rect)
    covered = weight_sum > 0
    inverse = xp.where(covered, 1.0 / xp.where(covered, weight_sum, 1.0), 0.0).astype(xp.float32)
    pieces = tile_pieces([tile.rect for tile in placed])
    in_place = out.dtype == np.float32  # the sums in the output's own pixels, normalised there
    # else each overlap piece's sums side by side in one buffer, reused from block to block (a
    # fresh block-sized array costs its page faults, as much as the arithmetic)
    starts = [] if in_place else _offsets(pieces, depth)
    largest = max((_area(r) for p in pieces for r in (*p.alone, *p.first, *p.added)), default=0)
    used = starts[-1][-1] if starts and starts[-1] else 0
    buffer = _buffer(xp, used + depth * largest)
    scratch = buffer[used:]

    def sums(index: int, rect: Rect) -> Any:
        """The sums of tile ``index``'s ``first`` piece ``rect``."""
        if in_place:
            return PlacedTile.slices(out, rect)
        start = starts[index][pieces[index].first.index(rect)]
        shape = (depth, rect[1] - rect[0], rect[3] - rect[2])
        return buffer[start : start + depth * _area(rect)].reshape(shape)

    firsts = [(i, rect) for i, part in enumerate(pieces) for rect in part.first]
    earlier = np.cumsum([0] + [len(part.first) for part in pieces]).tolist()
    signed_zero = volume.dtype.kind in "fc"  # 0 + t * w turns -0.0 into 0.0
    copy = _exact_copy(volume.dtype, out.dtype)
    # where a tile's weights are 1 its float32 blend alone is the tile itself, t * 1 * (1 / 1)
    core = None
    if out.dtype.kind == "f" and _unit_weight_copy(volume.dtype):
        core = _unit_core(weights)

    def temporary(rect: Rect) -> Any:
        return scratch[: depth * _area(rect)].reshape(depth, rect[1] - rect[0], rect[3] - rect[2])

    for index, (tile, part) in enumerate(zip(placed, pieces)):
        alone = part.alone
        if core is not None and not copy:
            y, x = tile.position
            cut = (core[0] + y, core[1] + y, core[2] + x, core[3] + x)
            for rect in alone:
                inner = _meet(rect, cut)
                if inner is not None:
                    target = PlacedTile.slices(out, inner)
                    target[...] = tile.pixels(volume, inner)
                    if signed_zero:
                        target += 0
            alone = [piece for rect in alone for piece in minus([rect], cut)]
        for rect in alone:
            pixels, target = tile.pixels(volume, rect), PlacedTile.slices(out, rect)
            if copy:
                target[...] = pixels
                continue
            weight = tile.weights(weights, rect)
            values = target if in_place else temporary(rect)
            xp.multiply(pixels, weight, out=values)
            if signed_zero:
                values += 0
            values *= PlacedTile.slices(inverse, rect)
            if values is not target:
                store_values(values, target)
        for rect in part.first:
            values = sums(index, rect)
            xp.multiply(tile.pixels(volume, rect), tile.weights(weights, rect), out=values)
            if signed_zero:
                values += 0
        # the earlier tiles' pieces this one adds to (their sums are laid out piece by piece)
        below = [] if in_place or not part.added else firsts[: earlier[index]]
        below = [(i, first) for i, first in below if _meet(tile.rect, first) is not None]
        for rect in part.added:
            parts = [(rect, (index, rect))] if in_place else []
            if not in_place:
                for i, first in below:
                    inner = _meet(rect, first)
                    if inner is not None:
                        parts.append((inner, (i, first)))
            for inner, (i, first) in parts:
                weighted = temporary(inner)
                xp.multiply(tile.pixels(volume, inner), tile.weights(weights, inner), out=weighted)
                if in_place:
                    PlacedTile.slices(out, inner)[...] += weighted
                    continue
                local = (inner[0] - first[0], inner[1] - first[0], inner[2] - first[2])
                local += (inner[3] - first[2],)
                PlacedTile.slices(sums(i, first), local)[...] += weighted
    for i, rect in firsts:
        values = sums(i, rect)
        values *= PlacedTile.slices(inverse, rect)
        if not in_place:
            store_values(values, PlacedTile.slices(out, rect))


#: Each thread's buffer of overlap sums, kept from one block to the next (numpy only: cupy's
#: memory pool reuses device memory itself).
_BUFFERS = threading.local()


def _buffer(xp: Any, size: int) -> Any:
    """A flat float32 array of ``size`` elements, on the host this thread's reused buffer."""
    if xp is not np:
        return xp.empty(size, dtype=xp.float32)
    buffer = getattr(_BUFFERS, "array", None)
    if buffer is None or buffer.size < size:
        buffer = np.empty(size, dtype=np.float32)
        _BUFFERS.array = buffer
    return buffer[:size]


def _offsets(pieces: list[TilePieces], depth: int) -> list[list[int]]:
    """Where each tile's ``first`` pieces start in a buffer laid out piece after piece, with the
    end of the last as the last tile's last entry."""
    offsets, start = [], 0
    for part in pieces:
        row = []
        for rect in part.first:
            row.append(start)
            start += depth * _area(rect)
        offsets.append(row)
    offsets.append([start])
    return offsets


def _area(rect: Rect) -> int:
    return (rect[1] - rect[0]) * (rect[3] - rect[2])


def _meet(a: Rect, b: Rect) -> Rect | None:
    """The intersection of two rectangles, None if empty."""
    y0, y1, x0, x1 = max(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), min(a[3], b[3])
    return (y0, y1, x0, x1) if y0 < y1 and x0 < x1 else None


def _unit_core(weights: Any) -> Rect:
    """The rectangle of a tile's weights (an outer product of ramps) where they are 1."""
    ones = to_numpy(weights == 1)
    rows, cols = np.nonzero(ones.any(axis=1))[0], np.nonzero(ones.any(axis=0))[0]
    if not rows.size:
        return (0, 0, 0, 0)
    return (int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1)
