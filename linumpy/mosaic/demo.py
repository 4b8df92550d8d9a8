"""Synthetic serial-OCT mosaic grids with a known tile layout (the data of ``make demo`` and tests).

A tissue volume (smooth structures, speckle, depth attenuation below an uneven surface, a tissue
section that leaves some tiles empty) is imaged as overlapping 3D tiles whose top-left corners
follow an affine map of the tile index (stage steps with a small rotation and shear). Every tile
gets its own noise floor and a mild vignetting, as a real acquisition would. The tiles are stored
side by side as a mosaic grid ``(Z, rows * tile_h, cols * tile_w)``, one shard per tile of small
inner chunks (:func:`linumpy.io.layout.tile_layout`), and the ground truth goes into the image's
attributes under the ``linumpy`` key.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from linumpy._numpy_or_cupy import ndimage_module
from linumpy.errors import LinumpyError
from linumpy.io.layout import ShardsArg, inner_chunks, tile_layout, tile_shards
from linumpy.mosaic.transform import TileTransform

__all__ = ["DemoMosaic", "generate_demo_mosaic", "make_demo_data", "read_demo_truth"]

#: Voxel size of the demo data (z, y, x) in micrometers, typical of serial OCT.
DEMO_VOXEL_SIZE = (3.5, 2.5, 2.5)


@dataclass(frozen=True)
class DemoMosaic:
    """A generated mosaic grid and what it was made from.

    Attributes
    ----------
    mosaic
        ``(Z, rows * tile_h, cols * tile_w)`` uint16 mosaic grid (numpy or cupy, as generated).
    tissue
        ``(Z, H, W)`` float32 noise-free tissue intensity the tiles were cut from, in the
        coordinates of the stitched image (tile ``(r, c)`` starts at
        ``transform.positions()[r, c]``); None where it was not kept (``keep_tissue``, and
        :func:`make_demo_data`, for which it would be the largest array).
    transform
        The true tile layout.
    tissue_fraction
        ``(rows, cols)`` fraction of each tile's field of view that holds tissue.

    Examples
    --------
    >>> demo = generate_demo_mosaic(grid_shape=(2, 3), tile_shape=(8, 16, 16))
    >>> demo.mosaic.shape, demo.mosaic.dtype, demo.transform.grid_shape
    ((8, 32, 48), dtype('uint16'), (2, 3))
    >>> demo.tissue_fraction.shape, demo.tissue.dtype
    ((2, 3), dtype('float32'))
    """

    mosaic: Any
    tissue: Any
    transform: TileTransform
    tissue_fraction: np.ndarray


def _true_transform(
    rng: np.random.Generator,
    tile_shape: tuple[int, int],
    grid_shape: tuple[int, int],
    overlap: float,
    rotation_deg: float,
) -> TileTransform:
    # Stage steps with a small scale error, a rotation of the camera against the stage and a shear.
    step = np.array(tile_shape, dtype=np.float64) * (1.0 - overlap)
    step *= 1.0 + rng.uniform(-0.01, 0.01, size=2)
    theta = math.radians(rotation_deg)
    rotation = np.array([[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]])
    shear = np.array([[1.0, rng.uniform(-0.01, 0.01)], [0.0, 1.0]])
    matrix = rotation @ shear @ np.diag(step)
    return TileTransform(matrix.tolist(), (0.0, 0.0), tile_shape, grid_shape).normalized()


#: Voxels of the tissue volume generated at once on the GPU: larger grids are generated in slabs
#: of planes (each of a few float32 temporaries this large), so an 8 GiB grid fits a GPU.
SLAB_VOXELS = 2**30
#: The same on the host, where slabs of SLAB_VOXELS would make temporaries of many times the
#: grid's size: slabs of 128 MiB temporaries.
HOST_SLAB_VOXELS = 2**25


def _coarse_field(
    rng: np.random.Generator, shape: tuple[int, ...], factors: tuple[int, ...], sigma: float
) -> np.ndarray:
    """Smoothed noise of unit spread on the coarse grid of :func:`_upsample`."""
    from scipy import ndimage

    coarse_shape = tuple(math.ceil(n / f) + 2 for n, f in zip(shape, factors, strict=True))
    coarse = ndimage.gaussian_filter(rng.standard_normal(coarse_shape), sigma, mode="wrap")
    return (coarse - coarse.mean()) / coarse.std()


def _upsample(
    coarse: np.ndarray,
    shape: tuple[int, ...],
    factors: tuple[int, ...],
    xp: ModuleType,
    planes: tuple[int, int] | None = None,
) -> Any:
    """A coarse field upsampled by ``factors`` to ``shape``, or to its planes
    ``planes[0]:planes[1]`` along the first axis (the same values as those of the whole)."""
    field = xp.asarray(coarse, dtype=xp.float32)
    # Separable linear upsampling, one axis at a time (much faster than ndimage.zoom).
    for axis, (n, factor) in enumerate(zip(shape, factors, strict=True)):
        first, last = planes if axis == 0 and planes is not None else (0, n)
        t = xp.arange(first, last, dtype=xp.float32) / factor
        i0 = t.astype(xp.int64)
        frac = (t - i0).reshape((-1,) + (1,) * (len(shape) - axis - 1))
        field = (1 - frac) * xp.take(field, i0, axis=axis) + frac * xp.take(
            field, i0 + 1, axis=axis
        )
    return field


def _smooth_field(
    rng: np.random.Generator,
    shape: tuple[int, ...],
    factors: tuple[int, ...],
    sigma: float,
    xp: ModuleType,
) -> Any:
    """Gaussian random field of unit spread: smoothed noise on a coarse grid, upsampled by
    ``factors`` along each axis."""
    return _upsample(_coarse_field(rng, shape, factors, sigma), shape, factors, xp)


@dataclass(frozen=True)
class _Tissue:
    """What the tissue volume is made of: its 2D mask and surface, and the coarse 3D fields that
    :meth:`planes` upsamples a slab at a time."""

    shape: tuple[int, int, int]
    mask: Any
    surface: Any
    regions: np.ndarray
    fibres: np.ndarray

    def planes(self, first: int, last: int, xp: ModuleType) -> Any:
        """Noise-free tissue intensity of planes ``first:last``, float32."""
        depth = self.shape[0]
        regions = _upsample(self.regions, self.shape, (16, 16, 16), xp, (first, last))
        fibres = _upsample(self.fibres, self.shape, (16, 2, 2), xp, (first, last))
        reflectivity = 0.35 + 0.65 / (1.0 + xp.exp(-2.5 * regions)) + 0.25 * xp.tanh(fibres)
        z = xp.arange(first, last, dtype=xp.float32)[:, None, None]
        below = z - self.surface[None]
        attenuation = xp.where(below >= 0, xp.exp(-xp.maximum(below, 0) / (0.45 * depth)), 0.0)
        tissue = reflectivity * attenuation * self.mask[None]
        return tissue.astype(xp.float32)


def _tissue(rng: np.random.Generator, shape: tuple[int, int, int], xp: ModuleType) -> _Tissue:
    """The tissue of a volume of ``shape`` ``(Z, H, W)``."""
    depth, height, width = shape
    y = xp.linspace(-1.0, 1.0, height, dtype=xp.float32)[:, None]
    x = xp.linspace(-1.0, 1.0, width, dtype=xp.float32)[None, :]
    # A section off the centre with a wavy outline: the corner tiles hold little or no tissue.
    radius = xp.sqrt(((y - 0.12) / 0.72) ** 2 + ((x - 0.1) / 0.76) ** 2)
    outline = 1.0 + 0.08 * xp.tanh(_smooth_field(rng, (height, width), (16, 16), 2.0, xp))
    mask = radius < outline

    # Regions of different reflectivity (grey/white matter-like) and a fine texture (fibre bundles,
    # vessels) that runs deep into the tissue, so that it survives the projection along z.
    regions = _coarse_field(rng, shape, (16, 16, 16), 1.5)
    fibres = _coarse_field(rng, shape, (16, 2, 2), 0.8)

    # Light enters through an uneven surface and decays with depth below it.
    surface = depth * (0.12 + 0.04 * _smooth_field(rng, (height, width), (32, 32), 1.0, xp))
    return _Tissue(shape, mask, surface, regions, fibres)


def _cut_tile(volume: Any, y: float, x: float, tile_shape: tuple[int, int], xp: ModuleType) -> Any:
    """Bilinear sample of ``volume`` over one tile's field of view starting at ``(y, x)``."""
    h, w = tile_shape
    y0, x0 = math.floor(y), math.floor(x)
    fy, fx = y - y0, x - x0
    block = volume[:, y0 : y0 + h + 1, x0 : x0 + w + 1]
    rows = (1 - fy) * block[:, :h] + fy * block[:, 1 : h + 1]
    return (1 - fx) * rows[:, :, :w] + fx * rows[:, :, 1 : w + 1]


def generate_demo_mosaic(
    *,
    grid_shape: tuple[int, int] = (4, 5),
    tile_shape: tuple[int, int, int] = (64, 128, 128),
    overlap: float = 0.2,
    rotation_deg: float = 1.5,
    seed: int = 0,
    xp: ModuleType = np,
    keep_tissue: bool = True,
) -> DemoMosaic:
    """Generate a synthetic serial-OCT mosaic grid in memory.

    Parameters
    ----------
    grid_shape
        ``(rows, cols)`` of tiles.
    tile_shape
        ``(Z, height, width)`` of one tile in voxels.
    overlap
        Nominal fraction of a tile shared with its neighbour (0 to 0.5).
    rotation_deg
        Rotation of the camera against the stage, in degrees.
    seed
        Seed of every random choice: the same seed gives the same data.
    xp
        ``numpy`` (default) or ``cupy`` (generation on the GPU; the random draws then differ).
    keep_tissue
        Keep the noise-free tissue volume (:attr:`DemoMosaic.tissue`), about 1.5 times the
        grid's bytes in float32; without it, the grid is made in less memory.

    Returns
    -------
    DemoMosaic

    Examples
    --------
    >>> import numpy as np
    >>> demo = generate_demo_mosaic(grid_shape=(2, 2), tile_shape=(8, 16, 16), seed=1)
    >>> demo.mosaic.shape
    (8, 32, 32)
    >>> again = generate_demo_mosaic(grid_shape=(2, 2), tile_shape=(8, 16, 16), seed=1)
    >>> np.array_equal(demo.mosaic, again.mosaic)  # the same seed gives the same data
    True
    """
    if not 0.0 <= overlap <= 0.5:
        raise LinumpyError(f"overlap must be between 0 and 0.5, got {overlap}")
    if len(tile_shape) != 3 or min(tile_shape) < 8:
        raise LinumpyError(f"tile shape must be three sizes of at least 8 voxels, got {tile_shape}")
    rows, cols = grid_shape
    depth, h, w = (int(n) for n in tile_shape)
    rng = np.random.default_rng(seed)
    transform = _true_transform(rng, (h, w), (rows, cols), overlap, rotation_deg)
    positions = transform.positions()
    extent = np.ceil(positions.reshape(-1, 2).max(axis=0)).astype(int) + (h + 2, w + 2)
    model = _tissue(rng, (depth, int(extent[0]), int(extent[1])), xp)
    tissue = xp.empty(model.shape, dtype=xp.float32) if keep_tissue else None
    mask = model.mask

    noise = xp.random.default_rng(seed)
    ndimage = ndimage_module(xp)
    yy = xp.linspace(-1.0, 1.0, h, dtype=xp.float32)[:, None]
    xx = xp.linspace(-1.0, 1.0, w, dtype=xp.float32)[None, :]
    vignetting = 1.0 - 0.12 * (yy**2 + xx**2)
    mosaic = xp.empty((depth, rows * h, cols * w), dtype=xp.uint16)
    tissue_fraction = np.zeros((rows, cols))
    slab_voxels = HOST_SLAB_VOXELS if xp is np else SLAB_VOXELS
    step = max(1, slab_voxels // int(extent[0] * extent[1]))
    for first in range(0, depth, step):
        last = min(depth, first + step)
        slab = model.planes(first, last, xp)
        if tissue is not None:
            tissue[first:last] = slab
        # Speckle: exponentially distributed intensity with a grain of about the optical
        # resolution (a few pixels), fixed by the tissue itself, so overlapping tiles see the
        # same speckle.
        speckle = -xp.log1p(-noise.random(slab.shape, dtype=xp.float32))
        for axis in (1, 2):
            speckle = ndimage.gaussian_filter1d(speckle, 1.0, axis=axis, mode="nearest")
        speckled = slab * (speckle / speckle.mean())
        del speckle
        for row, col in transform.tiles():
            y, x = positions[row, col]
            tile = _cut_tile(speckled, y, x, (h, w), xp) * vignetting
            # Detector noise floor: Rayleigh-distributed, independent for every acquisition.
            floor = xp.sqrt(-2.0 * xp.log1p(-noise.random(tile.shape, dtype=xp.float32)))
            counts = 3000.0 * tile + 150.0 * floor
            ys, xs = transform.grid_slices(row, col)
            mosaic[first:last, ys, xs] = xp.clip(counts + 0.5, 0, 65535).astype(xp.uint16)
            if first == 0:
                y0, x0 = math.floor(y + 0.5), math.floor(x + 0.5)
                tissue_fraction[row, col] = float(mask[y0 : y0 + h, x0 : x0 + w].mean())
        del speckled
    return DemoMosaic(mosaic, tissue, transform, tissue_fraction)


def make_demo_data(
    path: str | os.PathLike[str],
    *,
    grid_shape: tuple[int, int] = (4, 5),
    tile_shape: tuple[int, int, int] = (64, 128, 128),
    overlap: float = 0.2,
    rotation_deg: float = 1.5,
    seed: int = 0,
    chunks: Sequence[int] | None = None,
    shards: ShardsArg = "auto",
    overwrite: bool = False,
    xp: ModuleType = np,
) -> DemoMosaic:
    """Generate a demo mosaic grid and write it as a zstd OME-Zarr (NGFF 0.5), one shard per tile.

    The image's attributes hold, under ``linumpy``: ``mosaic`` (``tile_shape`` ``[h, w]`` and
    ``grid_shape``) and ``demo`` (the true ``transform`` as :meth:`TileTransform.to_dict` writes
    it, each tile's ``tissue_fraction``, and the generation parameters).

    Parameters
    ----------
    path
        The OME-Zarr image to create.
    grid_shape, tile_shape, overlap, rotation_deg, seed, xp
        See :func:`generate_demo_mosaic`.
    chunks
        Inner chunk shape; by default about ``linumpy.settings.get().chunk_bytes`` dividing a
        tile (:func:`linumpy.io.layout.tile_layout`), or the whole tile when ``shards`` is None.
    shards
        ``"auto"`` (the default): one shard per tile; a shape (a multiple of the chunks); None:
        no shards, one file per chunk (with the default chunks, one chunk per tile: the layout
        other tools write).
    overwrite
        Replace an existing ``path``.

    Returns
    -------
    DemoMosaic
        What was written (its ``tissue`` not kept: None).

    Examples
    --------
    >>> import tempfile
    >>> from linumpy.io import read_omezarr
    >>> path = tempfile.mkdtemp() + "/demo.ome.zarr"
    >>> demo = make_demo_data(path, grid_shape=(2, 2), tile_shape=(8, 16, 16))
    >>> array, voxel_size = read_omezarr(path)
    >>> array.shape, array.chunks, array.shards, voxel_size  # a tile smaller than one chunk
    ((8, 32, 32), (8, 16, 16), None, (3.5, 2.5, 2.5))
    >>> from linumpy import settings
    >>> with settings.set(chunk_bytes=1024):  # chunks of 1 KiB: four per tile, in its shard
    ...     _ = make_demo_data(path, grid_shape=(2, 2), tile_shape=(8, 16, 16), overwrite=True)
    >>> read_omezarr(path)[0].chunks, read_omezarr(path)[0].shards
    ((2, 16, 16), (8, 16, 16))
    """
    from linumpy.io.omezarr import OmeZarrWriter
    from linumpy.mosaic.attrs import write_linumpy_attrs

    demo = generate_demo_mosaic(
        grid_shape=grid_shape,
        tile_shape=tile_shape,
        overlap=overlap,
        rotation_deg=rotation_deg,
        seed=seed,
        xp=xp,
        keep_tissue=False,
    )
    chunks, shards = _demo_layout(demo.mosaic.shape, tile_shape, chunks, shards)
    writer = OmeZarrWriter(
        path,
        demo.mosaic.shape,
        np.uint16,
        voxel_size=DEMO_VOXEL_SIZE,
        chunks=chunks,
        shards=shards,
        overwrite=overwrite,
    )
    with writer:
        writer[...] = demo.mosaic  # chunk-aligned: zarr encodes the tiles concurrently
    parameters = {"overlap": overlap, "rotation_deg": rotation_deg, "seed": seed}
    write_linumpy_attrs(
        path,
        {
            "mosaic": {
                "tile_shape": list(demo.transform.tile_shape),
                "grid_shape": list(demo.transform.grid_shape),
            },
            "demo": {
                "transform": demo.transform.to_dict(),
                "tissue_fraction": demo.tissue_fraction.round(4).tolist(),
                **parameters,
            },
        },
    )
    return demo


def _demo_layout(
    shape: tuple[int, ...],
    tile_shape: Sequence[int],
    chunks: Sequence[int] | None,
    shards: ShardsArg,
) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """The chunks and shards of a demo mosaic grid (see :func:`make_demo_data`)."""
    tile = tuple(int(n) for n in tile_shape)
    if shards is None:
        return tuple(chunks or tile), None
    if chunks is None:
        chunks = tile_layout(shape, np.uint16, tile[-2:]).chunks
        if not isinstance(shards, str) and any(int(s) % c for s, c in zip(shards, chunks)):
            chunks = inner_chunks(shape, np.uint16, within=shards)
    chunks = tuple(int(c) for c in chunks)
    if isinstance(shards, str):
        return chunks, tile_shards(shape, chunks, np.uint16, tile[-2:])
    return chunks, tuple(int(s) for s in shards)


def read_demo_truth(path: str | os.PathLike[str]) -> TileTransform:
    """The true tile layout stored in a demo mosaic grid's attributes.

    Raises
    ------
    LinumpyError
        When ``path`` holds no demo ground truth.

    Examples
    --------
    >>> import tempfile
    >>> path = tempfile.mkdtemp() + "/demo.ome.zarr"
    >>> demo = make_demo_data(path, grid_shape=(2, 2), tile_shape=(8, 16, 16))
    >>> truth = read_demo_truth(path)
    >>> truth.grid_shape, truth.tile_shape, truth == demo.transform
    ((2, 2), (16, 16), True)
    """
    from linumpy.mosaic.attrs import read_linumpy_attrs

    truth = read_linumpy_attrs(path).get("demo", {}).get("transform")
    if truth is None:
        raise LinumpyError(
            f"{path}: no demo ground truth (linumpy.demo.transform) in its attributes"
        )
    return TileTransform.from_dict(truth)
