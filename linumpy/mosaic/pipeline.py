"""File-level mosaic operations on OME-Zarr images: projection, layout estimation, stitching.

These are what the ``linum-*`` scripts call. With ``gpu=True`` reads go through
``read_volume(..., gpu=True)`` (nvCOMP decode), the arithmetic runs on cupy and the stitched
image is encoded on the GPU (zarr inside :func:`linumpy.gpu.zarr_io.gpu_zarr_context`); without
it nothing GPU-related is imported.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import zarr
from numpy.typing import DTypeLike

from linumpy import phases, settings
from linumpy._numpy_or_cupy import gpu_module, to_numpy
from linumpy.errors import LinumpyError
from linumpy.io import OmeZarrWriter, open_array, read_omezarr, read_volume
from linumpy.io.dask_write import (
    _downsample_cost,
    committed,
    shard_budget,
    space_axes,
    store_dask,
    write_pyramid,
)
from linumpy.io.layout import ShardsArg, inner_chunks, slab_shards, tile_layout, tile_shards
from linumpy.io.lazy import storage_unit
from linumpy.io.levels import store_levels
from linumpy.io.output_size import check_output_size, format_bytes
from linumpy.io.sources import open_source
from linumpy.mosaic.attrs import (
    mosaic_tile_shape,
    projection_coordinates,
    read_linumpy_attrs,
    stitch_coordinates,
    write_linumpy_attrs,
)
from linumpy.mosaic.convert import convert_to_omezarr
from linumpy.mosaic.out_of_core import (
    plan_stitch_block,
    stitch_lazy,
    stitch_threads,
)
from linumpy.mosaic.projection import leading_axes, projection_lazy
from linumpy.mosaic.registration import PairMeasurement, estimate_transform
from linumpy.mosaic.stitch import Blending, parse_blending, stitch_dtype
from linumpy.mosaic.transform import TileTransform
from linumpy.parallel import Cluster

__all__ = [
    "average_intensity_projection",
    "convert_to_omezarr",
    "estimate_transform_omezarr",
    "open_source",
    "projection_omezarr",
    "save_png",
    "stitch_omezarr",
]

logger = logging.getLogger(__name__)


@phases.recorded("projection")
def average_intensity_projection(
    path: str | os.PathLike[str],
    *,
    gpu: bool = False,
    slab_depth: int | None = None,
    progress: bool = False,
    cluster: Cluster | None = None,
) -> Any:
    """Mean of a 3D volume along z (axis 0), read slab by slab, column by column.

    Parameters
    ----------
    path
        OME-Zarr image or zarr array of shape ``(Z, Y, X)``.
    gpu
        Read with ``read_volume(..., gpu=True)`` and sum on the GPU; returns a cupy array.
    slab_depth
        Planes read at once; the array's chunk depth by default.
    progress
        Show a progress bar over the tasks.
    cluster
        Where the work runs and how much memory a task may use
        (:func:`linumpy.parallel.dask_cluster`); local threads by default.

    Returns
    -------
    array
        ``(Y, X)`` float32 (numpy, or cupy when ``gpu``).

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import save_omezarr
    >>> from linumpy.mosaic.pipeline import average_intensity_projection
    >>> path = tempfile.mkdtemp() + "/volume.ome.zarr"
    >>> volume = np.arange(2 * 3 * 4, dtype=np.uint16).reshape(2, 3, 4)
    >>> save_omezarr(volume, path, voxel_size=(1.0, 1.0, 1.0))
    >>> average_intensity_projection(path)
    array([[ 6.,  7.,  8.,  9.],
           [10., 11., 12., 13.],
           [14., 15., 16., 17.]], dtype=float32)
    """
    cluster = cluster or Cluster()
    lazy = projection_lazy(path, gpu=gpu, slab_depth=slab_depth, cluster=cluster)
    return cluster.compute(lazy, desc="projection", progress=progress)


@phases.recorded("metadata")
def projection_omezarr(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    gpu: bool = False,
    n_levels: int = 1,
    overwrite: bool = False,
    progress: bool = False,
    cluster: Cluster | None = None,
) -> tuple[int, ...]:
    """Write the average intensity projection of a 3D OME-Zarr volume as a 2D OME-Zarr image.

    Computed out of core (see :func:`linumpy.mosaic.projection.projection_lazy`) and written
    block by block, in linumpy's default layout (:func:`linumpy.io.layout.default_layout`). A
    mosaic grid's tile layout attributes are kept, with one tile per shard (or chunk) of the
    output (:func:`linumpy.io.layout.tile_layout`), so the projection can be stitched.

    Parameters
    ----------
    source
        3D OME-Zarr image ``(Z, Y, X)``.
    target
        The 2D float32 image to create, voxel size ``(y, x)`` of the source.
    gpu
        Read and sum on the GPU.
    n_levels, overwrite
        As for :class:`linumpy.io.OmeZarrWriter`.
    progress
        Show progress bars over the tasks.
    cluster
        Where the tasks run and how much memory each may use; local threads by default.

    Returns
    -------
    tuple of int
        The projection's shape.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import read_volume, save_omezarr
    >>> from linumpy.mosaic.pipeline import projection_omezarr
    >>> folder = tempfile.mkdtemp()
    >>> volume = np.arange(2 * 3 * 4, dtype=np.uint16).reshape(2, 3, 4)
    >>> save_omezarr(volume, folder + "/volume.ome.zarr", voxel_size=(1.0, 2.0, 2.0))
    >>> projection_omezarr(folder + "/volume.ome.zarr", folder + "/aip.ome.zarr")
    (3, 4)
    >>> read_volume(folder + "/aip.ome.zarr")[0]
    array([6., 7., 8., 9.], dtype=float32)
    """
    array, voxel_size = read_omezarr(source)
    lead = leading_axes(array.shape)  # (1, 1, Z, Y, X): projected as its (Z, Y, X)
    if lead is None:
        raise LinumpyError(f"{source}: need a 3D volume, got shape {array.shape}")
    mosaic = read_linumpy_attrs(source).get("mosaic")
    cluster = cluster or Cluster()
    shape = tuple(array.shape[-2:])
    # a task reading the columns of one output shard holds a slab a chunk deep of them (under a
    # memory limit) and its sums; one writing it, the shard, zarr's and the encoded copy; one
    # building the pyramid, the level above (4 times the shard)
    reading = (array.chunks[-3] * np.dtype(array.dtype).itemsize + 32) / 4
    budget = shard_budget(cluster, per_byte=max(reading, 6 if n_levels > 1 else 3))
    # chunks a task can project whole (under a memory limit: smaller), so none is written by two
    chunks: Any = inner_chunks(
        shape, np.float32, chunk_bytes=min(settings.get().chunk_bytes, budget)
    )
    shards: ShardsArg = "auto"
    if mosaic:
        chunks, shards = tile_layout(shape, np.float32, mosaic["tile_shape"], shard_bytes=budget)
    coordinates = projection_coordinates(source, lead)  # the source's units and plane position
    writer = OmeZarrWriter(
        target,
        shape,
        np.float32,
        voxel_size=coordinates.scale,
        axes=coordinates.axes,
        translation=coordinates.translation,
        chunks=chunks,
        shards=shards,
        shard_bytes=budget,
        n_levels=n_levels,
        overwrite=overwrite,
    )
    # blocks of whole output shards where a task holds one (else joined before the write)
    lazy = projection_lazy(source, gpu=gpu, align=storage_unit(writer.array), cluster=cluster)
    if gpu:  # encoded on the CPU: a 2D image is small, and the bytes stay those of a CPU run
        lazy = lazy.map_blocks(to_numpy, meta=np.empty((0, 0), np.float32))
    with committed(writer):
        store_dask(lazy, writer.array, cluster=cluster, progress=progress, desc="projection")
        write_pyramid(writer.arrays, axes=space_axes(writer), cluster=cluster, progress=progress)
        if mosaic:
            write_linumpy_attrs(writer.path, {"mosaic": mosaic})
    return tuple(array.shape[-2:])


def save_png(image: Any, path: str | os.PathLike[str], *, percentiles=(0.5, 99.5)) -> None:
    """Save a 2D image as an 8-bit PNG preview, stretched between two percentiles.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from PIL import Image
    >>> from linumpy.mosaic.pipeline import save_png
    >>> path = tempfile.mkdtemp() + "/preview.png"
    >>> save_png(np.linspace(0.0, 1.0, 12).reshape(3, 4), path, percentiles=(0, 100))
    >>> np.asarray(Image.open(path))
    array([[  0,  23,  46,  70],
           [ 93, 116, 139, 162],
           [185, 209, 232, 255]], dtype=uint8)
    """
    from PIL import Image

    data = to_numpy(image).astype(np.float64)
    finite = data[np.isfinite(data)]
    low, high = np.percentile(finite, percentiles) if finite.size else (0.0, 1.0)
    scaled = np.clip((data - low) / max(high - low, 1e-12), 0.0, 1.0)
    scaled[~np.isfinite(data)] = 0.0  # NaN (no data) black, and no warning casting it
    Image.fromarray(np.round(scaled * 255).astype(np.uint8)).save(os.fspath(path), format="PNG")


@phases.recorded("metadata")
def estimate_transform_omezarr(
    path: str | os.PathLike[str],
    *,
    tile_shape: Sequence[int] | None = None,
    gpu: bool = False,
    progress: bool = False,
    cluster: Cluster | None = None,
    **options: Any,
) -> tuple[TileTransform, list[PairMeasurement]]:
    """Estimate the tile layout of a mosaic grid stored as OME-Zarr.

    Parameters
    ----------
    path
        3D mosaic grid ``(Z, rows * tile_h, cols * tile_w)`` (projected along z first) or its 2D
        projection.
    tile_shape
        ``(tile_h, tile_w)``; by default from the image (see :func:`mosaic_tile_shape`).
    gpu
        Read and correlate on the GPU.
    progress
        Show progress bars.
    cluster
        Where a 3D grid's projection runs (its workers, with a scheduler); local threads by
        default.
    **options
        Passed to :func:`linumpy.mosaic.registration.estimate_transform`.

    Returns
    -------
    transform, measurements
        As :func:`linumpy.mosaic.registration.estimate_transform` returns them.

    Examples
    --------
    >>> import tempfile
    >>> from linumpy.mosaic.demo import make_demo_data, read_demo_truth
    >>> from linumpy.mosaic.pipeline import estimate_transform_omezarr
    >>> path = tempfile.mkdtemp() + "/mosaic.ome.zarr"
    >>> _ = make_demo_data(path, grid_shape=(2, 3), tile_shape=(8, 64, 64))
    >>> transform, measurements = estimate_transform_omezarr(path, min_score=0.3)
    >>> transform.tile_shape, transform.grid_shape, len(measurements)
    ((64, 64), (2, 3), 7)
    >>> transform.max_position_error(read_demo_truth(path)) < 0.5
    True
    """
    shape = mosaic_tile_shape(path, tile_shape)
    ndim = open_array(path).ndim
    if ndim == 3:
        image = average_intensity_projection(path, gpu=gpu, progress=progress, cluster=cluster)
    elif ndim == 2:
        image = read_volume(path, gpu=gpu).astype(gpu_module(gpu).float32)
    else:
        raise LinumpyError(f"{path}: a mosaic grid is 2D or 3D, not {ndim}D")
    return estimate_transform(image, shape, progress=progress, **options)


def _bytes_per_byte(dtype: np.dtype, ndim: int, n_levels: int) -> float:
    """A stitch task's working set per byte of its output shard: the output, float32 sums and
    weights, the encoded copy and the tiles beside it (4 for float32, as much per element for
    other dtypes); a pyramid task's, the level above and its averaging temporaries (10 for
    float32, scaled by what :func:`~linumpy.io.dask_write.write_pyramid` counts for ``dtype``)."""
    level0 = 4 * 4 / dtype.itemsize
    if n_levels == 1:
        return level0
    factors = (2,) * ndim
    f32 = np.dtype(np.float32)
    ratio = (_downsample_cost(dtype, factors) / dtype.itemsize) / (
        _downsample_cost(f32, factors) / f32.itemsize
    )
    return max(level0, 10 * ratio)


def _output_chunks(
    shape: tuple[int, ...], slab_depth: int | None, n_levels: int, dtype: np.dtype
) -> tuple[int, ...]:
    """The default layout's chunks for ``dtype`` (:func:`linumpy.io.layout.inner_chunks`),
    ``slab_depth`` (rounded up to a multiple of ``2 ** (n_levels - 1)``) setting their depth:
    the largest power of 2 up to 128 dividing it."""
    chunks = inner_chunks(shape, dtype)
    if len(shape) == 2 or slab_depth is None:
        return chunks
    unit = 2 ** (n_levels - 1)
    step = min(math.ceil(slab_depth / unit) * unit, shape[0])
    return (min(math.gcd(step, 128), shape[0]), *chunks[1:])


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
    over such slabs would decode the grid's stored chunks more than once in depth, as with one
    chunk per tile (a 96-plane frame decoded for every 16-plane slab): then a tile's footprint
    in y and x, as deep as ``shard_bytes`` allows, so that blocks take whole chunks in depth."""
    if len(out_shape) != 3:
        return "auto"

    def whole_depth(unit: Sequence[int]) -> bool:
        """Whether blocks over output shards of ``unit`` take the grid's chunks whole in depth."""
        depth = plan_stitch_block(
            array.shape,
            np.dtype(array.dtype).itemsize,
            transform,
            unit,
            cluster,
            source_chunks=array.chunks,
            gpu=gpu,
            source_shards=array.shards,
        )[0]
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
    level: int | None = None,
    slab_depth: int | None = None,
    overwrite: bool = False,
    progress: bool = False,
    cluster: Cluster | None = None,
    max_output_bytes: int | None = None,
) -> None:
    """Stitch a mosaic grid OME-Zarr into an OME-Zarr image with a pyramid, out of core.

    The output is cut into blocks of whole shards (or chunks): whole planes, as many as fit the
    memory one task may use, else parts of planes. Each block is one dask task that reads the
    tiles overlapping it, stitches and writes them; then each pyramid level is computed from
    the level above as stored, block by block. Memory stays bounded whatever the volume's size,
    and the result equals stitching the whole grid in memory. With ``gpu`` the tiles are read,
    stitched, averaged and encoded on the GPU.

    Parameters
    ----------
    source
        Mosaic grid ``([Z,] rows * tile_h, cols * tile_w)``.
    target
        The stitched image to create.
    transform
        Tile layout (from :func:`estimate_transform_omezarr` or a JSON file).
    blending
        ``none``, ``average`` or ``linear`` (see :func:`linumpy.mosaic.stitch.stitch`).
    gpu
        Read, stitch and encode on the GPU.
    dtype
        The stitched image's dtype (:func:`linumpy.mosaic.stitch.stitch_dtype`): by default the
        tiles' own (float32 for tiles of another float dtype). Values are blended in float32;
        for an integer dtype they are rounded to the nearest integer (half to even) and clipped
        to its range, so they equal float32's output rounded. float32 stores about 1.7 times
        the bytes of uint16 and costs as much more to encode and write.
    n_levels, chunks, shards, level
        Pyramid levels, chunk and shard shapes, zstd level of the output; by default linumpy's
        layout (:func:`linumpy.io.layout.default_layout`): chunks of about 1 MiB in shards of
        whole planes (smaller under a memory limit).
    slab_depth
        Sets the output's chunk depth when ``chunks`` is not given: the largest power of 2 up
        to 128 dividing it, rounded up to a multiple of ``2 ** (n_levels - 1)``.
    overwrite
        Replace an existing ``target``.
    progress
        Show progress bars over the tasks.
    cluster
        Where the tasks run and how much memory each may use
        (:func:`linumpy.parallel.dask_cluster`); local threads by default.
    max_output_bytes
        The largest output allowed (uncompressed level 0), checked with the room on the
        target's disk before any planning (:func:`linumpy.io.output_size.check_output_size`).

    Raises
    ------
    LinumpyError
        For an integer ``dtype`` and float tiles.
    MemoryLimitError
        When the cluster's memory limit cannot hold one output shard (or chunk) and its tiles.

    Examples
    --------
    Stitch a small demo mosaic grid with its true layout:

    >>> import tempfile
    >>> from linumpy.io import read_omezarr
    >>> from linumpy.mosaic.demo import make_demo_data, read_demo_truth
    >>> from linumpy.mosaic.pipeline import stitch_omezarr
    >>> folder = tempfile.mkdtemp()
    >>> _ = make_demo_data(folder + "/mosaic.ome.zarr", grid_shape=(2, 3), tile_shape=(8, 64, 64))
    >>> transform = read_demo_truth(folder + "/mosaic.ome.zarr")
    >>> stitch_omezarr(folder + "/mosaic.ome.zarr", folder + "/stitched.ome.zarr", transform)
    >>> stitched, voxel_size = read_omezarr(folder + "/stitched.ome.zarr")
    >>> stitched.shape, str(stitched.dtype), voxel_size
    ((8, 119, 167), 'uint16', (3.5, 2.5, 2.5))
    """
    blending = parse_blending(blending)
    array, voxel_size = read_omezarr(source)
    dtype = stitch_dtype(array.dtype, dtype)
    transform = transform.normalized()
    transform.check_mosaic_shape(array.shape, f"{source}: mosaic grid")
    out_shape = (*array.shape[:-2], *transform.output_shape())
    # refused in one line before any planning: a transform off by 1000 would plan for hours
    size = check_output_size(
        out_shape, np.float32, target, max_bytes=max_output_bytes, what="stitched image"
    )
    logger.info("%s: stitched image %s, %s uncompressed", target, out_shape, format_bytes(size))
    chunks = tuple(chunks) if chunks else _output_chunks(out_shape, slab_depth, n_levels, dtype)
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
        level=level,
        overwrite=overwrite,
    )
    block = plan_stitch_block(
        array.shape,
        np.dtype(array.dtype).itemsize,
        transform,
        storage_unit(writer.array),
        cluster,
        source_chunks=array.chunks,
        gpu=gpu,
        source_shards=array.shards,
    )
    threads = stitch_threads(out_shape, block, cluster)
    start = time.perf_counter()
    with committed(writer):
        stitched = stitch_lazy(
            source, transform, blending, block=block, gpu=gpu, threads=threads, dtype=dtype
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
