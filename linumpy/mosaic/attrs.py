"""linumpy's own attributes of an OME-Zarr image (under ``"linumpy"``): a mosaic grid's tile and
grid shapes, a demo's ground truth; the tile shape of a mosaic grid; and the coordinates (axes,
units, voxel size, position) of the images the stitch and the projection derive from an input.

Light to import (zarr, no dask): the demo writer and readers of the attributes need no more.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import zarr

from linumpy.io import open_array
from linumpy.io.lazy import storage_unit
from linumpy.io.metadata import Coordinates, derive_coordinates
from linumpy.io.omezarr import read_coordinates
from linumpy.mosaic.transform import TileTransform, parse_tile_shape

__all__ = [
    "ATTRS_KEY",
    "copy_omero",
    "mosaic_tile_shape",
    "projection_coordinates",
    "read_linumpy_attrs",
    "stitch_coordinates",
    "write_linumpy_attrs",
]

#: Key of an OME-Zarr image's group attributes under which linumpy keeps its own metadata:
#: ``{"mosaic": {"tile_shape": [h, w], "grid_shape": [rows, cols]}, "demo": {...}, ...}``.
ATTRS_KEY = "linumpy"


def read_linumpy_attrs(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``linumpy`` attributes of an OME-Zarr image (empty for a plain array or none).

    Examples
    --------
    >>> import tempfile
    >>> from linumpy.mosaic.demo import make_demo_data
    >>> from linumpy.mosaic.attrs import read_linumpy_attrs
    >>> path = tempfile.mkdtemp() + "/mosaic.ome.zarr"
    >>> _ = make_demo_data(path, grid_shape=(2, 3), tile_shape=(8, 64, 64))
    >>> attrs = read_linumpy_attrs(path)
    >>> sorted(attrs), attrs["mosaic"]
    (['demo', 'mosaic'], {'tile_shape': [64, 64], 'grid_shape': [2, 3]})
    """
    from linumpy.io.stores import open_store, parse_source

    node = zarr.open(store=open_store(parse_source(path)), mode="r")  # paths stay paths
    if isinstance(node, zarr.Array):
        return {}
    return dict(node.attrs.get(ATTRS_KEY, {}))


def write_linumpy_attrs(path: str | os.PathLike[str], values: dict[str, Any]) -> None:
    """Merge ``values`` into the ``linumpy`` attributes of the OME-Zarr image at ``path``.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import save_omezarr
    >>> from linumpy.mosaic.attrs import read_linumpy_attrs, write_linumpy_attrs
    >>> path = tempfile.mkdtemp() + "/image.ome.zarr"
    >>> save_omezarr(np.zeros((2, 6, 4), np.uint16), path, voxel_size=(1.0, 1.0, 1.0))
    >>> read_linumpy_attrs(path)
    {}
    >>> write_linumpy_attrs(path, {"mosaic": {"tile_shape": [3, 2], "grid_shape": [2, 2]}})
    >>> write_linumpy_attrs(path, {"note": "acquired on Monday"})
    >>> read_linumpy_attrs(path)
    {'mosaic': {'tile_shape': [3, 2], 'grid_shape': [2, 2]}, 'note': 'acquired on Monday'}
    """
    group = zarr.open_group(store=zarr.storage.LocalStore(path), mode="r+")
    group.attrs[ATTRS_KEY] = {**dict(group.attrs.get(ATTRS_KEY, {})), **values}


def mosaic_tile_shape(
    path: str | os.PathLike[str], tile_shape: Sequence[int] | None = None
) -> tuple[int, int]:
    """The ``(tile_h, tile_w)`` of a mosaic grid image.

    Taken from ``tile_shape`` when given, else from the image's ``linumpy.mosaic`` attributes,
    else from its shard shape, else its chunk shape (a mosaic grid stores one tile per shard,
    or per chunk).

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import save_omezarr
    >>> from linumpy.mosaic.attrs import mosaic_tile_shape, write_linumpy_attrs
    >>> path = tempfile.mkdtemp() + "/grid.ome.zarr"
    >>> save_omezarr(np.zeros((2, 16, 24), np.uint16), path, voxel_size=(1.0, 1.0, 1.0),
    ...              chunks=(2, 8, 8), shards=None)  # one chunk per tile, no attributes
    >>> mosaic_tile_shape(path)
    (8, 8)
    >>> write_linumpy_attrs(path, {"mosaic": {"tile_shape": [8, 12]}})
    >>> mosaic_tile_shape(path), mosaic_tile_shape(path, (4, 6))
    ((8, 12), (4, 6))
    """
    if tile_shape is not None:
        return parse_tile_shape(tile_shape)
    stored = read_linumpy_attrs(path).get("mosaic", {}).get("tile_shape")
    if stored is not None:
        return parse_tile_shape(stored)
    return parse_tile_shape(storage_unit(open_array(path))[-2:])


def stitch_coordinates(source: str | os.PathLike[str], transform: TileTransform) -> Coordinates:
    """The coordinates of the image stitching the mosaic grid ``source`` with ``transform``
    (normalized): the grid's axes, units and voxel size, and its translation moved to where the
    stitched image starts (tile ``(0, 0)`` lies at its pixel position in the output).

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import save_omezarr
    >>> path = tempfile.mkdtemp() + "/grid.ome.zarr"
    >>> save_omezarr(np.zeros((2, 16, 16), np.uint8), path, voxel_size=(5, 2, 2),
    ...              translation=(0, 100, 100))
    >>> layout = TileTransform([[6, 0], [0, 6]], (0, 0), (8, 8), (2, 2))
    >>> shifted = TileTransform(layout.matrix, (3, 0), (8, 8), (2, 2))
    >>> stitch_coordinates(path, shifted).translation
    (0.0, 94.0, 100.0)
    """
    coordinates = read_coordinates(source)
    first = transform.pixel_positions()[0, 0]
    depth = (0.0,) * (len(coordinates.axes) - 2)
    return derive_coordinates(coordinates, origin=(*depth, -float(first[0]), -float(first[1])))


def projection_coordinates(source: str | os.PathLike[str], axis: int) -> Coordinates:
    """The coordinates of a projection of ``source`` along ``axis``: the axes after it (the
    plane's; those before, of length 1 in a ``(1, 1, Z, Y, X)`` image, go too), their units,
    voxel sizes and positions.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import save_omezarr
    >>> path = tempfile.mkdtemp() + "/volume.ome.zarr"
    >>> save_omezarr(np.zeros((2, 4, 4), np.uint8), path, voxel_size=(5, 2, 2),
    ...              translation=(10, 20, 30))
    >>> projection_coordinates(path, 0).translation
    (20.0, 30.0)
    """
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
    """Copy an OME-Zarr image's ``omero`` channel metadata (names, colours, windows) onto
    ``target``, in the place ``target``'s NGFF version keeps it; kept only when it describes
    ``n_channels`` channels (the target's channel axis length; None: no channel axis, one).

    Returns
    -------
    bool
        Whether anything was copied.

    Examples
    --------
    >>> import numpy as np, tempfile, zarr
    >>> from linumpy.io import save_omezarr
    >>> folder = tempfile.mkdtemp()
    >>> save_omezarr(np.zeros((2, 4, 4), np.uint8), folder + "/a", voxel_size=(1, 1, 1), axes="cyx")
    >>> group = zarr.open_group(folder + "/a")
    >>> channels = [{"label": "DAPI", "color": "0000FF", "active": True,
    ...              "window": {"start": 0, "end": 255, "min": 0, "max": 255}}] * 2
    >>> group.attrs["ome"] = {**group.attrs["ome"], "omero": {"channels": channels}}
    >>> save_omezarr(np.zeros((2, 4, 4), np.uint8), folder + "/b", voxel_size=(1, 1, 1),
    ...              axes="cyx", ngff_version="0.4")
    >>> copy_omero(folder + "/a", folder + "/b", 2)
    True
    >>> zarr.open_group(folder + "/b").attrs["omero"]["channels"][0]["label"]
    'DAPI'
    """
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
