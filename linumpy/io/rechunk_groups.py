"""The groups of an image being rechunked (:mod:`linumpy.io.rechunk`): created with their
attributes as the copy's NGFF version keeps them, their arrays listed, label images cut to the
levels of their image.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import zarr
from zarr.storage import LocalStore

from linumpy.errors import LinumpyError
from linumpy.io.formats import NgffFormat, for_zarr_format, format_of
from linumpy.io.metadata import axes_from_ngff
from linumpy.io.ngff_validation import validate_image_attrs

__all__: list[str] = []

#: An array to copy: its path in the image, the array, and what its image says of it.
ArrayToCopy = tuple[str, zarr.Array, dict[str, Any]]


def tile_shape(attrs: Mapping[str, Any]) -> tuple[int, int] | None:
    """The tile of a mosaic grid (``linumpy.mosaic.tile_shape`` in its attributes), else None."""
    tile = attrs.get("linumpy", {}).get("mosaic", {}).get("tile_shape")
    return tuple(int(n) for n in tile) if tile else None  # type: ignore[return-value]


def level_tile(tile: tuple[int, int] | None, factor: Sequence[int]) -> tuple[int, int] | None:
    """A mosaic grid's tile at a pyramid level downsampled by ``factor`` (y, x), if whole."""
    if tile is None or any(t % f for t, f in zip(tile, factor)):
        return None
    return (tile[0] // factor[0], tile[1] // factor[1])


def copy_groups(
    root: zarr.Group, store: LocalStore, fmt: NgffFormat, source: Path
) -> list[ArrayToCopy]:
    """Create every group of ``root`` in ``store`` with its attributes (in NGFF ``fmt``); return
    the arrays to copy with what their image says of them (space axes, names, a grid's tile)."""
    arrays: list[ArrayToCopy] = []
    groups = [("", root)] + [
        (path, node) for path, node in root.members(max_depth=None) if isinstance(node, zarr.Group)
    ]
    context: dict[str, dict[str, Any]] = {}
    for path, group in groups:
        attrs = group.attrs.asdict()
        declared = format_of(attrs, source=source / path)
        if declared is not None and not declared.writable:
            raise LinumpyError(
                f"{source / path}: NGFF {declared} image; linum-rechunk converts NGFF 0.4 and 0.5"
            )
        multiscales = attrs.get("ome", attrs).get("multiscales") or []
        if multiscales:  # an image (a label image too); a labels group has no multiscales
            zarr_format = group.metadata.zarr_format
            name = for_zarr_format(zarr_format).attributes_file
            validate_image_attrs(attrs, zarr_format, source / path / name)
        new = fmt.convert_attrs(attrs) if declared is not None else attrs
        zarr.open_group(
            store=store, path=path, mode="w-", zarr_format=fmt.zarr_format, attributes=new
        )
        if multiscales:
            axes = axes_from_ngff(multiscales[0].get("axes", []))
            tile = tile_shape(attrs)
            for depth, dataset in enumerate(multiscales[0].get("datasets", [])):
                key = f"{path}/{dataset['path']}" if path else str(dataset["path"])
                context[key] = {
                    "space": [i for i, a in enumerate(axes) if a.type == "space"] or None,
                    "names": [a.name for a in axes] if axes else None,
                    "tile": level_tile(tile, (2**depth, 2**depth)) if tile else None,
                }
    for path, node in root.members(max_depth=None):
        if isinstance(node, zarr.Array):
            arrays.append((path, node, context.get(path, {})))
    return sorted(arrays, key=lambda item: path_key(item[0]))


def path_key(path: str) -> tuple[tuple[int, int, str], ...]:
    """Paths in order, numbers by value: ``0, 1, ..., 10``, then ``labels/...``."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in path.split("/"))


def datasets(group: zarr.Group) -> list[Any]:
    attrs = group.attrs.asdict()
    multiscales = attrs.get("ome", attrs).get("multiscales") or [{}]
    return list(multiscales[0].get("datasets", []))


def keep_levels(store: LocalStore, arrays: list[ArrayToCopy], n_levels: int) -> list[ArrayToCopy]:
    """The first ``n_levels`` levels of each image created in ``store``, its metadata cut to
    them; the arrays of the others are left out."""
    dropped = set()
    root = zarr.open_group(store=store, mode="r+")
    for path, group in [("", root), *root.members(max_depth=None)]:
        if not isinstance(group, zarr.Group) or len(datasets(group)) <= n_levels:
            continue
        attrs = group.attrs.asdict()
        multiscale = attrs.get("ome", attrs)["multiscales"][0]
        for dataset in multiscale["datasets"][n_levels:]:
            dropped.add(f"{path}/{dataset['path']}" if path else str(dataset["path"]))
        multiscale["datasets"] = multiscale["datasets"][:n_levels]
        group.attrs.update(attrs)
    return [item for item in arrays if item[0] not in dropped]
