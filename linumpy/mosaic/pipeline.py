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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from tqdm import tqdm

from linumpy._xp import gpu_module, to_numpy
from linumpy.errors import LinumpyError
from linumpy.io import OmeZarrWriter, downsample_mean, open_array, read_omezarr, read_volume
from linumpy.io.omezarr import NgffVersion
from linumpy.mosaic.registration import PairMeasurement, estimate_transform
from linumpy.mosaic.stitch import Blending, parse_blending, stitch
from linumpy.mosaic.transform import TileTransform, parse_tile_shape

__all__ = [
    "ATTRS_KEY",
    "average_intensity_projection",
    "convert_to_omezarr",
    "estimate_transform_omezarr",
    "mosaic_tile_shape",
    "open_source",
    "read_linumpy_attrs",
    "save_png",
    "stitch_omezarr",
    "write_linumpy_attrs",
]

logger = logging.getLogger(__name__)

#: Key of an OME-Zarr image's group attributes under which linumpy keeps its own metadata:
#: ``{"mosaic": {"tile_shape": [h, w], "grid_shape": [rows, cols]}, "demo": {...}, ...}``.
ATTRS_KEY = "linumpy"


def read_linumpy_attrs(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``linumpy`` attributes of an OME-Zarr image (empty for a plain array or none).

    Examples
    --------
    >>> import tempfile
    >>> from linumpy.io.demo import make_demo_data
    >>> from linumpy.mosaic.pipeline import read_linumpy_attrs
    >>> path = tempfile.mkdtemp() + "/mosaic.ome.zarr"
    >>> _ = make_demo_data(path, grid_shape=(2, 3), tile_shape=(8, 64, 64))
    >>> attrs = read_linumpy_attrs(path)
    >>> sorted(attrs), attrs["mosaic"]
    (['demo', 'mosaic'], {'tile_shape': [64, 64], 'grid_shape': [2, 3]})
    """
    node = zarr.open(store=os.fspath(path), mode="r")
    if isinstance(node, zarr.Array):
        return {}
    return dict(node.attrs.get(ATTRS_KEY, {}))


def write_linumpy_attrs(path: str | os.PathLike[str], values: dict[str, Any]) -> None:
    """Merge ``values`` into the ``linumpy`` attributes of the OME-Zarr image at ``path``.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import save_omezarr
    >>> from linumpy.mosaic.pipeline import read_linumpy_attrs, write_linumpy_attrs
    >>> path = tempfile.mkdtemp() + "/image.ome.zarr"
    >>> save_omezarr(np.zeros((2, 6, 4), np.uint16), path, voxel_size=(1.0, 1.0, 1.0))
    >>> read_linumpy_attrs(path)
    {}
    >>> write_linumpy_attrs(path, {"mosaic": {"tile_shape": [3, 2], "grid_shape": [2, 2]}})
    >>> write_linumpy_attrs(path, {"note": "acquired on Monday"})
    >>> read_linumpy_attrs(path)
    {'mosaic': {'tile_shape': [3, 2], 'grid_shape': [2, 2]}, 'note': 'acquired on Monday'}
    """
    group = zarr.open_group(store=os.fspath(path), mode="r+")
    group.attrs[ATTRS_KEY] = {**dict(group.attrs.get(ATTRS_KEY, {})), **values}


def mosaic_tile_shape(
    path: str | os.PathLike[str], tile_shape: Sequence[int] | None = None
) -> tuple[int, int]:
    """The ``(tile_h, tile_w)`` of a mosaic grid image.

    Taken from ``tile_shape`` when given, else from the image's ``linumpy.mosaic`` attributes,
    else from its chunk shape (a mosaic grid stores one chunk per tile).

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import save_omezarr
    >>> from linumpy.mosaic.pipeline import mosaic_tile_shape, write_linumpy_attrs
    >>> path = tempfile.mkdtemp() + "/grid.ome.zarr"
    >>> save_omezarr(
    ...     np.zeros((2, 16, 24), np.uint16), path, voxel_size=(1.0, 1.0, 1.0), chunks=(2, 8, 8)
    ... )
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
    chunks = open_array(path).chunks
    return parse_tile_shape(chunks[-2:])


def _slabs(depth: int, step: int) -> Iterator[tuple[int, int]]:
    for start in range(0, depth, step):
        yield start, min(start + step, depth)


def average_intensity_projection(
    path: str | os.PathLike[str],
    *,
    gpu: bool = False,
    slab_depth: int | None = None,
    progress: bool = False,
) -> Any:
    """Mean of a 3D volume along z (axis 0), read slab by slab.

    Parameters
    ----------
    path
        OME-Zarr image or zarr array of shape ``(Z, Y, X)``.
    gpu
        Read with ``read_volume(..., gpu=True)`` and sum on the GPU; returns a cupy array.
    slab_depth
        Planes read at once; the array's chunk depth by default.
    progress
        Show a progress bar over the slabs.

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
    xp = gpu_module(gpu)
    array = open_array(path)
    if array.ndim != 3:
        raise LinumpyError(
            f"{path}: an average intensity projection needs a 3D volume, not "
            f"{array.ndim}D {array.shape}"
        )
    depth = array.shape[0]
    step = slab_depth or array.chunks[0]
    total = xp.zeros(array.shape[1:], dtype=xp.float64)
    slabs = list(_slabs(depth, step))
    for z0, z1 in tqdm(slabs, desc="projection", unit="slab", disable=not progress):
        block = read_volume(path, gpu=gpu, region=(slice(z0, z1), slice(None), slice(None)))
        total += block.sum(axis=0, dtype=xp.float64)
    return (total / depth).astype(xp.float32)


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
    Image.fromarray(np.round(scaled * 255).astype(np.uint8)).save(os.fspath(path), format="PNG")


def estimate_transform_omezarr(
    path: str | os.PathLike[str],
    *,
    tile_shape: Sequence[int] | None = None,
    gpu: bool = False,
    progress: bool = False,
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
    **options
        Passed to :func:`linumpy.mosaic.registration.estimate_transform`.

    Returns
    -------
    transform, measurements
        As :func:`linumpy.mosaic.registration.estimate_transform` returns them.

    Examples
    --------
    >>> import tempfile
    >>> from linumpy.io.demo import make_demo_data, read_demo_truth
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
        image = average_intensity_projection(path, gpu=gpu, progress=progress)
    elif ndim == 2:
        image = read_volume(path, gpu=gpu).astype(gpu_module(gpu).float32)
    else:
        raise LinumpyError(f"{path}: a mosaic grid is 2D or 3D, not {ndim}D")
    return estimate_transform(image, shape, progress=progress, **options)


def _output_chunks(shape: tuple[int, ...], slab_depth: int) -> tuple[int, ...]:
    yx = tuple(min(128, n) for n in shape[-2:])
    if len(shape) == 2:
        return yx
    return (min(math.gcd(slab_depth, 128), shape[0]), *yx)


@contextmanager
def _level_arrays(writer: OmeZarrWriter, gpu: bool) -> Iterator[list[zarr.Array]]:
    """The writer's level arrays; on the GPU reopened inside ``gpu_zarr_context`` so that zarr
    takes cupy blocks and encodes them with nvCOMP."""
    if not gpu:
        yield writer.arrays
        return
    from linumpy.gpu.zarr_io import gpu_zarr_context

    with gpu_zarr_context():
        yield [
            zarr.open_array(store=os.fspath(writer.path / array.path), mode="r+")
            for array in writer.arrays
        ]


def _write_levels(writer: OmeZarrWriter, block: Any, z0: int | None, gpu: bool) -> None:
    """Write ``block`` (planes ``z0`` and up, or the whole image when ``z0`` is None) into every
    pyramid level of ``writer``, downsampling in memory: ``z0`` and the block's depth must be
    multiples of ``2 ** (levels - 1)`` unless the block ends the image."""
    with _level_arrays(writer, gpu) as levels:
        for index, level_array in enumerate(levels):
            if index:
                block = downsample_mean(block)
            if z0 is None:
                level_array[...] = block
            else:
                start = z0 // 2**index
                level_array[start : start + block.shape[0]] = block
    if gpu:
        import cupy

        cupy.cuda.get_current_stream().synchronize()


def _slab_depth(requested: int | None, chunk_depth: int, depth: int, n_levels: int) -> int:
    unit = 2 ** (n_levels - 1)
    return min(math.ceil((requested or chunk_depth) / unit) * unit, depth)


def stitch_omezarr(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    transform: TileTransform,
    *,
    blending: Blending = "linear",
    gpu: bool = False,
    n_levels: int = 3,
    chunks: Sequence[int] | None = None,
    shards: Sequence[int] | None = None,
    level: int = 3,
    slab_depth: int | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> None:
    """Stitch a mosaic grid OME-Zarr into a float32 OME-Zarr image with a pyramid.

    The grid is read, stitched and written slab by slab along z (3D) or at once (2D); each slab's
    pyramid levels are computed in memory, so the whole pipeline runs on the GPU with ``gpu``.

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
    n_levels, chunks, shards, level
        Pyramid levels, chunk and shard shapes, zstd level of the output.
    slab_depth
        Planes stitched at once; by default the source's chunk depth, rounded up to a multiple
        of ``2 ** (n_levels - 1)`` so that slabs downsample independently.
    overwrite
        Replace an existing ``target``.
    progress
        Show a progress bar over the tiles.

    Examples
    --------
    Stitch a small demo mosaic grid with its true layout:

    >>> import tempfile
    >>> from linumpy.io import read_omezarr
    >>> from linumpy.io.demo import make_demo_data, read_demo_truth
    >>> from linumpy.mosaic.pipeline import stitch_omezarr
    >>> folder = tempfile.mkdtemp()
    >>> _ = make_demo_data(folder + "/mosaic.ome.zarr", grid_shape=(2, 3), tile_shape=(8, 64, 64))
    >>> transform = read_demo_truth(folder + "/mosaic.ome.zarr")
    >>> stitch_omezarr(folder + "/mosaic.ome.zarr", folder + "/stitched.ome.zarr", transform)
    >>> stitched, voxel_size = read_omezarr(folder + "/stitched.ome.zarr")
    >>> stitched.shape, str(stitched.dtype), voxel_size
    ((8, 119, 167), 'float32', (3.5, 2.5, 2.5))
    """
    blending = parse_blending(blending)
    array, voxel_size = read_omezarr(source)
    transform = transform.normalized()
    transform.check_mosaic_shape(array.shape, f"{source}: mosaic grid")
    out_shape = (*array.shape[:-2], *transform.output_shape())
    depth = array.shape[0] if array.ndim == 3 else 1
    step = _slab_depth(slab_depth, array.chunks[0], depth, n_levels) if array.ndim == 3 else 1
    writer = OmeZarrWriter(
        target,
        out_shape,
        np.float32,
        voxel_size=voxel_size,
        chunks=chunks or _output_chunks(out_shape, step),
        shards=shards,
        n_levels=n_levels,
        level=level,
        overwrite=overwrite,
    )
    slabs = list(_slabs(depth, step))
    timings = {"read": 0.0, "stitch": 0.0, "write": 0.0}
    with tqdm(
        total=len(slabs) * transform.n_tiles, desc="stitch", unit="tile", disable=not progress
    ) as bar:
        for z0, z1 in slabs:
            start = time.perf_counter()
            region = (slice(z0, z1), slice(None), slice(None))[3 - array.ndim :]
            block = read_volume(source, gpu=gpu, region=region)
            timings["read"] += time.perf_counter() - start
            start = time.perf_counter()
            stitched = stitch(block, transform, blending, on_tile=bar.update)
            del block
            timings["stitch"] += time.perf_counter() - start
            start = time.perf_counter()
            _write_levels(writer, stitched, z0 if array.ndim == 3 else None, gpu)
            timings["write"] += time.perf_counter() - start
    write_linumpy_attrs(
        target,
        {
            "stitch": {
                "source": os.fspath(source),
                "blending": blending,
                "transform": transform.to_dict(),
            }
        },
    )
    logger.info(
        "stitched %s -> %s (%s, %s): read %.2f s, stitch %.2f s, write %.2f s",
        source,
        target,
        "GPU" if gpu else "CPU",
        blending,
        timings["read"],
        timings["stitch"],
        timings["write"],
    )


def open_source(path: str | os.PathLike[str]) -> tuple[Any, tuple[float, ...] | None]:
    """Open an image to convert: a TIFF stack, a ``.npy`` file, an OME-Zarr image or a zarr array.

    Returns
    -------
    array
        Array-like (numpy memory map, numpy array or lazy zarr array).
    voxel_size
        The OME-Zarr image's voxel size, else None.

    Raises
    ------
    LinumpyError
        When the file cannot be read as any of these (the message names it).

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import save_omezarr
    >>> from linumpy.mosaic.pipeline import open_source
    >>> folder = tempfile.mkdtemp()
    >>> volume = np.zeros((4, 6, 8), np.uint8)
    >>> np.save(folder + "/volume.npy", volume)
    >>> array, voxel_size = open_source(folder + "/volume.npy")
    >>> array.shape, voxel_size
    ((4, 6, 8), None)
    >>> save_omezarr(volume, folder + "/volume.ome.zarr", voxel_size=(5, 2, 2))
    >>> array, voxel_size = open_source(folder + "/volume.ome.zarr")
    >>> array.shape, voxel_size
    ((4, 6, 8), (5.0, 2.0, 2.0))
    """
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            return np.load(path, mmap_mode="r"), None
        if suffix in (".tif", ".tiff"):
            import tifffile

            return tifffile.imread(path), None
    except (OSError, ValueError) as exc:
        raise LinumpyError(f"{path}: cannot read it as {suffix[1:]}: {exc}") from None
    node = open_array(path)  # raises LinumpyError for anything that is not zarr
    try:
        return read_omezarr(path)
    except LinumpyError:
        return node, None


def convert_to_omezarr(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    voxel_size: Sequence[float] | None = None,
    chunks: Sequence[int] | None = None,
    shards: Sequence[int] | None = None,
    n_levels: int = 1,
    level: int = 3,
    ngff_version: NgffVersion = "0.5",
    gpu: bool = False,
    overwrite: bool = False,
    progress: bool = False,
) -> None:
    """Convert a TIFF stack, ``.npy`` file or zarr array to a zstd OME-Zarr image.

    The data goes through in slabs along the first axis; the pyramid is built in memory slab by
    slab. With ``gpu`` the slabs are encoded on the GPU (nvCOMP; NGFF 0.5 only).

    Parameters
    ----------
    source
        The input (see :func:`open_source`).
    target
        The OME-Zarr image to create.
    voxel_size
        Voxel size per axis; by default the source's (OME-Zarr) or 1.
    chunks, shards, n_levels, level, ngff_version
        As for :class:`linumpy.io.OmeZarrWriter`.
    gpu
        Encode on the GPU.
    overwrite
        Replace an existing ``target``.
    progress
        Show a progress bar over the slabs.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import read_omezarr
    >>> from linumpy.mosaic.pipeline import convert_to_omezarr
    >>> folder = tempfile.mkdtemp()
    >>> np.save(folder + "/volume.npy", np.arange(4 * 6 * 8, dtype=np.uint16).reshape(4, 6, 8))
    >>> convert_to_omezarr(
    ...     folder + "/volume.npy", folder + "/volume.ome.zarr", voxel_size=(5.0, 2.5, 2.5)
    ... )
    >>> array, voxel_size = read_omezarr(folder + "/volume.ome.zarr")
    >>> array.shape, str(array.dtype), voxel_size, int(array[3, 5, 7])
    ((4, 6, 8), 'uint16', (5.0, 2.5, 2.5), 191)
    """
    data, stored_voxel_size = open_source(source)
    if not 2 <= data.ndim <= 5:
        raise LinumpyError(f"{source}: OME-Zarr images have 2 to 5 axes, not {data.ndim}")
    if gpu and ngff_version != "0.5":
        logger.warning(
            "GPU encoding writes zarr v3 only: encoding NGFF %s on the CPU", ngff_version
        )
        gpu = False
    voxel_size = voxel_size or stored_voxel_size or (1.0,) * data.ndim
    writer = OmeZarrWriter(
        target,
        data.shape,
        data.dtype,
        voxel_size=voxel_size,
        chunks=chunks,
        shards=shards,
        n_levels=n_levels,
        level=level,
        overwrite=overwrite,
        ngff_version=ngff_version,
    )
    xp = gpu_module(gpu)
    write_block = writer.array.shards or writer.array.chunks
    step = _slab_depth(None, write_block[0], data.shape[0], n_levels)
    for z0, z1 in tqdm(
        list(_slabs(data.shape[0], step)), desc="convert", unit="slab", disable=not progress
    ):
        _write_levels(writer, xp.asarray(data[z0:z1]), z0, gpu)
