"""The OME keys of a zarr group's attributes, moved between the places NGFF 0.4 (at the top, each
with its own version) and NGFF 0.5 (under ``ome``, one version) keep them; the format objects of
:mod:`linumpy.io.formats` hold the rules of each version.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from linumpy.io.formats import OME_KEYS, NgffFormat, declared_version, format_of
from linumpy.io.metadata import NgffVersion

__all__ = ["OME_KEYS", "convert_attrs", "declared_version"]


def convert_attrs(attrs: Mapping[str, Any], version: NgffVersion | NgffFormat) -> dict[str, Any]:
    """A group's attributes as NGFF ``version`` keeps them (0.5: the OME keys under ``ome``,
    with its version; 0.4: at the top, each multiscales entry with its version); the other keys
    as they are.

    Examples
    --------
    >>> v04 = {"multiscales": [{"version": "0.4", "axes": []}], "omero": {}, "linumpy": {}}
    >>> convert_attrs(v04, "0.5")
    {'linumpy': {}, 'ome': {'version': '0.5', 'multiscales': [{'axes': []}], 'omero': {}}}
    >>> convert_attrs(convert_attrs(v04, "0.5"), "0.4") == v04
    True
    """
    return format_of(version).convert_attrs(attrs)
