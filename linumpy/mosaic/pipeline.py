"""File-level mosaic operations on OME-Zarr images, what the ``linum-*`` scripts call:
projection, layout estimation and stitching; with ``gpu=False`` nothing GPU-related is imported.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from linumpy import phases, settings
from linumpy._numpy_or_cupy import gpu_module, to_numpy
from linumpy.errors import LinumpyError
from linumpy.io import OmeZarrWriter, open_array, read_omezarr, read_volume
from linumpy.io.blocks import storage_unit
from linumpy.io.dask_write import (
    committed,
    shard_budget,
    space_axes,
    store_dask,
    write_pyramid,
)
from linumpy.io.layout import ShardsArg, inner_chunks, tile_layout
from linumpy.mosaic.attrs import (
    mosaic_tile_shape,
    projection_coordinates,
    read_linumpy_attrs,
    write_linumpy_attrs,
)
from linumpy.mosaic.convert import convert_to_omezarr
from linumpy.mosaic.projection import leading_axes, projection_lazy
from linumpy.mosaic.registration import PairMeasurement, estimate_transform
from linumpy.mosaic.stitch_file import stitch_omezarr
from linumpy.mosaic.transform import TileTransform
from linumpy.parallel import Cluster

__all__ = [
    "average_intensity_projection",
    "convert_to_omezarr",
    "estimate_transform_omezarr",
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
    >>> from linumpy.mosaic import average_intensity_projection
    >>> path = tempfile.mkdtemp() + "/volume.ome.zarr"
    >>> volume = np.arange(2 * 3 * 4, dtype=np.uint16).reshape(2, 3, 4)
    >>> save_omezarr(volume, path, voxel_size=(1.0, 1.0, 1.0))
    >>> average_intensity_projection(path)
    array([[ 6.,  7.,  8.,  9.],
           [10., 11., 12., 13.],
           [14., 15., 16., 17.]], dtype=float32)
    """
    cluster = cluster or Cluster()
    lazy = projection_lazy(path, gpu=gpu, cluster=cluster)
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

    Computed out of core and written block by block, in linumpy's default layout. A mosaic
    grid's tile layout attributes are kept, with one tile per shard (or chunk) of the output, so
    the projection can be stitched.

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
    >>> from linumpy.mosaic import projection_omezarr
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


def save_png(image: Any, path: str | os.PathLike[str]) -> None:
    """Save a 2D image as an 8-bit PNG preview, stretched between its 0.5th and 99.5th
    percentiles (NaN black)."""
    from PIL import Image

    data = to_numpy(image).astype(np.float64)
    finite = data[np.isfinite(data)]
    low, high = np.percentile(finite, (0.5, 99.5)) if finite.size else (0.0, 1.0)
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
        ``(tile_h, tile_w)``; by default from the image's ``linumpy.mosaic`` attributes, else
        its shard (else chunk) shape.
    gpu
        Read and correlate on the GPU.
    progress
        Show progress bars.
    cluster
        Where a 3D grid's projection runs (its workers, with a scheduler); local threads by
        default.
    **options
        Passed to :func:`linumpy.mosaic.estimate_transform`.

    Returns
    -------
    transform, measurements
        As :func:`linumpy.mosaic.estimate_transform` returns them.

    Examples
    --------
    >>> import tempfile
    >>> from linumpy.mosaic import estimate_transform_omezarr, make_demo_data, read_demo_truth
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
