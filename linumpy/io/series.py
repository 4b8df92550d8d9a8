"""Collections of images in one zarr group: the bioformats2raw layout (numbered series) and HCS
plates (wells of fields). Opened where an image is expected, such a root stands for its one
image; with several, the error lists the paths to choose from.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import zarr

from linumpy.errors import LinumpyError

__all__ = ["find_image", "image_paths"]

logger = logging.getLogger(__name__)


def _ome(attrs: Mapping[str, Any]) -> Mapping[str, Any]:
    ome = attrs.get("ome")
    return ome if isinstance(ome, Mapping) else attrs


def _is_image(node: Any) -> bool:
    return isinstance(node, zarr.Group) and bool(_ome(node.attrs.asdict()).get("multiscales"))


def image_paths(group: zarr.Group) -> tuple[str, list[str]] | None:
    """What a collection holds: its kind and the paths of its images, inside the group; None
    for a group that is neither a bioformats2raw root nor a plate."""
    ome = _ome(group.attrs.asdict())
    if "bioformats2raw.layout" in ome:
        names = [name for name, node in group.members() if name.isdigit() and _is_image(node)]
        return "bioformats2raw layout", sorted(names, key=int)
    plate = ome.get("plate")
    if isinstance(plate, Mapping):
        fields = []
        for well in plate.get("wells") or []:
            where = well.get("path") if isinstance(well, Mapping) else None
            node = group.get(where) if isinstance(where, str) else None
            if not isinstance(node, zarr.Group):
                continue
            images = _ome(node.attrs.asdict()).get("well", {}).get("images") or []
            for image in images:
                field = f"{where}/{image.get('path')}" if isinstance(image, Mapping) else None
                if field is not None and _is_image(group.get(field)):
                    fields.append(field)
        return "plate", fields
    return None


def find_image(
    group: zarr.Group, path: str | os.PathLike[str]
) -> tuple[zarr.Group, str | os.PathLike[str]] | None:
    """The one image of a bioformats2raw root or a plate, and its path; None for other groups."""
    from linumpy.io.stores import location

    found = image_paths(group)
    if found is None:
        return None
    kind, paths = found
    if not paths:
        raise LinumpyError(f"{path}: a {kind} with no image in it")
    if len(paths) > 1:
        listed = ", ".join(os.fspath(location(path, p)) for p in paths)
        raise LinumpyError(f"{path}: a {kind} of {len(paths)} images; open one of {listed}")
    image = group[paths[0]]
    where = location(path, paths[0])
    logger.info("%s: a %s; opening its one image, %s", path, kind, where)
    return image, where  # type: ignore[return-value]
