"""OME-Zarr images as labelled arrays: ``xarray.DataArray`` (:func:`open_dataarray`) and
napari's layer arguments (:func:`napari_image`, :func:`napari_layers`), placed by the NGFF axes,
scales and translations (a voxel ``i`` lies at ``global_scale * (scale * i + translation) +
global_translation``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr
from zarr.storage import LocalStore

from linumpy.errors import LinumpyError
from linumpy.io.blocks import region_bounds
from linumpy.io.dask_read import dask_volume
from linumpy.io.metadata import (
    Axis,
    Coordinates,
    axes_from_ngff,
    make_axes,
    multiscale_metadata,
    scale_of,
    translation_of,
)
from linumpy.io.omezarr import open_array
from linumpy.io.stores import describe, location, open_node, parse_source

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["napari_image", "napari_layers", "open_dataarray", "placement"]


def placement(
    path: Any, level: int = 0, *, storage_options: dict[str, Any] | None = None
) -> tuple[Coordinates, int]:
    """The axes, scale and translation of an image's level (pixel units for a plain array),
    and the image's number of levels."""
    source = parse_source(path, storage_options)
    if source.local is not None:
        node = zarr.open(store=LocalStore(source.local, read_only=True), mode="r")
    else:
        node = open_node(source)
    name = describe(path)
    if isinstance(node, zarr.Array):
        try:
            axes = make_axes(node.ndim)
        except ValueError:  # 1-D or over 5-D: named like numpy's axes
            axes = tuple(Axis(f"dim_{i}", None, None) for i in range(node.ndim))
        return Coordinates(axes, (1.0,) * node.ndim, (0.0,) * node.ndim), 1
    multiscale = multiscale_metadata(node, name)
    datasets = multiscale["datasets"]
    if not 0 <= level < len(datasets):
        raise LinumpyError(f"{name}: level {level} out of range; the image has {len(datasets)}")
    axes = axes_from_ngff(multiscale.get("axes") or [])
    ndim = len(axes)
    own = datasets[level].get("coordinateTransformations", [])
    shared = multiscale.get("coordinateTransformations", [])
    scale = scale_of(own) or [1.0] * ndim
    shift = translation_of(own) or [0.0] * ndim
    global_scale = scale_of(shared) or [1.0] * ndim
    global_shift = translation_of(shared) or [0.0] * ndim
    scales = tuple(g * s for g, s in zip(global_scale, scale))
    translation = tuple(g * t + u for g, t, u in zip(global_scale, shift, global_shift))
    return Coordinates(axes, scales, translation), len(datasets)


def open_dataarray(
    path: Any,
    *,
    level: int = 0,
    gpu: bool = False,
    region: slice | Sequence[slice] | None = None,
    chunks: Any = None,
    settings: Any = None,
    storage_options: dict[str, Any] | None = None,
) -> xr.DataArray:
    """Open an image's level as a lazy ``xarray.DataArray`` (``open_volume(..., xarray=True)``):
    dims are the NGFF axis names, space and time axes have coordinates of voxel positions; the
    attributes hold ``units``, ``scale``, ``translation``, ``axis_types``, ``level``, ``source``."""
    try:
        import xarray
    except ImportError as exc:
        raise LinumpyError(f"open_volume(xarray=True) needs xarray ({exc})") from None
    data = dask_volume(
        path,
        level=level,
        gpu=gpu,
        region=region,
        chunks=chunks,
        settings=settings,
        storage_options=storage_options,
    )
    where, _ = placement(path, level, storage_options=storage_options)
    if len(where.axes) != data.ndim:
        raise LinumpyError(f"{describe(path)}: {len(where.axes)} axes for {data.ndim} dimensions")
    shape = open_array(path, level, storage_options=storage_options).shape
    starts = [bound.start for bound in region_bounds(region, shape, describe(path))]
    coords: dict[str, Any] = {}
    for axis, size, start, scale, shift in zip(
        where.axes, data.shape, starts, where.scale, where.translation
    ):
        index = np.arange(start, start + size)
        if axis.type in ("space", "time") or axis.type is None and axis.unit:
            values = shift + scale * index.astype(np.float64)
            coords[axis.name] = (axis.name, values, {"units": axis.unit} if axis.unit else {})
        else:
            coords[axis.name] = (axis.name, index)
    attrs = {
        "source": describe(path),
        "level": level,
        "units": {a.name: a.unit for a in where.axes},
        "axis_types": {a.name: a.type for a in where.axes},
        "scale": where.scale,
        "translation": where.translation,
    }
    name = os.path.basename(describe(path).rstrip("/")) or None
    return xarray.DataArray(
        data, dims=[a.name for a in where.axes], coords=coords, attrs=attrs, name=name
    )


def napari_image(
    path: Any,
    *,
    gpu: bool = False,
    storage_options: dict[str, Any] | None = None,
    chunks: Any = None,
) -> tuple[Any, dict[str, Any]]:
    """The arguments of napari's ``viewer.add_image`` for an OME-Zarr image, every level lazy (its
    label images are :func:`napari_layers`' ``labels`` layers)."""
    if _image_label(path, storage_options) is not None:
        raise LinumpyError(
            f"{describe(path)} is a label image: napari_layers() gives it as a 'labels' layer"
        )
    return _layer(path, gpu, storage_options, chunks, channels=True)


def _layer(
    path: Any, gpu: bool, storage_options: Any, chunks: Any, *, channels: bool
) -> tuple[Any, dict[str, Any]]:
    """Every level of an image (lazy) and the layer arguments napari's layers share: where it
    lies, its name, and with ``channels`` its channel axis and ``omero`` channels."""
    where, levels = placement(path, 0, storage_options=storage_options)
    data = [
        dask_volume(path, level=k, gpu=gpu, chunks=chunks, storage_options=storage_options)
        for k in range(levels)
    ]
    names = [a.name for a in where.axes]
    channel = [i for i, a in enumerate(where.axes) if a.type == "channel" and channels]
    keep = [i for i in range(len(names)) if i not in channel]
    kwargs: dict[str, Any] = {
        "multiscale": len(data) > 1,
        "name": os.path.basename(describe(path).rstrip("/")),
        "scale": tuple(where.scale[i] for i in keep),
        "translate": tuple(where.translation[i] for i in keep),
        "axis_labels": tuple(names[i] for i in keep),
        "units": tuple(where.axes[i].unit or "pixel" for i in keep),
    }
    if channel:
        kwargs["channel_axis"] = channel[0]
        kwargs.update(_channel_kwargs(path, data[0].shape[channel[0]], storage_options))
    return (data if len(data) > 1 else data[0]), kwargs


def napari_layers(
    path: Any,
    *,
    gpu: bool = False,
    storage_options: dict[str, Any] | None = None,
    chunks: Any = None,
) -> list[tuple[Any, dict[str, Any], str]]:
    """napari's layer data of an OME-Zarr image: ``(data, kwargs, layer_type)`` per layer, every
    level lazy: the image an ``image`` layer (:func:`napari_image`), each label image its ``labels``
    group lists a ``labels`` layer with its ``colors`` as a ``colormap`` (RGBA from 0 to 1) and its
    ``properties`` as ``features``; a label image alone is one ``labels`` layer. napari itself is
    not needed: ``getattr(viewer, "add_" + layer_type)(data, **kwargs)`` adds them."""
    own = _image_label(path, storage_options)
    if own is not None:
        return [_labels_layer(path, own, gpu, storage_options, chunks)]
    layers = [(*_layer(path, gpu, storage_options, chunks, channels=True), "image")]
    for name, source in _label_images(path, storage_options):
        meta = _image_label(source, storage_options)
        layer = _labels_layer(source, meta or {}, gpu, storage_options, chunks)
        layer[1]["name"] = name
        layers.append(layer)
    return layers


def _ome(node: Any) -> dict[str, Any]:
    """A zarr group's OME metadata (under ``ome`` in NGFF 0.5, the attributes in 0.4)."""
    if not isinstance(node, zarr.Group):
        return {}
    attrs = node.attrs.asdict()
    ome = attrs.get("ome", attrs)
    return ome if isinstance(ome, dict) else {}


def _image_label(path: Any, storage_options: Any) -> dict[str, Any] | None:
    """The ``image-label`` metadata of a label image, None for an image of another kind."""
    meta = _ome(open_node(parse_source(path, storage_options))).get("image-label")
    return meta if isinstance(meta, dict) else None


def _label_images(path: Any, storage_options: Any) -> list[tuple[str, Any]]:
    """``(name, source)`` of each label image an image's ``labels`` group lists (none when it
    has no such group)."""
    if not isinstance(path, zarr.Group | str | os.PathLike):  # a store: no path to its labels
        return []
    try:
        names = _ome(open_node(parse_source(_child(path, "labels"), storage_options))).get("labels")
    except (LinumpyError, OSError, KeyError):  # no labels group
        return []
    if not isinstance(names, list):
        return []
    return [(str(name), _child(path, "labels", str(name))) for name in names]


def _child(path: Any, *parts: str) -> Any:
    """The node ``parts`` below a zarr group, or the path or URL ``parts`` below ``path``."""
    if isinstance(path, zarr.Group):
        return path["/".join(parts)]
    return location(os.fspath(path), *parts)


def _labels_layer(
    path: Any, meta: dict[str, Any], gpu: bool, storage_options: Any, chunks: Any
) -> tuple[Any, dict[str, Any], str]:
    """A label image's ``labels`` layer: where it lies, its colours and its properties."""
    data, kwargs = _layer(path, gpu, storage_options, chunks, channels=False)
    colormap = {}
    for entry in meta.get("colors") or []:
        value, rgba = (
            (entry.get("label-value"), entry.get("rgba"))
            if isinstance(entry, dict)
            else (None, None)
        )
        if isinstance(value, int) and isinstance(rgba, list) and len(rgba) == 4:
            colormap[int(value)] = tuple(float(c) / 255 for c in rgba)
    if colormap:
        kwargs["colormap"] = colormap
    rows = [
        entry
        for entry in meta.get("properties") or []
        if isinstance(entry, dict) and isinstance(entry.get("label-value"), int)
    ]
    if rows:
        columns = sorted({key for row in rows for key in row} - {"label-value"})
        features: dict[str, list[Any]] = {"index": [int(row["label-value"]) for row in rows]}
        features.update({key: [row.get(key) for row in rows] for key in columns})
        kwargs["features"] = features
    return data, kwargs, "labels"


def _channel_kwargs(path: Any, n_channels: int, storage_options: Any) -> dict[str, Any]:
    """napari's per-channel arguments from an image's ``omero`` metadata, when it describes
    ``n_channels`` channels: names, colormaps (black to the channel's colour), contrast limits
    (its window) and visibility; nothing otherwise."""
    omero = _ome(open_node(parse_source(path, storage_options))).get("omero")
    channels = omero.get("channels") if isinstance(omero, dict) else None
    if not isinstance(channels, list) or len(channels) != n_channels:
        return {}
    if not all(isinstance(c, dict) for c in channels):
        return {}
    kwargs: dict[str, Any] = {}
    if all(isinstance(c.get("label"), str) for c in channels):
        kwargs["name"] = [c["label"] for c in channels]
    if all(isinstance(c.get("color"), str) and len(c["color"]) == 6 for c in channels):
        kwargs["colormap"] = [["#000000", "#" + c["color"]] for c in channels]
    windows = [c.get("window") for c in channels]
    if all(isinstance(w, dict) and "start" in w and "end" in w for w in windows):
        kwargs["contrast_limits"] = [[float(w["start"]), float(w["end"])] for w in windows]
    if all(isinstance(c.get("active"), bool) for c in channels):
        kwargs["visible"] = [c["active"] for c in channels]
    return kwargs
