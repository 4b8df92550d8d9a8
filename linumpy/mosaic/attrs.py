"""linumpy's own attributes of an OME-Zarr image (under ``"linumpy"``), a mosaic grid's tile
shape, and the coordinates of the images the stitch and the projection derive from an input."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import zarr

from linumpy.io import open_array
from linumpy.io.blocks import storage_unit
from linumpy.io.metadata import Coordinates, derive_coordinates
from linumpy.io.omezarr import read_coordinates
from linumpy.mosaic.transform import TileTransform, parse_tile_shape

__all__: list[str] = []

#: Key of an OME-Zarr image's group attributes under which linumpy keeps its own metadata:
#: ``{"mosaic": {"tile_shape": [h, w], "grid_shape": [rows, cols]}, "demo": {...}, ...}``.
ATTRS_KEY = "linumpy"


def read_linumpy_attrs(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``linumpy`` attributes of an OME-Zarr image (empty for a plain array or none)."""
    from linumpy.io.stores import open_store, parse_source

    node = zarr.open(store=open_store(parse_source(path)), mode="r")  # paths stay paths
    if isinstance(node, zarr.Array):
        return {}
    return dict(node.attrs.get(ATTRS_KEY, {}))


def write_linumpy_attrs(path: str | os.PathLike[str], values: dict[str, Any]) -> None:
    """Merge ``values`` into the ``linumpy`` attributes of the OME-Zarr image at ``path``."""
    group = zarr.open_group(store=zarr.storage.LocalStore(path), mode="r+")
    group.attrs[ATTRS_KEY] = {**dict(group.attrs.get(ATTRS_KEY, {})), **values}


def mosaic_tile_shape(
    path: str | os.PathLike[str], tile_shape: Sequence[int] | None = None
) -> tuple[int, int]:
    """The ``(tile_h, tile_w)`` of a mosaic grid image: ``tile_shape`` when given, else the
    image's ``linumpy.mosaic`` attributes, else its shard shape, else its chunk shape."""
    if tile_shape is not None:
        return parse_tile_shape(tile_shape)
    stored = read_linumpy_attrs(path).get("mosaic", {}).get("tile_shape")
    if stored is not None:
        return parse_tile_shape(stored)
    return parse_tile_shape(storage_unit(open_array(path))[-2:])


def stitch_coordinates(source: str | os.PathLike[str], transform: TileTransform) -> Coordinates:
    """The coordinates of the image stitching ``source`` with ``transform`` (normalized): the
    grid's axes, units and voxel size, its translation moved to where the stitched image starts."""
    coordinates = read_coordinates(source)
    first = transform.pixel_positions()[0, 0]
    depth = (0.0,) * (len(coordinates.axes) - 2)
    return derive_coordinates(coordinates, origin=(*depth, -float(first[0]), -float(first[1])))


def projection_coordinates(source: str | os.PathLike[str], axis: int) -> Coordinates:
    """The coordinates of a projection of ``source`` along ``axis``: the axes after it (those
    before, of length 1, go too), their units, voxel sizes and positions."""
    coordinates = read_coordinates(source)
    keep = list(range(axis + 1, len(coordinates.axes)))
    return derive_coordinates(coordinates, keep=keep)


def _group_attrs(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A local zarr group's attributes; empty for anything else."""
    from zarr.errors import NodeNotFoundError
    from zarr.storage import LocalStore

    try:
        return zarr.open_group(store=LocalStore(path, read_only=True), mode="r").attrs.asdict()
    except (OSError, ValueError, NodeNotFoundError, zarr.errors.ContainsArrayError):
        return {}


def copy_omero(
    source: str | os.PathLike[str], target: str | os.PathLike[str], n_channels: int | None
) -> bool:
    """Copy an OME-Zarr image's ``omero`` channel metadata onto ``target``, where ``target``'s
    NGFF version keeps it, if it describes ``n_channels`` channels (None: one); whether it did."""
    from zarr.storage import LocalStore

    from linumpy.io.formats import for_zarr_format
    from linumpy.io.ngff_validation import validate_image_attrs

    attrs = _group_attrs(source)
    omero = attrs.get("ome", attrs).get("omero")
    channels = omero.get("channels") if isinstance(omero, dict) else None
    if not isinstance(channels, list) or len(channels) != (n_channels or 1):
        return False
    group = zarr.open_group(store=LocalStore(target), mode="r+")
    zarr_format = group.metadata.zarr_format
    new = for_zarr_format(zarr_format).with_ome(group.attrs.asdict(), "omero", omero)
    validate_image_attrs(new, zarr_format, target)
    group.attrs.update(new)
    return True
