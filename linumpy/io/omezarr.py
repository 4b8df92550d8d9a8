"""OME-Zarr images: NGFF 0.5 (zarr v3) and 0.4 (zarr v2) multiscales.

The metadata is validated with ome-zarr-models when written and when read; the few fields linumpy
needs are then read from the attributes directly, which also reads NGFF 0.1 to 0.3.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import zarr

from linumpy.errors import LinumpyError
from linumpy.io.formats import format_of
from linumpy.io.metadata import (
    Axis,
    Coordinates,
    axes_from_ngff,
    multiscale_dataset_paths,
    multiscale_metadata,
    scale_of,
    translation_of,
)
from linumpy.io.recovery import staging_left
from linumpy.io.series import find_image
from linumpy.io.stores import SourceLike, location, open_node, parse_source
from linumpy.io.validate import (
    RegularFileStore,
    check_array_shape,
    check_level_axes,
    check_scale,
)

__all__ = ["open_array", "read_axes", "read_omezarr"]


logger = logging.getLogger(__name__)

_METADATA_FILES = ("zarr.json", ".zattrs", ".zarray", ".zgroup")  # attributes first


def _metadata_file(*folders: Path) -> Path:  # or UrlPath: remote metadata are named by URL
    """The first metadata file of the zarr nodes at ``folders`` that is not a JSON object, else
    the last node's first metadata file (the last folder itself when it has none)."""
    present: list[Path] = []
    for folder in folders:
        present = [folder / name for name in _METADATA_FILES if (folder / name).is_file()]
        for file in present:
            try:
                if not isinstance(json.loads(file.read_bytes()), dict):
                    return file
            except (OSError, ValueError, RecursionError):
                return file
    return present[0] if present else folders[-1]


@contextlib.contextmanager
def _malformed_metadata(*folders: str | os.PathLike[str]) -> Iterator[None]:
    """Turn the raw errors of malformed metadata (a missing key, invalid JSON...) into a
    :class:`LinumpyError` naming the metadata file at fault."""
    try:
        yield
    except LinumpyError:
        raise
    except RecursionError:
        file = _metadata_file(*map(location, folders))
        raise LinumpyError(f"{file}: malformed zarr metadata (JSON nested too deep)") from None
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
        # ValueError: invalid JSON, and zarr's own refusals (a codec, a data type, a path)
        what = f"no {exc} entry" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
        file = _metadata_file(*map(location, folders))
        raise LinumpyError(f"{file}: malformed zarr or OME-NGFF metadata ({what})") from exc


def _open_node(path: SourceLike, storage_options: Any = None) -> zarr.Array | zarr.Group:
    source = parse_source(path, storage_options)
    if source.local is None:  # a URL, a zarr node or a zarr store
        with _malformed_metadata(location(source.name)):
            return open_node(source)
    path = source.local
    if not path.exists():
        raise LinumpyError(f"{path}: no such file or directory{_staging_note(path)}")
    try:
        with _malformed_metadata(path):
            try:
                return zarr.open(store=RegularFileStore(path, read_only=True), mode="r")
            except (FileNotFoundError, zarr.errors.NodeNotFoundError) as exc:
                raise LinumpyError(f"{path}: not a zarr array or OME-Zarr image ({exc})") from None
    except LinumpyError as exc:
        if "malformed" in str(exc) and not any((path / n).is_file() for n in _METADATA_FILES):
            raise LinumpyError(f"{path}: not a zarr array or OME-Zarr image") from None
        raise


def _staging_note(path: Path) -> str:
    """What interrupted writes left beside a missing ``path``, and what recovers it (reading
    never writes: the folders are named, logged at INFO, and left to the writers)."""
    try:
        left = staging_left(path)
    except OSError:
        return ""
    if not left:
        return ""
    for folder in left:
        logger.info("%s: missing; left by an interrupted write of it: %s", path, folder)
    more = f" (and {len(left) - 1} more)" if len(left) > 1 else ""
    return (
        f"; an interrupted write left {left[0]}{more}: write it again, or run "
        f"linumpy.io.clean_staging('{path.parent}') to restore a completed image or remove it"
    )


def open_array(
    path: SourceLike, level: int = 0, *, storage_options: dict[str, Any] | None = None
) -> zarr.Array:
    """Open an OME-Zarr image's multiscale level, or a plain zarr array, read-only.

    Parameters
    ----------
    path
        An OME-Zarr image (NGFF 0.4 or 0.5) or a zarr array (v2 or v3): a local path, a
        ``file://``, ``http(s)://``, ``s3://`` or ``gs://`` URL, a ``zarr.Array``, a
        ``zarr.Group`` or a zarr store.
    level
        The multiscale level (0 is full resolution); a plain array has level 0 only.
    storage_options
        Options of a remote store (:func:`linumpy.io.remote.object_store`): ``anonymous``,
        ``endpoint_url``, credentials.

    Returns
    -------
    zarr.Array
        The array, opened read-only: reading never writes anything.

    Raises
    ------
    LinumpyError
        When the path does not exist, is not zarr, or has no such level.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import save_omezarr
    >>> path = tempfile.mkdtemp() + "/volume.ome.zarr"
    >>> save_omezarr(np.ones((8, 8, 8), np.uint8), path, voxel_size=(1, 1, 1), n_levels=2)
    >>> array = open_array(path, level=1)
    >>> array.shape, array.read_only
    ((4, 4, 4), True)
    """
    source = parse_source(path, storage_options)
    if source.local is None:
        return _open_level(path, level, storage_options)
    return _open_level(source.local, level)


def _image(path: SourceLike, storage_options: Any) -> tuple[zarr.Array | zarr.Group, Any]:
    """The node an image is read from, and its name (a zarr object's is its store path): the
    node at ``path``, or the one image of a bioformats2raw root or a plate
    (:func:`linumpy.io.series.find_image`)."""
    node = _open_node(path, storage_options)
    if not isinstance(path, str | os.PathLike):
        path = str(node.store_path)
    if isinstance(node, zarr.Group):
        attrs = node.attrs.asdict()
        ome = attrs.get("ome") if isinstance(attrs.get("ome"), dict) else attrs
        format_of(attrs, source=path)  # an unknown version is named
        if not ome.get("multiscales"):
            found = find_image(node, path)
            if found is not None:
                return found
    return node, path


def _image_group(path: SourceLike, storage_options: Any) -> tuple[zarr.Group, Any]:
    """:func:`_image`, which must be an OME-Zarr image."""
    group, path = _image(path, storage_options)
    if isinstance(group, zarr.Array):
        raise LinumpyError(f"{path}: a plain zarr array, not an OME-Zarr image")
    return group, path


def _open_level(path: SourceLike, level: int, storage_options: Any = None) -> zarr.Array:
    """The array of the image's level, or the plain array (level 0)."""
    node, path = _image(path, storage_options)
    if isinstance(node, zarr.Array):
        if level != 0:
            raise LinumpyError(f"{path}: a plain zarr array has only level 0, not level {level}")
        check_array_shape(
            node.shape, node.dtype.itemsize, _metadata_file(location(path)), image=False
        )
        return node
    return _level_array(node, path, level)[0]


def _level_array(
    node: zarr.Group, path: str | os.PathLike[str], level: int
) -> tuple[zarr.Array, Path]:
    """An image's level array and its folder."""
    with _malformed_metadata(path):
        paths = multiscale_dataset_paths(node, path)
    if not 0 <= level < len(paths):
        raise LinumpyError(
            f"{path}: level {level} out of range; the image has levels 0 to {len(paths) - 1}"
        )
    folder = location(path, str(paths[level]))
    with _malformed_metadata(path, folder):  # the group's metadata is read: the level's at fault
        array = node.get(paths[level])
    if not isinstance(array, zarr.Array):
        raise LinumpyError(f"{path}: level {level} ({paths[level]!r}) is not a zarr array")
    check_array_shape(array.shape, array.dtype.itemsize, _metadata_file(folder), image=True)
    with _malformed_metadata(path):
        multiscale = multiscale_metadata(node, path)
        check_level_axes(multiscale.get("axes"), array.ndim, level, _metadata_file(location(path)))
        _voxel_size(multiscale, path, level)
    return array, folder


def _voxel_size(
    multiscale: dict[str, Any], path: str | os.PathLike[str], level: int
) -> tuple[float, ...]:
    """Level ``level``'s scale times the multiscale's own, checked finite and positive."""
    scale = scale_of(multiscale["datasets"][level].get("coordinateTransformations", []))
    if scale is None:
        raise LinumpyError(f"{path}: level {level} has no scale transformation{_other(multiscale)}")
    transforms = multiscale.get("coordinateTransformations", [])
    global_scale = scale_of(transforms) or [1.0] * len(scale)
    voxel_size = tuple(s * g for s, g in zip(scale, global_scale, strict=True))
    check_scale(voxel_size, level, _metadata_file(location(path)))
    return voxel_size


def _other(multiscale: dict[str, Any]) -> str:
    """For an image of an NGFF version other than 0.4 and 0.5: a note naming it."""
    version = multiscale.get("version")
    with contextlib.suppress(ValueError):  # a version linumpy does not know is named too
        if version is None or format_of(str(version)).writable:
            return ""
    return f" (an NGFF {version} image: linumpy reads NGFF 0.4 and 0.5)"


def read_omezarr(
    path: SourceLike, level: int = 0, *, storage_options: dict[str, Any] | None = None
) -> tuple[zarr.Array, tuple[float, ...]]:
    """Open one level of an OME-Zarr image (NGFF 0.4 or 0.5) lazily, read-only.

    Parameters
    ----------
    path
        The image's top-level group: a path, a URL or a ``zarr.Group`` (see :func:`open_array`).
    level
        The multiscale level (0 is full resolution).
    storage_options
        Options of a remote store (see :func:`open_array`).

    Returns
    -------
    array : zarr.Array
        The level's array; nothing is read until it is sliced.
    voxel_size : tuple of float
        The level's scale along each axis, in the axes' units.

    Raises
    ------
    LinumpyError
        When the path is missing, is not an OME-Zarr image, has no such level, or its metadata
        fails ome-zarr-models' validation (the error names ``zarr.json`` or ``.zattrs``).

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import save_omezarr
    >>> path = tempfile.mkdtemp() + "/image.ome.zarr"
    >>> save_omezarr(np.ones((4, 8, 8), np.uint16), path, voxel_size=(10.0, 2.5, 2.5))
    >>> array, voxel_size = read_omezarr(path)
    >>> array.shape, voxel_size
    ((4, 8, 8), (10.0, 2.5, 2.5))
    """
    group, path = _image_group(path, storage_options)
    array, _ = _level_array(group, path, level)
    with _malformed_metadata(path):
        # validated by ome-zarr-models (0.4, 0.5) inside; read here by hand for older versions too
        return array, _voxel_size(multiscale_metadata(group, path), path, level)


def read_axes(
    path: SourceLike, *, storage_options: dict[str, Any] | None = None
) -> tuple[Axis, ...]:
    """The axes (names, types, units) of an OME-Zarr image, as its metadata states them.

    Pass them to :func:`save_omezarr` or :class:`OmeZarrWriter` (``axes=``) to keep them.

    Raises
    ------
    LinumpyError
        When the path is not an OME-Zarr image, its axes are missing, or its metadata fails
        ome-zarr-models' validation.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import save_omezarr
    >>> path = tempfile.mkdtemp() + "/rgb.ome.zarr"
    >>> save_omezarr(np.zeros((3, 8, 8), np.uint8), path, voxel_size=(1, 0.5, 0.5),
    ...              axes="cyx", unit="nanometer")
    >>> for axis in read_axes(path):
    ...     print(axis)
    Axis(name='c', type='channel', unit=None)
    Axis(name='y', type='space', unit='nanometer')
    Axis(name='x', type='space', unit='nanometer')
    """
    return _axes(*_image_group(path, storage_options))


def _axes(group: zarr.Group, path: Any) -> tuple[Axis, ...]:
    with _malformed_metadata(path):
        axes = multiscale_metadata(group, path).get("axes")
        if not axes:
            raise LinumpyError(f"{path}: the multiscales metadata has no axes")
        return axes_from_ngff(axes)


def read_coordinates(
    path: SourceLike, level: int = 0, *, storage_options: dict[str, Any] | None = None
) -> Coordinates:
    """The axes, voxel size and position of an OME-Zarr image's level, as its metadata states
    them: what a step deriving an image from it passes on."""
    group, path = _image_group(path, storage_options)
    axes = _axes(group, path)
    array, _ = _level_array(group, path, level)
    with _malformed_metadata(path):
        multiscale = multiscale_metadata(group, path)
        scale = _voxel_size(multiscale, path, level)
        own = translation_of(multiscale["datasets"][level].get("coordinateTransformations", []))
        outer = multiscale.get("coordinateTransformations") or []
        outer_translation = translation_of(outer)
        translation = None
        if own is not None or outer_translation is not None:
            outer_scale = scale_of(outer) or [1.0] * array.ndim
            own = own or [0.0] * array.ndim
            start = outer_translation or [0.0] * array.ndim
            translation = tuple(t * g + o for t, g, o in zip(own, outer_scale, start, strict=True))
    return Coordinates(axes, scale, translation)
