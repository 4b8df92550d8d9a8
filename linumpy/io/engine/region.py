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
    """Check a region against an array's shape and return one slice per dimension.

    Parameters
    ----------
    region
        A slice or a tuple of slices (step 1); missing trailing dimensions are read whole;
        negative bounds count from the end, as in Python.
    shape
        The array's shape.
    source
        The array's name for error messages.

    Returns
    -------
    tuple of slice
        Slices with explicit, non-negative ``start <= stop`` bounds.

    Raises
    ------
    LinumpyError
        When the region has too many dimensions, a non-slice entry, a step other than 1, or
        bounds outside the array.

    Examples
    --------
    >>> parse_region((slice(2, None),), (10, 20))
    (slice(2, 10, None), slice(0, 20, None))
    """
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
