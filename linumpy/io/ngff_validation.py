"""OME-NGFF image attributes checked against ome-zarr-models, once per distinct attributes.

The models are those of the version the attributes declare (0.4 or 0.5). ome-zarr-models and
pydantic are imported on first use.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from typing import Any

from linumpy.errors import LinumpyError
from linumpy.io.formats import NgffVersion, for_zarr_format, format_of

__all__ = ["TYPES_BY_NAME", "validate_image_attrs"]

#: The type an axis of each of these names has when its metadata gives none.
TYPES_BY_NAME = {"t": "time", "c": "channel", "z": "space", "y": "space", "x": "space"}


def validate_image_attrs(
    attrs: Mapping[str, Any], zarr_format: int, source: str | os.PathLike[str]
) -> NgffVersion | None:
    """Validate an image group's attributes with the ome-zarr-models of the version they declare
    (0.4 or 0.5; older versions are not validated). Axes without a ``type`` get the one their name
    implies first, as linumpy has always read them."""
    fmt = for_zarr_format(zarr_format)
    data = fmt.validated_part(attrs)
    if data is None:
        return None
    version: NgffVersion = fmt.version  # type: ignore[assignment]
    data = {**data, "multiscales": _for_validation(data.get("multiscales"))}
    error = _model_error(version, json.dumps(data, sort_keys=True))
    if error is not None:
        raise LinumpyError(f"{os.fspath(source)}: invalid OME-NGFF {version} metadata ({error})")
    return version


@functools.lru_cache(maxsize=256)
def _model_error(version: NgffVersion, text: str) -> str | None:
    """What ome-zarr-models finds wrong with the image attributes ``text`` (JSON), None if
    nothing; cached in the process (every read of an image opens it again)."""
    # imported on first use: ome-zarr-models (pydantic) would slow every import of linumpy
    import pydantic

    try:
        format_of(version).image_model().model_validate_json(text)
    except pydantic.ValidationError as exc:
        return _first_error(exc)
    except (IndexError, KeyError, TypeError) as exc:
        # ome-zarr-models 1.8 raises IndexError, not a ValidationError, for levels whose scales
        # differ in length
        return f"ome-zarr-models failed with {type(exc).__name__}: {exc}"
    return None


# Stands for every multiscale's name in the text validated: any string is a valid name, and
# with the name in it every newly named output would be validated again instead of matching the
# cached verdict on an earlier one.
_ANY_NAME = "image"


def _for_validation(multiscales: Any) -> Any:
    """``multiscales`` as validated: a type for every axis named t, c, z, y or x that has none,
    and every string name replaced by one stand-in (a name's text has no rule to break)."""
    if not isinstance(multiscales, list):
        return multiscales
    result = []
    for multiscale in multiscales:
        if isinstance(multiscale, Mapping) and isinstance(multiscale.get("axes"), list):
            axes = [
                {**axis, "type": TYPES_BY_NAME[axis["name"]]}
                if isinstance(axis, Mapping)
                and axis.get("type") is None
                and axis.get("name") in TYPES_BY_NAME
                else axis
                for axis in multiscale["axes"]
            ]
            multiscale = {**multiscale, "axes": axes}
        if isinstance(multiscale, Mapping) and isinstance(multiscale.get("name"), str):
            multiscale = {**multiscale, "name": _ANY_NAME}
        result.append(multiscale)
    return result


def _first_error(exc: Any) -> str:
    """The first error of a pydantic ValidationError (where: what), and how many more there are."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    message = error["msg"].removeprefix("Value error, ")
    more = f"; {exc.error_count() - 1} more" if exc.error_count() > 1 else ""
    return f"{where}: {message}{more}"
