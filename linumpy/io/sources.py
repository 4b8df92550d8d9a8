"""Images to convert, as their files describe them: TIFF stacks (axes, voxel sizes and units
from tifffile's ImageJ or OME-XML metadata), ``.npy`` files, zarr arrays.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import zarr

from linumpy.errors import LinumpyError, SeriesError
from linumpy.io.metadata import Axis, make_axes
from linumpy.io.omezarr import open_array, read_axes, read_omezarr

__all__ = ["TIFF_SUFFIXES", "SourceImage", "open_image", "open_tiff"]

logger = logging.getLogger(__name__)

TIFF_SUFFIXES = (".tif", ".tiff")
_NGFF_ORDER = "tczyx"
#: tifffile's axis letters with an NGFF equivalent (S: the samples of an RGB(A) pixel).
_TIFF_AXES = {"T": "t", "C": "c", "S": "c", "Z": "z", "Y": "y", "X": "x"}
#: tifffile's letters for an axis of pages it knows nothing about (unknown, image sequence).
_PAGE_AXES = "QI"
_UNITS = {
    "micrometer": ("um", "µm", "micron", "microns", "micrometer", "micrometre"),
    "nanometer": ("nm", "nanometer", "nanometre"),
    "millimeter": ("mm", "millimeter", "millimetre"),
    "centimeter": ("cm", "centimeter", "centimetre"),
    "meter": ("m", "meter", "metre"),
    "picometer": ("pm", "picometer"),
    "angstrom": ("å", "angstrom"),
    "inch": ("in", "inch"),
    "second": ("s", "sec", "second", "seconds"),
    "millisecond": ("ms", "millisecond"),
    "microsecond": ("µs", "us", "microsecond"),
    "minute": ("min", "minute"),
    "hour": ("h", "hour"),
}
_UNIT_NAMES = {alias: name for name, aliases in _UNITS.items() for alias in aliases}
_UNCALIBRATED = ("", "pixel", "pixels", "px")


class SourceImage(NamedTuple):
    """An image to convert, as its file describes it (:func:`open_image`)."""

    data: Any
    axes: tuple[Axis, ...]
    order: tuple[int, ...]
    voxel_size: tuple[float, ...] | None = None
    voxel_size_from: str | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape in NGFF axis order."""
        return tuple(int(self.data.shape[i]) for i in self.order)

    @property
    def dtype(self) -> np.dtype:
        """The data type."""
        return np.dtype(self.data.dtype)


def open_tiff(path: str | os.PathLike[str], series: int = 0) -> zarr.Array:
    """A TIFF series as a read-only zarr array (tifffile's zarr view of its pages, lazy)."""
    import tifffile

    return zarr.open(tifffile.imread(path, aszarr=True, series=series, level=0), mode="r")


def _unit(value: Any, path: str | os.PathLike[str], what: str) -> str | None:
    """The NGFF (UDUNITS) name of a unit as TIFF metadata spells it; None when uncalibrated or
    unknown (then the sizes in that unit are ignored)."""
    text = str(value).strip().replace("\\u00B5", "µ").replace("\u03bc", "µ")
    if text.lower() in _UNCALIBRATED:
        return None
    name = _UNIT_NAMES.get(text) or _UNIT_NAMES.get(text.lower())
    if name is None:
        logger.warning("%s: unknown unit %r in the %s: its sizes are ignored", path, text, what)
    return name


def _imagej_scales(tf: Any, series: Any, path: str) -> dict[str, tuple[float, str | None]]:
    meta = tf.imagej_metadata or {}
    unit = _unit(meta.get("unit", ""), path, "ImageJ metadata")
    scales: dict[str, tuple[float, str | None]] = {}
    if unit is not None:
        tags = series.keyframe.tags
        for letter, tag in (("x", "XResolution"), ("y", "YResolution")):
            if tag in tags:
                pixels, length = tags[tag].value
                if pixels > 0 and length > 0:
                    scales[letter] = (length / pixels, unit)
        if meta.get("spacing"):
            scales["z"] = (float(meta["spacing"]), unit)
    if meta.get("finterval"):
        scales["t"] = (float(meta["finterval"]), "second")
    return scales


def _ome_scales(tf: Any, index: int, path: str) -> dict[str, tuple[float, str | None]]:
    from xml.etree.ElementTree import ParseError

    import tifffile

    try:
        images = tifffile.xml2dict(tf.ome_metadata).get("OME", {}).get("Image", [])
    except ParseError as exc:
        raise LinumpyError(f"{path}: malformed OME-XML metadata: {exc}") from None
    images = images if isinstance(images, list) else [images]
    # tifffile names an OME series after its Image; the index is the fallback
    named = [i for i, image in enumerate(images) if image.get("Name") == tf.series[index].name]
    index = named[0] if len(named) == 1 else index
    if index >= len(images):
        return {}
    pixels = images[index].get("Pixels", {})
    scales: dict[str, tuple[float, str | None]] = {}
    for name, key, default in (
        ("x", "PhysicalSizeX", "µm"),
        ("y", "PhysicalSizeY", "µm"),
        ("z", "PhysicalSizeZ", "µm"),
        ("t", "TimeIncrement", "s"),
    ):
        unit = _unit(pixels.get(f"{key}Unit", default), path, "OME-XML metadata")
        if pixels.get(key) and unit is not None:
            scales[name] = (float(pixels[key]), unit)
    return scales


def _tiff_axes(letters: str, shape: Sequence[int], path: str) -> tuple[list[str], list[int]]:
    """NGFF axis names and, for each, the TIFF axis it comes from (in NGFF order)."""
    found: dict[str, int] = {}
    for index, (letter, size) in enumerate(zip(letters, shape)):
        name = _TIFF_AXES.get(letter)
        if name is None and letter in _PAGE_AXES and "Z" not in letters and "z" not in found:
            name = "z"
        if name is None and size == 1:
            continue
        if name is None or name in found:
            what = f"axis {letter} (length {size})"
            why = "has no OME-Zarr equivalent" if name is None else f"is a second {name} axis"
            raise LinumpyError(f"{path}: TIFF axes {letters} {tuple(shape)}: {what} {why}")
        found[name] = index
    names = sorted(found, key=_NGFF_ORDER.index)
    return names, [found[n] for n in names]


def _open_tiff_image(path: Path, series: int) -> SourceImage:
    import tifffile

    with tifffile.TiffFile(path) as tf:
        if not 0 <= series < len(tf.series):
            raise SeriesError(
                f"{path} holds {len(tf.series)} series (0 to {len(tf.series) - 1}), "
                f"not series {series}"
            )
        chosen = tf.series[series]
        letters, shape = chosen.axes, tuple(chosen.shape)
        names, order = _tiff_axes(letters, shape, os.fspath(path))
        if tf.is_ome and tf.ome_metadata:
            scales, origin = _ome_scales(tf, series, os.fspath(path)), "OME-XML metadata"
        elif tf.is_imagej:
            scales, origin = _imagej_scales(tf, chosen, os.fspath(path)), "ImageJ metadata"
        else:
            scales, origin = {}, None
    space_units = [u for n, (_, u) in scales.items() if n in "zyx" and u]
    default_unit = space_units[0] if space_units else "micrometer"
    axes = []
    for name in names:
        unit = scales[name][1] if name in scales else default_unit if name in "zyx" else None
        axes.append(Axis(name, None, unit))
    try:
        checked = make_axes(len(axes), axes)
    except ValueError as exc:
        raise LinumpyError(f"{path}: TIFF axes {letters} {shape}: {exc}") from None
    voxel_size = None
    if scales:
        voxel_size = tuple(scales[n][0] if n in scales else 1.0 for n in names)
    data = open_tiff(path, series)
    return SourceImage(data, checked, tuple(order), voxel_size, origin if scales else None)


def open_image(path: str | os.PathLike[str], *, series: int | None = None) -> SourceImage:
    """Open an image to convert, with its axes and voxel size as the file describes them, reading
    only metadata: a TIFF as a zarr view of its pages, a ``.npy`` file as a memory map, an OME-Zarr
    image or a plain zarr array."""
    path = Path(path)
    suffix = path.suffix.lower()
    if series not in (None, 0) and suffix not in TIFF_SUFFIXES:
        raise SeriesError(f"{path}: only TIFF files have series")
    try:
        if suffix == ".npy":
            data = _load_npy(path)
            image = SourceImage(data, _default_axes(path, data.ndim), tuple(range(data.ndim)))
        elif suffix in TIFF_SUFFIXES:
            image = _open_tiff_image(path, series or 0)
        else:
            image = None
    except (OSError, ValueError) as exc:  # tifffile's TiffFileError is a ValueError
        raise LinumpyError(f"{path}: cannot read it as {suffix[1:]}: {exc}") from None
    if image is None:
        node = open_array(path)  # raises LinumpyError for anything that is not zarr
        try:
            data, voxel_size = read_omezarr(path)
        except LinumpyError:
            image = SourceImage(node, _default_axes(path, node.ndim), tuple(range(node.ndim)))
        else:
            order = tuple(range(data.ndim))
            image = SourceImage(data, read_axes(path), order, voxel_size, "the OME-Zarr input")
    if image.dtype.kind not in "biufc":
        raise LinumpyError(f"{path}: data of type {image.dtype} are not numbers")
    return image


def _load_npy(path: Path) -> np.ndarray:
    """A ``.npy`` file as a memory map; anything else (text, pickles) a one-line LinumpyError."""
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as exc:
        if "pickle" not in str(exc):
            raise
        # numpy's own message advises loading the file unsafely: never for a file to convert
        raise LinumpyError(
            f"{path}: not a .npy array of numbers (text, or pickled objects)"
        ) from None


def _default_axes(path: Path, ndim: int) -> tuple[Axis, ...]:
    try:
        return make_axes(ndim)
    except ValueError:
        raise LinumpyError(f"{path}: OME-Zarr images have 2 to 5 axes, not {ndim}") from None
