"""Synthetic serial-OCT mosaic grids with a known tile layout (the data of ``make demo`` and tests).

Overlapping 3D tiles of a tissue volume (speckle, depth attenuation below an uneven surface,
empty background tiles, each tile's own noise floor and vignetting) at the positions an affine
map of the tile index gives, side by side as ``(Z, rows * tile_h, cols * tile_w)``. Every random
field is keyed by position, so a grid of any size is generated a block at a time in bounded
memory, with the same values.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from linumpy.errors import LinumpyError
from linumpy.io.layout import ShardsArg, inner_chunks, tile_layout, tile_shards
from linumpy.io.output_size import check_output_size
from linumpy.mosaic._demo_tissue import DemoContent, Tissue, blocks, generate, tissue_fraction
from linumpy.mosaic.transform import TileTransform

__all__: list[str] = []

#: Voxel size of the demo data (z, y, x) in micrometers, typical of serial OCT.
DEMO_VOXEL_SIZE = (3.5, 2.5, 2.5)


@dataclass(frozen=True)
class DemoMosaic:
    """A generated mosaic grid and what it was made from.

    Attributes
    ----------
    mosaic
        ``(Z, rows * tile_h, cols * tile_w)`` uint16 mosaic grid: numpy or cupy, or the written
        zarr array (:func:`make_demo_data`).
    tissue
        ``(Z, H, W)`` float32 noise-free tissue the tiles were cut from, in the coordinates of
        the stitched image; None for :func:`make_demo_data`.
    transform
        The true tile layout.
    tissue_fraction
        ``(rows, cols)`` fraction of each tile's field of view that holds tissue.

    Examples
    --------
    >>> from linumpy.mosaic import generate_demo_mosaic
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


#: Memory of the generation's blocks and temporaries, bytes (see ``slab_bytes``).
SLAB_BYTES = 512 * 2**20


def _content(
    grid_shape: tuple[int, int],
    tile_shape: tuple[int, int, int],
    overlap: float,
    rotation_deg: float,
    seed: int,
) -> tuple[DemoContent, TileTransform]:
    """What a demo grid is made of: its content (evaluated a block at a time) and true layout."""
    if not 0.0 <= overlap <= 0.5:
        raise LinumpyError(f"overlap must be between 0 and 0.5, got {overlap}")
    if len(tile_shape) != 3 or min(tile_shape) < 8:
        raise LinumpyError(f"tile shape must be three sizes of at least 8 voxels, got {tile_shape}")
    rows, cols = (int(n) for n in grid_shape)
    depth, h, w = (int(n) for n in tile_shape)
    rng = np.random.default_rng(seed)
    transform = _true_transform(rng, (h, w), (rows, cols), overlap, rotation_deg)
    positions = transform.positions()
    extent = np.ceil(positions.reshape(-1, 2).max(axis=0)).astype(int) + (h + 2, w + 2)
    tissue = Tissue.draw(rng, (depth, int(extent[0]), int(extent[1])), seed)
    return DemoContent(seed, tissue, positions, (depth, h, w), (rows, cols)), transform


def generate_demo_mosaic(
    *,
    grid_shape: tuple[int, int] = (4, 5),
    tile_shape: tuple[int, int, int] = (64, 128, 128),
    overlap: float = 0.2,
    rotation_deg: float = 1.5,
    seed: int = 0,
    xp: ModuleType = np,
    slab_bytes: int = SLAB_BYTES,
) -> DemoMosaic:
    """Generate a synthetic serial-OCT mosaic grid in memory (the grid :func:`make_demo_data`
    writes with the same arguments).

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
        ``numpy`` (default) or ``cupy`` (generation on the GPU, equal up to float rounding).
    slab_bytes
        Memory of the generation's temporaries and blocks, bytes (the grid comes on top).

    Returns
    -------
    DemoMosaic

    Examples
    --------
    >>> import numpy as np
    >>> from linumpy.mosaic import generate_demo_mosaic
    >>> demo = generate_demo_mosaic(grid_shape=(2, 2), tile_shape=(8, 16, 16), seed=1)
    >>> demo.mosaic.shape
    (8, 32, 32)
    >>> again = generate_demo_mosaic(grid_shape=(2, 2), tile_shape=(8, 16, 16), seed=1)
    >>> np.array_equal(demo.mosaic, again.mosaic)  # the same seed gives the same data
    True
    """
    content, transform = _content(grid_shape, tile_shape, overlap, rotation_deg, seed)
    mosaic = xp.empty(content.shape, dtype=xp.uint16)
    parts = blocks(content.shape, content.tile_shape, slab_bytes // 4)
    for region, block in generate(content, parts, xp, slab_bytes):
        mosaic[region] = block
    depth, height, width = content.tissue.shape
    tissue = xp.empty(content.tissue.shape, dtype=xp.float32)
    step = content.planes_per_slab(((0, height), (0, width)), slab_bytes)
    for first in range(0, depth, step):
        planes = (first, min(depth, first + step))
        columns = content.tissue.columns(planes, (0, height), (0, width), xp)
        tissue[planes[0] : planes[1]] = content.tissue.box(planes, columns, xp)
    return DemoMosaic(mosaic, tissue, transform, tissue_fraction(content, xp))


def check_demo_space(
    path: str | os.PathLike[str],
    grid_shape: tuple[int, int],
    tile_shape: tuple[int, int, int],
    *,
    free_bytes: int | None = None,
) -> int:
    """Refuse a demo grid the disk at ``path`` cannot hold (DiskSpaceError) before anything is
    written: its speckle barely compresses, so its whole size must fit. Returns that size."""
    depth, height, width = tile_shape
    shape = (depth, grid_shape[0] * height, grid_shape[1] * width)
    hint = "ask for a smaller grid"
    return check_output_size(
        shape, np.uint16, path, what="demo grid", hint=hint, compression=1, free_bytes=free_bytes
    )


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
    slab_bytes: int = SLAB_BYTES,
    free_bytes: int | None = None,
    progress: bool = False,
) -> DemoMosaic:
    """Generate a demo mosaic grid and write it as a zstd OME-Zarr (NGFF 0.5), one shard per tile.

    The grid is generated and written a block of whole stored files at a time, the next block
    generated while the last is written: memory stays within about ``slab_bytes`` and a few
    stored files, whatever the grid's size. A grid the disk cannot hold, or a layout the writer
    refuses, is refused before anything is written. The image's attributes hold, under
    ``linumpy``, ``mosaic`` (``tile_shape`` and ``grid_shape``) and ``demo`` (the true
    ``transform``, each tile's ``tissue_fraction`` and the generation parameters).

    Parameters
    ----------
    path
        The OME-Zarr image to create.
    grid_shape, tile_shape, overlap, rotation_deg, seed, xp, slab_bytes
        See :func:`generate_demo_mosaic`.
    chunks
        Inner chunk shape; by default about ``linumpy.settings.get().chunk_bytes`` dividing a
        tile, or the whole tile when ``shards`` is None.
    shards
        ``"auto"``: one shard per tile; a shape (a multiple of the chunks); None: one file per
        chunk (by default one chunk per tile, the layout other tools write).
    overwrite
        Replace an existing ``path``.
    free_bytes
        Free disk space at ``path``, bytes; measured by default.
    progress
        Show a progress bar (bytes of the grid written).

    Returns
    -------
    DemoMosaic
        What was written: its ``mosaic`` the written array (a read-only zarr array, read on
        access), its ``tissue`` None.

    Raises
    ------
    DiskSpaceError
        When the disk cannot hold the grid.

    Examples
    --------
    >>> import tempfile
    >>> from linumpy.io import read_omezarr
    >>> from linumpy.mosaic import generate_demo_mosaic, make_demo_data
    >>> path = tempfile.mkdtemp() + "/demo.ome.zarr"
    >>> demo = make_demo_data(path, grid_shape=(2, 2), tile_shape=(8, 16, 16))
    >>> array, voxel_size = read_omezarr(path)
    >>> array.shape, array.chunks, array.shards, voxel_size  # a tile smaller than one chunk
    ((8, 32, 32), (8, 16, 16), None, (3.5, 2.5, 2.5))
    >>> import numpy as np
    >>> whole = generate_demo_mosaic(grid_shape=(2, 2), tile_shape=(8, 16, 16))
    >>> np.array_equal(array[...], whole.mosaic)  # the grid generate_demo_mosaic makes
    True
    """
    import zarr
    from tqdm import tqdm

    from linumpy.io.writer import OmeZarrWriter
    from linumpy.mosaic.attrs import write_linumpy_attrs

    check_demo_space(path, grid_shape, tile_shape, free_bytes=free_bytes)
    content, transform = _content(grid_shape, tile_shape, overlap, rotation_deg, seed)
    chunks, shards = _demo_layout(content.shape, content.tile_shape, chunks, shards)
    writer = OmeZarrWriter(
        path,
        content.shape,
        np.uint16,
        voxel_size=DEMO_VOXEL_SIZE,
        chunks=chunks,
        shards=shards,
        overwrite=overwrite,
    )
    written = blocks(content.shape, shards or chunks, slab_bytes // 4)
    total = 2 * math.prod(content.shape)
    with (
        writer,
        ThreadPoolExecutor(1) as writing,
        tqdm(total=total, unit="B", unit_scale=True, disable=not progress) as bar,
    ):
        pending: Future[None] | None = None
        for region, block in generate(content, written, xp, slab_bytes):
            if pending is not None:  # one block written while the next is generated
                pending.result()
            pending = writing.submit(writer.__setitem__, region, block)
            pending.add_done_callback(lambda _, n=block.nbytes: bar.update(n))
            del block
        if pending is not None:
            pending.result()
    parameters = {"overlap": overlap, "rotation_deg": rotation_deg, "seed": seed}
    fraction = tissue_fraction(content, xp)
    write_linumpy_attrs(
        path,
        {
            "mosaic": {
                "tile_shape": list(transform.tile_shape),
                "grid_shape": list(transform.grid_shape),
            },
            "demo": {
                "transform": transform.to_dict(),
                "tissue_fraction": fraction.round(4).tolist(),
                **parameters,
            },
        },
    )
    mosaic = zarr.open_array(Path(path) / "0", mode="r")
    return DemoMosaic(mosaic, None, transform, fraction)


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
    >>> from linumpy.mosaic import make_demo_data, read_demo_truth
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
