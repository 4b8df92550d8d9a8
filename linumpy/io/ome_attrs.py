"""The OME keys of a zarr group's attributes, moved between the places NGFF 0.4 (at the top, each
with its own version) and NGFF 0.5 (under ``ome``, one version) keep them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from linumpy.io.metadata import NgffVersion

__all__ = ["OME_KEYS", "convert_attrs", "declared_version"]

#: Group attributes that NGFF 0.5 keeps under ``ome`` and NGFF 0.4 at the top.
OME_KEYS = (
    "multiscales",
    "omero",
    "labels",
    "image-label",
    "plate",
    "well",
    "bioformats2raw.layout",
)


def convert_attrs(attrs: Mapping[str, Any], version: NgffVersion) -> dict[str, Any]:
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
    attrs = dict(attrs)
    ome = dict(attrs.pop("ome", {}))
    ome.pop("version", None)
    for key in OME_KEYS:
        if key in attrs:
            ome[key] = attrs.pop(key)
    if not ome:
        return attrs
    _restate_versions(ome, version)
    multiscales = [
        {k: v for k, v in entry.items() if k != "version"} if isinstance(entry, Mapping) else entry
        for entry in ome.get("multiscales", [])
    ]
    if version == "0.5":
        if "multiscales" in ome:
            ome["multiscales"] = multiscales
        return {**attrs, "ome": {"version": "0.5", **ome}}
    if "multiscales" in ome:
        ome["multiscales"] = [
            {"version": "0.4", **entry} if isinstance(entry, Mapping) else entry
            for entry in multiscales
        ]
    return {**ome, **attrs}


def declared_version(attrs: Mapping[str, Any]) -> str | None:
    """The NGFF version a group's attributes declare (None: no OME metadata). Attributes under
    ``ome`` are 0.5 when they state no version (ome-zarr-py writes a labels group so); OME keys
    at the top (a labels group of NGFF 0.4 has only ``labels``) are 0.4 unless they state one.

    Examples
    --------
    >>> declared_version({"ome": {"labels": ["cells"]}}), declared_version({"labels": ["cells"]})
    ('0.5', '0.4')
    >>> declared_version({"linumpy": {}}) is None
    True
    """
    if "ome" in attrs:
        return str(attrs["ome"].get("version", "0.5"))
    multiscales = attrs.get("multiscales")
    if multiscales:
        return str(multiscales[0].get("version", "0.4"))
    for key in OME_KEYS:
        if isinstance(attrs.get(key), Mapping):
            return str(attrs[key].get("version", "0.4"))
        if key in attrs:
            return "0.4"
    return None


#: OME keys whose value states its own NGFF version in 0.4 (``image-label``, ``plate``, ``well``).
_VERSIONED_KEYS = ("image-label", "plate", "well")


def _restate_versions(ome: dict[str, Any], version: NgffVersion) -> None:
    """The version inside ``image-label``, ``plate`` and ``well``: dropped for 0.5 (the ``ome``
    version states it), 0.4 where 0.4 metadata stated one."""
    for key in _VERSIONED_KEYS:
        value = ome.get(key)
        if isinstance(value, Mapping) and "version" in value:
            value = dict(value)
            if version == "0.5":
                del value["version"]
            else:
                value["version"] = "0.4"
            ome[key] = value
