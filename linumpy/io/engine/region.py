"""Regions: one slice per axis, checked against an array's shape (reads and writes share it)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from linumpy.errors import LinumpyError

__all__: list[str] = []

Region = tuple[slice, ...]


def parse_region(
    region: slice | Sequence[slice] | None, shape: Sequence[int], source: str = "array"
) -> Region:
    """Check a region against an array's shape and return one slice per dimension."""
    if region is None:
        region = ()
    elif isinstance(region, slice):
        region = (region,)
    region = tuple(region)
    if len(region) > len(shape):
        raise LinumpyError(
            f"{source}: region {region} has {len(region)} dimensions, the array {len(shape)}"
        )
    parsed = []
    whole = slice(None)  # trailing axes the region leaves out (None in it is an error, as in zarr)
    for axis, (sel, size) in enumerate(itertools.zip_longest(region, shape, fillvalue=whole)):
        if not isinstance(sel, slice) or sel.step not in (None, 1):
            raise LinumpyError(
                f"{source}: region entry {sel!r} on axis {axis} must be a slice with step 1"
            )
        start = 0 if sel.start is None else sel.start + (size if sel.start < 0 else 0)
        stop = size if sel.stop is None else sel.stop + (size if sel.stop < 0 else 0)
        if not 0 <= start <= stop <= size:
            raise LinumpyError(
                f"{source}: region {region} is out of bounds on axis {axis} "
                f"({sel.start}:{sel.stop} for size {size}; array shape {tuple(shape)})"
            )
        parsed.append(slice(start, stop))
    return tuple(parsed)
