"""Stitching a mosaic grid OME-Zarr into an OME-Zarr image with a pyramid, out of core: the
output's layout, the writer, and the stitch and pyramid as dask tasks."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence

import numpy as np
import zarr
from numpy.typing import DTypeLike

from linumpy import phases
from linumpy.io import OmeZarrWriter, read_omezarr
from linumpy.io.array_ref import array_ref
from linumpy.io.blocks import storage_unit
from linumpy.io.dask_write import (
    _downsample_cost,
    committed,
    shard_budget,
    space_axes,
    write_pyramid,
)
from linumpy.io.engine.memory import format_size
from linumpy.io.layout import ShardsArg, inner_chunks, slab_shards, tile_shards
from linumpy.io.levels import store_levels
from linumpy.io.output_size import check_output_size
from linumpy.mosaic.attrs import stitch_coordinates, write_linumpy_attrs
from linumpy.mosaic.out_of_core import plan_stitch_block, stitch_lazy, stitch_threads
from linumpy.mosaic.stitch import Blending, parse_blending, stitch_dtype
from linumpy.mosaic.transform import TileTransform
from linumpy.parallel import Cluster
from linumpy.parallel.task_inputs import task_path

__all__: list[str] = []

logger = logging.getLogger(__name__)


def _bytes_per_byte(dtype: np.dtype, ndim: int, n_levels: int) -> float:
    """A stitch task's working set per byte of its output shard (the output, float32 sums and
    weights, the encoded copy, the tiles); with a pyramid, at least a pyramid task's."""
    level0 = 4 * 4 / dtype.itemsize
    if n_levels == 1:
        return level0
    factors = (2,) * ndim
    f32 = np.dtype(np.float32)
    ratio = (_downsample_cost(dtype, factors) / dtype.itemsize) / (
        _downsample_cost(f32, factors) / f32.itemsize
    )
    return max(level0, 10 * ratio)


def _plan_block(
    array: zarr.Array, transform: TileTransform, unit: Sequence[int], cluster: Cluster, gpu: bool
) -> tuple[int, ...]:
    """:func:`plan_stitch_block` for the grid ``array``, with its chunks and shards."""
    itemsize, chunks, shards = np.dtype(array.dtype).itemsize, array.chunks, array.shards
    return plan_stitch_block(
        array.shape, itemsize, transform, unit, cluster, chunks, gpu=gpu, source_shards=shards
    )


def _stitch_shards(
    array: zarr.Array,
    transform: TileTransform,
    out_shape: tuple[int, ...],
    chunks: tuple[int, ...],
    shard_bytes: int,
    cluster: Cluster,
    gpu: bool,
    dtype: np.dtype,
) -> ShardsArg:
    """The stitched image's default shards: slabs of whole planes (``"auto"``), unless blocks
    over them would decode the grid's chunks more than once in depth (one chunk per tile): then
    a tile's footprint in y and x, as deep as ``shard_bytes`` allows."""
    if len(out_shape) != 3:
        return "auto"

    def whole_depth(unit: Sequence[int]) -> bool:
        depth = _plan_block(array, transform, unit, cluster, gpu)[0]
        return depth % int(array.chunks[0]) == 0 or depth >= out_shape[0]

    slabs = slab_shards(out_shape, chunks, dtype, shard_bytes=shard_bytes) or chunks
    if whole_depth(slabs):
        return "auto"
    tile = [-(-int(n) // c) * c for n, c in zip(transform.tile_shape, chunks[1:])]
    footprint = tile_shards(out_shape, chunks, dtype, tile, shard_bytes=shard_bytes)
    return footprint if footprint is not None and whole_depth(footprint) else "auto"


@phases.recorded("metadata")
def stitch_omezarr(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    transform: TileTransform,
    *,
    blending: Blending = "linear",
    gpu: bool = False,
    dtype: DTypeLike | None = None,
    n_levels: int = 3,
    chunks: Sequence[int] | None = None,
    shards: ShardsArg = "auto",
    zstd_level: int | None = None,
    overwrite: bool = False,
    progress: bool = False,
    cluster: Cluster | None = None,
    max_output_bytes: int | None = None,
) -> None:
    """Stitch a mosaic grid OME-Zarr into an OME-Zarr image with a pyramid, out of core.

    Each block of whole output shards is one dask task that reads the tiles overlapping it,
    stitches and writes them; then each pyramid level is computed from the level above. Memory
    stays bounded whatever the volume's size, and the result equals :func:`stitch` of the whole
    grid.

    Parameters
    ----------
    source
        Mosaic grid ``([Z,] rows * tile_h, cols * tile_w)``.
    target
        The stitched image to create.
    transform
        Tile layout (from :func:`~linumpy.mosaic.estimate_transform_omezarr` or a JSON file).
    blending
        ``none``, ``average`` or ``linear`` (see :func:`linumpy.mosaic.stitch`).
    gpu
        Read, stitch and encode on the GPU.
    dtype
        The stitched image's dtype, by default the tiles' own (float32 for other float tiles):
        values are blended in float32, for an integer dtype rounded (half to even) and clipped.
    n_levels, chunks, shards, zstd_level
        Pyramid levels, chunk and shard shapes, zstd level of the output; by default chunks of
        about 1 MiB in shards of whole planes (smaller under a memory limit).
    overwrite
        Replace an existing ``target``.
    progress
        Show progress bars over the tasks.
    cluster
        Where the tasks run and how much memory each may use
        (:func:`linumpy.parallel.dask_cluster`); local threads by default.
    max_output_bytes
        The largest output allowed (uncompressed level 0), checked with the room on the
        target's disk before any planning.

    Raises
    ------
    LinumpyError
        For an integer ``dtype`` and float tiles.
    MemoryLimitError
        When the cluster's memory limit cannot hold one output shard (or chunk) and its tiles.

    Examples
    --------
    >>> import tempfile
    >>> from linumpy.io import read_omezarr
    >>> from linumpy.mosaic import make_demo_data, read_demo_truth, stitch_omezarr
    >>> folder = tempfile.mkdtemp()
    >>> _ = make_demo_data(folder + "/mosaic.ome.zarr", grid_shape=(2, 3), tile_shape=(8, 64, 64))
    >>> transform = read_demo_truth(folder + "/mosaic.ome.zarr")
    >>> stitch_omezarr(folder + "/mosaic.ome.zarr", folder + "/stitched.ome.zarr", transform)
    >>> stitched, voxel_size = read_omezarr(folder + "/stitched.ome.zarr")
    >>> stitched.shape, str(stitched.dtype), voxel_size
    ((8, 119, 167), 'uint16', (3.5, 2.5, 2.5))
    """
    blending = parse_blending(blending)
    path = task_path(source)  # absolute: a worker's working directory is its own
    array, _ = read_omezarr(path)  # opened once: the stitch's tasks read it (array_ref)
    dtype = stitch_dtype(array.dtype, dtype)
    transform = transform.normalized()
    transform.check_mosaic_shape(array.shape, f"{source}: mosaic grid")
    out_shape = (*array.shape[:-2], *transform.output_shape())
    # refused in one line before any planning: a transform off by 1000 would plan for hours
    size = check_output_size(
        out_shape, np.float32, target, max_bytes=max_output_bytes, what="stitched image"
    )
    logger.info("%s: stitched image %s, %s uncompressed", target, out_shape, format_size(size))
    chunks = tuple(chunks) if chunks else inner_chunks(out_shape, dtype)
    cluster = cluster or Cluster()
    budget = shard_budget(cluster, per_byte=_bytes_per_byte(dtype, len(out_shape), n_levels))
    if shards == "auto":
        shards = _stitch_shards(array, transform, out_shape, chunks, budget, cluster, gpu, dtype)
    coordinates = stitch_coordinates(source, transform)  # the grid's units, the output's origin
    writer = OmeZarrWriter(
        target,
        out_shape,
        dtype,
        voxel_size=coordinates.scale,
        axes=coordinates.axes,
        translation=coordinates.translation,
        chunks=chunks,
        shards=shards,
        shard_bytes=budget,
        n_levels=n_levels,
        zstd_level=zstd_level,
        overwrite=overwrite,
    )
    block = _plan_block(array, transform, storage_unit(writer.array), cluster, gpu)
    threads = stitch_threads(out_shape, block, cluster)
    start = time.perf_counter()
    with committed(writer):
        grid = array_ref(path, opened=array)
        stitched = stitch_lazy(
            grid, transform, blending, block=block, gpu=gpu, threads=threads, dtype=dtype
        )
        # level 1 from the stitched blocks themselves: level 0 is not read back
        rest = store_levels(
            stitched,
            writer.arrays,
            axes=space_axes(writer),
            gpu=gpu,
            cluster=cluster,
            progress=progress,
            desc="stitch",
        )
        middle = time.perf_counter()
        write_pyramid(rest, axes=space_axes(writer), gpu=gpu, cluster=cluster, progress=progress)
        stitch_attrs = {
            "source": os.fspath(source),
            "blending": blending,
            "transform": transform.to_dict(),
        }
        write_linumpy_attrs(writer.path, {"stitch": stitch_attrs})
    logger.info(
        "stitched %s -> %s (%s, %s, blocks %s, %s): level 0 %.2f s, pyramid %.2f s",
        source,
        target,
        "GPU" if gpu else "CPU",
        blending,
        block,
        cluster,
        middle - start,
        time.perf_counter() - middle,
    )
