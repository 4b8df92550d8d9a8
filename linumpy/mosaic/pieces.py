"""Cutting a stitched region into rectangles by the tiles that cover them.

Blending needs float32 sums only where tiles overlap: elsewhere a pixel is one tile's own. For
each tile (in the stitch's order) :func:`tile_pieces` gives the rectangles of the region that it
alone covers, those where it starts the overlap's sums (no earlier tile covers them) and those
where it adds to sums an earlier tile started. The geometry is plain Python on a few rectangles
per tile; the arithmetic over the pixels is :mod:`linumpy.mosaic.stitch`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__: list[str] = []

#: ``(y0, y1, x0, x1)``: rows ``y0`` to ``y1`` and columns ``x0`` to ``x1`` (ends excluded).
Rect = tuple[int, int, int, int]


def _meets(a: Rect, b: Rect) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def minus(rects: Sequence[Rect], cut: Rect) -> list[Rect]:
    """The parts of ``rects`` (disjoint rectangles) outside ``cut``, as disjoint rectangles."""
    cy0, cy1, cx0, cx1 = cut
    out: list[Rect] = []
    for rect in rects:
        y0, y1, x0, x1 = rect
        if not _meets(rect, cut):
            out.append(rect)
            continue
        if y0 < cy0:
            out.append((y0, cy0, x0, x1))
        if cy1 < y1:
            out.append((cy1, y1, x0, x1))
        my0, my1 = max(y0, cy0), min(y1, cy1)
        if x0 < cx0:
            out.append((my0, my1, x0, cx0))
        if cx1 < x1:
            out.append((my0, my1, cx1, x1))
    return out


def _minus_all(rects: list[Rect], cuts: Sequence[Rect]) -> list[Rect]:
    for cut in cuts:
        if not rects:
            break
        rects = minus(rects, cut)
    return rects


@dataclass(frozen=True)
class TilePieces:
    """One tile's part of a region, as disjoint rectangles: ``alone``, pixels no other tile
    covers; ``first``, pixels later tiles also cover (the tile starts their sums); ``added``,
    pixels an earlier tile covers (the tile adds to their sums)."""

    alone: list[Rect]
    first: list[Rect]
    added: list[Rect]


def tile_pieces(rects: Sequence[Rect]) -> list[TilePieces]:
    """Each tile's :class:`TilePieces`, from the tiles' rectangles in the region, in order.

    Over all tiles, the ``alone`` and ``first`` pieces tile the covered pixels once; a pixel that
    ``k`` tiles cover is in one tile's ``first`` and ``k - 1`` tiles' ``added``.
    """
    result = []
    for i, rect in enumerate(rects):
        earlier = [r for r in rects[:i] if _meets(r, rect)]
        later = [r for r in rects[i + 1 :] if _meets(r, rect)]
        if not earlier and not later:
            result.append(TilePieces([rect], [], []))
            continue
        alone = _minus_all([rect], earlier + later)
        shared = _minus_all([rect], alone)  # covered by another tile too
        first = _minus_all(list(shared), earlier)
        added = _minus_all(shared, first)
        result.append(TilePieces(alone, first, added))
    return result
