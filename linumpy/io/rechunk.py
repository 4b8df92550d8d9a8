"""Rewriting a zarr array or OME-Zarr image in another layout, out of core, values bit for bit,
attributes moved where the output's NGFF version keeps them, the new image staged beside the
target.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import zarr
from zarr.storage import LocalStore

from linumpy import settings
from linumpy.errors import LinumpyError
from linumpy.io.blocks import grow_block, storage_unit
from linumpy.io.dask_write import shard_budget, store_dask
from linumpy.io.formats import NgffFormat, NgffVersion, writable_format
from linumpy.io.layout import ShardsArg, default_layout, slab_shards, tile_layout, tile_shards
from linumpy.io.lazy import open_volume
from linumpy.io.metadata import check_chunk_count
from linumpy.io.rechunk_groups import copy_groups, datasets, keep_levels
from linumpy.io.recovery import recover_staging
from linumpy.io.staging import staged
from linumpy.io.validate import RegularFileStore
from linumpy.parallel import Cluster

__all__ = ["Rechunked", "copy_labels", "rechunk"]

logger = logging.getLogger(__name__)


class Rechunked(NamedTuple):
    """What :func:`rechunk` wrote: per array (its path in the image, "" for a plain array), the
    shape, chunks and shards; and the bytes copied (uncompressed)."""

    arrays: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...] | None]]
    nbytes: int

    def describe(self) -> str:
        """One line per array: path, shape, chunks and shards."""
        lines = []
        for path, (shape, chunks, shards) in self.arrays.items():
            where = f"{path}: " if path else ""
            lines.append(f"{where}{shape}, chunks {chunks}, shards {shards or 'none'}")
        return "\n".join(lines)


def _layout(
    array: zarr.Array, context: dict[str, Any], options: _Options, what: str
) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """The chunks and shards of an array's copy."""
    shape, dtype, fmt = tuple(array.shape), np.dtype(array.dtype), options.format
    space = context.get("space") or list(range(max(0, array.ndim - 3), array.ndim))
    tile = context.get("tile")
    budget = shard_budget(options.cluster, per_byte=3)
    chunks = _for_array(options.chunks, array, "chunks")
    shards = options.shards
    if not isinstance(shards, str):
        shards = _for_array(shards, array, "shards")
    if chunks is not None:
        chunks = tuple(min(int(c), max(n, 1)) for c, n in zip(chunks, shape))
    if shards is not None and not isinstance(shards, str):
        shards = tuple(
            min(int(s), -(-n // c) * c) for s, n, c in zip(shards, shape, chunks or shape)
        )
    if tile is not None and shards == "auto" and fmt.sharding:
        if chunks is None:
            return tuple(tile_layout(shape, dtype, tile, space=space, shard_bytes=budget))
        return chunks, tile_shards(shape, chunks, dtype, tile, space=space, shard_bytes=budget)
    layout = default_layout(
        shape, dtype, chunks=chunks, shards=shards, ngff_version=fmt, space=space, what=what
    )
    if shards == "auto" and fmt.sharding:
        return layout.chunks, slab_shards(
            shape, layout.chunks, dtype, space=space, shard_bytes=budget
        )
    return layout.chunks, layout.shards


def _for_array(block: Sequence[int] | None, array: zarr.Array, name: str) -> tuple[int, ...] | None:
    """``block`` checked against an array's number of axes."""
    if block is None:
        return None
    if len(block) != array.ndim:
        raise ValueError(
            f"{name} {tuple(block)}: {array.ndim} values needed for array {array.path or '/'} "
            f"of shape {array.shape}"
        )
    return tuple(int(b) for b in block)


def _copy_unit(source: zarr.Array, target: zarr.Array) -> tuple[int, ...]:
    """Blocks of whole input and output storage units (their least common multiple) where that
    stays within 4 times the larger of the two, else of whole output units."""
    unit = []
    for s, t, n in zip(storage_unit(source), storage_unit(target), source.shape):
        both = math.lcm(s, t)
        unit.append(min(both if both <= 4 * max(s, t) else t, max(n, 1)))
    return tuple(unit)


def rechunk(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    chunks: Sequence[int] | None = None,
    shards: ShardsArg = "auto",
    ngff_version: NgffVersion = "0.5",
    zstd_level: int | None = None,
    checksum: bool | None = None,
    gpu: bool = False,
    overwrite: bool = False,
    progress: bool = False,
    cluster: Cluster | None = None,
) -> Rechunked:
    """Rewrite a zarr array or OME-Zarr image in linumpy's default layout (or the one given)."""
    fmt = writable_format(ngff_version)
    source, target = Path(source), Path(target)
    _check_source(source)  # names the file at fault, before anything is written
    recover_staging(target)
    if (target.exists() or target.is_symlink()) and not overwrite:
        raise LinumpyError(f"{target} exists; pass overwrite=True to replace it")
    if gpu and not fmt.gpu_encoding:
        logger.warning("GPU encoding writes zarr v3 only: encoding NGFF %s on the CPU", fmt)
        gpu = False
    try:
        root = zarr.open(store=RegularFileStore(source, read_only=True), mode="r")
    except (FileNotFoundError, zarr.errors.NodeNotFoundError, ValueError) as exc:
        raise LinumpyError(f"{source}: not a zarr array or group ({exc})") from None
    cluster = cluster or Cluster()
    checksum = settings.get().write_checksum if checksum is None else bool(checksum)
    if zstd_level is None:
        zstd_level = settings.get().zstd_level
    with staged(target) as out:
        store = LocalStore(out)
        if isinstance(root, zarr.Array):
            arrays: list[tuple[str, zarr.Array, dict[str, Any]]] = [("", root, {})]
        else:
            arrays = copy_groups(root, store, fmt, source)
        options = _Options(chunks, shards, fmt, zstd_level, checksum, gpu, cluster, progress)
        written, nbytes = _copy_arrays(arrays, store, source, target, options)
    return Rechunked(written, nbytes)


class _Options(NamedTuple):
    chunks: Sequence[int] | None
    shards: ShardsArg
    format: NgffFormat
    zstd_level: int
    checksum: bool
    gpu: bool
    cluster: Cluster
    progress: bool


def _copy_arrays(
    arrays: list[tuple[str, zarr.Array, dict[str, Any]]],
    store: LocalStore,
    source: Path,
    target: Path,
    options: _Options,
) -> tuple[dict[str, Any], int]:
    """Copy each array (path, array, what its image says of it) into ``store``; return the
    layout of each and the bytes copied."""
    written: dict[str, Any] = {}
    nbytes = 0
    for path, array, context in arrays:
        what = f"{target}/{path}" if path else str(target)
        chunk, shard = _layout(array, context, options, what)
        check_chunk_count(array.shape, chunk, np.dtype(array.dtype).itemsize)
        copy = _create_like(array, store, path, chunk, shard, options, context)
        nbytes += _copy(source / path if path else source, array, copy, options, path)
        written[path] = (tuple(array.shape), tuple(copy.chunks), copy.shards)
    return written, nbytes


def copy_labels(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    ngff_version: NgffVersion = "0.5",
    gpu: bool = False,
    cluster: Cluster | None = None,
    n_levels: int | None = None,
) -> list[str]:
    """Copy an OME-Zarr image's labels into the image at ``target``, in NGFF ``ngff_version`` and
    linumpy's default layout. With ``n_levels``, each label image keeps that many levels (NGFF wants
    as many as the image has); if one has fewer, no labels are copied and a warning says so."""
    fmt = writable_format(ngff_version)
    source, target = Path(source), Path(target)
    root = zarr.open_group(store=RegularFileStore(source, read_only=True), mode="r")
    labels = root.get("labels")
    if not isinstance(labels, zarr.Group):
        return []
    if n_levels is not None:
        short = [
            path
            for path, node in labels.members(max_depth=None)
            if isinstance(node, zarr.Group) and 0 < len(datasets(node)) < n_levels
        ]
        if short:
            logger.warning(
                "%s: labels not copied: label images %s have fewer levels than the image's %d",
                source,
                ", ".join(short),
                n_levels,
            )
            return []
    store = LocalStore(target / "labels")
    arrays = copy_groups(labels, store, fmt, source / "labels")
    if n_levels is not None:
        arrays = keep_levels(store, arrays, n_levels)
    options = _Options(
        None,
        "auto",
        fmt,
        settings.get().zstd_level,
        settings.get().write_checksum,
        gpu and fmt.gpu_encoding,
        cluster or Cluster(),
        False,
    )
    _copy_arrays(arrays, store, source / "labels", target / "labels", options)
    attrs = labels.attrs.asdict()
    return [str(name) for name in attrs.get("ome", attrs).get("labels", [])]


def _check_source(source: Path) -> None:
    """Open the input as linumpy's readers do, every level of an image too, so that bad input
    raises a LinumpyError naming the file before anything is written."""
    from linumpy.io.metadata import multiscale_dataset_paths
    from linumpy.io.omezarr import open_array

    first = open_array(source)
    if first.path:  # a level of an image: the others too
        group = zarr.open_group(store=RegularFileStore(source, read_only=True), mode="r")
        for level in range(1, len(multiscale_dataset_paths(group, source))):
            open_array(source, level)


def _create_like(
    array: zarr.Array,
    store: LocalStore,
    path: str,
    chunks: tuple[int, ...],
    shards: tuple[int, ...] | None,
    options: _Options,
    context: dict[str, Any],
) -> zarr.Array:
    names = getattr(array.metadata, "dimension_names", None) or context.get("names")
    return zarr.create_array(
        store=store,
        name=path or None,
        shape=array.shape,
        dtype=array.dtype,
        chunks=chunks,
        shards=shards,
        fill_value=array.fill_value,
        attributes=array.attrs.asdict(),
        zarr_format=options.format.zarr_format,
        **options.format.array_options(options.zstd_level, options.checksum, names),
    )


def _copy(path: Path, source: zarr.Array, target: zarr.Array, options: _Options, name: str) -> int:
    """Copy ``source`` (at ``path``) into ``target`` in blocks of whole storage units of both."""
    gpu, cluster = options.gpu, options.cluster
    if math.prod(source.shape) == 0:
        return 0
    unit = _copy_unit(source, target)
    per_element = 3 * np.dtype(source.dtype).itemsize  # the block, zarr's copy, the encoded files
    budget = cluster.task_bytes(
        math.prod(unit) * per_element,
        f"rechunking {name or path}",
        total=math.prod(source.shape) * per_element,
        gpu=gpu,
    )
    block = grow_block(unit, source.shape, per_element, budget)
    lazy = open_volume(path, chunks=block, gpu=gpu)
    desc = name or "rechunk"
    return store_dask(lazy, target, cluster=cluster, progress=options.progress, desc=desc)
