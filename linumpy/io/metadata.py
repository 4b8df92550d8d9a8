"""OME-NGFF image metadata: axes (names, types, units), voxel sizes, multiscale datasets, and the
checks a writer applies to its arguments (chunk shapes that would explode file counts included).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import zarr

from linumpy.errors import LinumpyError
from linumpy.io.engine.memory import format_size
from linumpy.io.formats import NgffFormat, NgffVersion, for_zarr_format, format_of
from linumpy.io.ngff_validation import TYPES_BY_NAME, validate_image_attrs

__all__ = ["Axis"]

logger = logging.getLogger(__name__)

_DEFAULT_NAMES = "tczyx"

#: More chunks than this at full resolution is an error whatever their size: file systems and
#: zarr's per-chunk work do not scale to it.
MAX_CHUNKS = 10_000_000
#: More chunks than this, each smaller than :data:`SMALL_CHUNK_BYTES`, is an error.
MANY_CHUNKS = 1_000_000
#: Chunks smaller than this are "small" (per-chunk overheads dominate their cost).
SMALL_CHUNK_BYTES = 64 * 1024
#: More small chunks than this gets a warning.
WARN_CHUNKS = 100_000


class Axis(NamedTuple):
    """One axis of an OME-Zarr image, as in the NGFF ``axes`` metadata.

    Parameters
    ----------
    name
        The axis name (``"z"``, ``"c"``, ...), unique in the image.
    type
        ``"space"``, ``"time"``, ``"channel"``, another (custom) type or None.
    unit
        The unit of the axis (``"micrometer"``, ``"nanometer"``, ``"second"``...), or None.

    Examples
    --------
    >>> Axis("z", "space", "nanometer")
    Axis(name='z', type='space', unit='nanometer')
    >>> make_axes(3, "cyx")[0]
    Axis(name='c', type='channel', unit=None)
    """

    name: str
    type: str | None = None
    unit: str | None = None


class Coordinates(NamedTuple):
    """Where an image's voxels lie: its axes, the voxel size along each axis and the position of
    its first voxel (level 0's ``scale`` and ``translation``, the multiscale's own folded in)."""

    axes: tuple[Axis, ...]
    scale: tuple[float, ...]
    translation: tuple[float, ...] | None = None


def derive_coordinates(
    source: Coordinates,
    *,
    keep: Sequence[int] | None = None,
    origin: Sequence[float] | None = None,
) -> Coordinates:
    """The coordinates of an image derived from ``source``: the axes in ``keep`` (a projection
    drops one), their units and voxel size, and the first voxel at ``origin`` in the source's voxel
    grid (no translation stays none while the origin is 0)."""
    keep = tuple(range(len(source.axes))) if keep is None else tuple(int(i) for i in keep)
    origin = (0.0,) * len(keep) if origin is None else tuple(float(o) for o in origin)
    if len(origin) != len(keep):
        raise ValueError(f"origin {origin}: one value per kept axis {keep}")
    axes = tuple(source.axes[i] for i in keep)
    scale = tuple(source.scale[i] for i in keep)
    translation = None
    if source.translation is not None or any(origin):
        start = source.translation or (0.0,) * len(source.axes)
        translation = tuple(
            start[i] + o * source.scale[i] + 0.0 for i, o in zip(keep, origin)
        )  # + 0.0: no -0.0 in the metadata
    return Coordinates(axes, scale, translation)


def level_translation(
    translation: Sequence[float], scale: Sequence[float], factor: Sequence[int]
) -> list[float]:
    """The translation of a pyramid level downsampled by ``factor`` (a mean of ``factor``
    voxels): its first voxel's centre lies between the first ``factor`` voxels of level 0."""
    return [t + (f - 1) * s / 2 for t, s, f in zip(translation, scale, factor)]


def parse_voxel_size(value: Sequence[float], ndim: int) -> tuple[float, ...]:
    """Return the voxel size as floats, one positive value per axis, else raise ValueError."""
    sizes = tuple(float(v) for v in value)
    if len(sizes) != ndim or not all(math.isfinite(v) and v > 0 for v in sizes):
        raise ValueError(f"voxel_size must hold {ndim} positive numbers, got {tuple(value)}")
    return sizes


def _axis(value: str | Axis | Mapping[str, Any], unit: str | None) -> Axis:
    if isinstance(value, str):
        kind = TYPES_BY_NAME.get(value)
        return Axis(value, kind, unit if kind == "space" else None)
    if isinstance(value, Mapping):
        value = Axis(str(value["name"]), value.get("type"), value.get("unit"))
    if not isinstance(value, Axis):
        raise ValueError(f"an axis is a name, an Axis or a mapping, got {value!r}")
    return value._replace(type=value.type or TYPES_BY_NAME.get(value.name))


def make_axes(
    ndim: int,
    axes: str | Sequence[str | Axis | Mapping[str, Any]] | None = None,
    unit: str = "micrometer",
) -> tuple[Axis, ...]:
    """The axes of an ``ndim``-D image, checked against the OME-NGFF rules: ``axes`` as names
    (``"cyx"``), :class:`Axis` or NGFF mappings, by default the last ``ndim`` of ``tczyx``;
    ``unit`` is that of the space axes given by name."""
    if not 2 <= ndim <= 5:
        raise ValueError(f"OME-Zarr images have 2 to 5 dimensions, got {ndim}")
    if axes is None:
        axes = _DEFAULT_NAMES[-ndim:]
    parsed = tuple(_axis(a, unit) for a in axes)
    label = "".join(a.name for a in parsed) if all(len(a.name) == 1 for a in parsed) else parsed
    if len(parsed) != ndim:
        raise ValueError(f"axes {label}: {len(parsed)} axes for {ndim}-D data")
    if len({a.name for a in parsed}) != ndim or not all(a.name for a in parsed):
        raise ValueError(f"axes {label}: names must be unique and non-empty")
    types = [a.type for a in parsed]
    if not 2 <= types.count("space") <= 3:
        raise ValueError(f"axes {label}: 2 or 3 space axes are needed (NGFF)")
    if types.count("time") > 1 or types.count("channel") > 1:
        raise ValueError(f"axes {label}: at most one time and one channel axis (NGFF)")
    if sum(t not in ("space", "time", "channel") for t in types) > 1:
        raise ValueError(f"axes {label}: at most one axis of another type (NGFF)")
    n_space = types.count("space")
    if types[-n_space:] != ["space"] * n_space:
        raise ValueError(f"axes {label}: space axes must come last (NGFF)")
    if "time" in types and types[0] != "time":
        raise ValueError(f"axes {label}: the time axis must come first (NGFF)")
    return parsed


def image_attrs(
    name: str,
    axes: Sequence[Axis],
    scales: Sequence[Sequence[float]],
    version: NgffVersion | NgffFormat,
    translations: Sequence[Sequence[float]] | None = None,
) -> dict[str, Any]:
    """The attributes of an OME-Zarr image group as ome-zarr-models would serialise them, built as
    plain JSON (importing the models costs more than a projection's work)."""
    multiscale: dict[str, Any] = {
        "axes": [
            {key: value for key, value in axis._asdict().items() if value is not None}
            for axis in axes
        ],
        "datasets": [
            {
                "path": str(level),
                "coordinateTransformations": [
                    {"type": "scale", "scale": [float(v) for v in scale]},
                    *(
                        [
                            {
                                "type": "translation",
                                "translation": [float(v) for v in translations[level]],
                            }
                        ]
                        if translations is not None
                        else []
                    ),
                ],
            }
            for level, scale in enumerate(scales)
        ],
        "name": name,
    }
    return format_of(version).image_attrs(multiscale)


def axes_from_ngff(entries: Sequence[Any]) -> tuple[Axis, ...]:
    """Axes from NGFF metadata: mappings (0.4, 0.5) or plain names (0.3)."""
    return tuple(
        Axis(e) if isinstance(e, str) else Axis(str(e["name"]), e.get("type"), e.get("unit"))
        for e in entries
    )


def check_chunk_count(shape: Sequence[int], chunks: Sequence[int], itemsize: int) -> None:
    """Refuse chunk shapes that would make file counts or per-chunk work explode (more than
    :data:`MAX_CHUNKS`, or :data:`MANY_CHUNKS` under :data:`SMALL_CHUNK_BYTES`); warn above
    :data:`WARN_CHUNKS` small chunks."""
    shape, chunks = tuple(int(s) for s in shape), tuple(int(c) for c in chunks)
    count = math.prod(-(-s // c) for s, c in zip(shape, chunks, strict=True))
    size = math.prod(min(c, s) for s, c in zip(shape, chunks, strict=True)) * itemsize
    small = size < SMALL_CHUNK_BYTES
    what = f"chunks {chunks} cut a {shape} image into {count:,} chunks of {format_size(size)} each"
    hint = "use larger chunks, for example 128 along each axis"
    if small and count > MANY_CHUNKS:
        raise LinumpyError(
            f"{what} (at most {MANY_CHUNKS:,} chunks under {format_size(SMALL_CHUNK_BYTES)} are "
            f"allowed); {hint}"
        )
    if count > MAX_CHUNKS:
        raise LinumpyError(f"{what} (at most {MAX_CHUNKS:,} chunks are allowed); {hint}")
    if small and count > WARN_CHUNKS:
        logger.warning("%s: writing is slow and makes many files; %s", what, hint)


def multiscale_dataset_paths(group: zarr.Group, path: str | os.PathLike[str]) -> list[str]:
    """The dataset paths of an OME-Zarr image's first multiscale, level 0 first."""
    multiscale = multiscale_metadata(group, path)
    return [dataset["path"] for dataset in multiscale["datasets"]]


def multiscale_metadata(group: zarr.Group, path: str | os.PathLike[str]) -> dict[str, Any]:
    """The first ``multiscales`` entry of an OME-Zarr group (NGFF 0.4 or 0.5), its attributes
    validated first (:func:`validate_image_attrs`)."""
    attrs = group.attrs.asdict()
    multiscales = attrs.get("ome", attrs).get("multiscales")
    if not multiscales:
        raise LinumpyError(f"{path}: a zarr group without OME-NGFF multiscales metadata")
    zarr_format = group.metadata.zarr_format
    attributes_file = _where(path, for_zarr_format(zarr_format).attributes_file)
    validate_image_attrs(attrs, zarr_format, attributes_file)
    if not multiscales[0].get("datasets"):
        raise LinumpyError(f"{path}: a zarr group without OME-NGFF multiscales metadata")
    for dataset in multiscales[0]["datasets"]:
        where = dataset.get("path") if isinstance(dataset, Mapping) else None
        parts = where.split("/") if isinstance(where, str) else [""]
        if any(part in ("", ".", "..") for part in parts):  # a leading "/" gives "" too
            raise LinumpyError(
                f"{attributes_file}: dataset path {where!r} is not a folder inside the image"
            )
    return multiscales[0]


def _where(path: str | os.PathLike[str], name: str) -> Path:
    """The metadata file ``name`` of the image at ``path`` (a URL kept as it is written)."""
    from linumpy.io.stores import location

    return location(path, name)  # type: ignore[return-value]


def scale_of(transforms: Sequence[dict[str, Any]]) -> list[float] | None:
    """The ``scale`` of a list of NGFF coordinate transformations, None if it has none."""
    for transform in transforms:
        if transform.get("type") == "scale":
            return [float(v) for v in transform["scale"]]
    return None


def translation_of(transforms: Sequence[dict[str, Any]]) -> list[float] | None:
    """The ``translation`` of a list of NGFF coordinate transformations, None if it has none."""
    for transform in transforms:
        if transform.get("type") == "translation" and "translation" in transform:
            return [float(v) for v in transform["translation"]]
    return None
