"""The write engine's plan stage: which files a region replaces, and which chunks each holds.

A write replaces whole files, so the region must start on the file grid and end on it or at the
array's end. Inner chunks follow zarr's ``subchunk_write_order`` so that files match zarr's byte
for byte. Anything but zarr v3 on a local directory with a recognised chain raises
:class:`UnsupportedLayoutError`, and callers let zarr write.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr
from zarr.codecs import ShardingCodec
from zarr.storage import LocalStore

from linumpy.errors import UnsupportedLayoutError
from linumpy.io.engine.array_layout import parse_chain, shard_index_location
from linumpy.io.engine.codecs.protocol import Compressor
from linumpy.io.engine.region import Region, parse_region
from linumpy.io.formats import for_zarr_format

__all__: list[str] = []

#: Numeric kinds the engine writes (bool, integers, floats, complex).
_KINDS = "biufc"


@dataclass(frozen=True)
class WriteLayout:
    """How an array's chunks are encoded and stored."""

    root: str
    shape: tuple[int, ...]
    dtype: np.dtype
    stored_dtype: np.dtype
    fill_value: np.generic
    chunk_shape: tuple[int, ...]
    block_shape: tuple[int, ...]
    sharded: bool
    index_at_start: bool
    compressor: Compressor
    level: int
    checksum: bool
    crc32c: bool
    write_empty_chunks: bool
    encode_key: Callable[[tuple[int, ...]], str]
    inner_order: np.ndarray

    @property
    def chunks_per_block(self) -> tuple[int, ...]:
        """Inner chunks along each axis of a block (all 1 when unsharded)."""
        return tuple(b // c for b, c in zip(self.block_shape, self.chunk_shape))

    @property
    def chunk_nbytes(self) -> int:
        """Bytes of one decoded chunk."""
        return math.prod(self.chunk_shape) * self.stored_dtype.itemsize


@functools.cache
def _inner_order(sharding: ShardingCodec, per_block: tuple[int, ...]) -> np.ndarray:
    """Linear indices of a shard's inner chunks in zarr's layout order (C order if unknown)."""
    try:
        coords = list(sharding._subchunk_order_iter(per_block, sharding.subchunk_write_order))
    except (AttributeError, ValueError, TypeError):  # another zarr release: any order reads
        return np.arange(math.prod(per_block), dtype=np.int64)
    if not coords:
        return np.zeros(0, dtype=np.int64)
    return np.ravel_multi_index(tuple(np.array(coords, dtype=np.int64).T), per_block)


def write_layout(array: zarr.Array) -> WriteLayout:
    """Check that the engine can write ``array`` and describe how its chunks are stored."""
    store = array.store
    if not isinstance(store, LocalStore):
        raise UnsupportedLayoutError(f"store {type(store).__name__} is not a local directory")
    metadata = array.metadata
    if not for_zarr_format(metadata.zarr_format).codec_pipeline:
        raise UnsupportedLayoutError("the write engine writes zarr v3 arrays only")
    dtype = np.dtype(array.dtype)
    if dtype.kind not in _KINDS or dtype.shape or dtype.fields:
        raise UnsupportedLayoutError(f"dtype {dtype} is not a plain numeric type")
    encoding = type(metadata.chunk_key_encoding).__name__
    if encoding not in ("DefaultChunkKeyEncoding", "V2ChunkKeyEncoding"):
        raise UnsupportedLayoutError(f"chunk key encoding {encoding} is not default or v2")
    sharding, chain = parse_chain(metadata.codecs, index_crc32c=True)
    if chain.endian not in (None, "little"):
        raise UnsupportedLayoutError(f"chunks are stored {chain.endian} endian")
    fill = metadata.fill_value
    fill_value = np.zeros((), dtype)[()] if fill is None else np.asarray(fill, dtype)[()]
    chunk_shape = tuple(sharding.chunk_shape) if sharding else tuple(array.chunks)
    block_shape = tuple(array.shards) if sharding else chunk_shape
    per_block = tuple(b // c for b, c in zip(block_shape, chunk_shape))
    config = getattr(array._async_array, "config", None) or array._async_array._config
    return WriteLayout(
        root=os.path.join(str(store.root), array.path),
        shape=tuple(array.shape),
        dtype=dtype,
        stored_dtype=dtype.newbyteorder("<") if dtype.itemsize > 1 else dtype,
        fill_value=fill_value,
        chunk_shape=chunk_shape,
        block_shape=block_shape,
        sharded=sharding is not None,
        index_at_start=sharding is not None and shard_index_location(sharding) == "start",
        compressor=chain.compressor,
        level=chain.level,
        checksum=chain.checksum,
        crc32c=chain.crc32c,
        write_empty_chunks=bool(getattr(config, "write_empty_chunks", False)),
        encode_key=metadata.encode_chunk_key,
        inner_order=_inner_order(sharding, per_block) if sharding else np.zeros(1, dtype=np.int64),
    )


@dataclass(frozen=True)
class WritePlan:
    """The files a region write replaces."""

    layout: WriteLayout
    region: Region
    blocks: np.ndarray

    @property
    def n_blocks(self) -> int:
        """Number of files written (or removed, when all their chunks are empty)."""
        return len(self.blocks)

    def path(self, i: int) -> str:
        """The file of block ``i``."""
        key = self.layout.encode_key(tuple(int(c) for c in self.blocks[i]))
        return os.path.join(self.layout.root, key)

    def block_box(self, i: int) -> Region:
        """The part of the array block ``i`` covers (clipped at the array's end)."""
        shape, block = self.layout.shape, self.layout.block_shape
        return tuple(
            slice(c * b, min((c + 1) * b, n))
            for c, b, n in zip(self.blocks[i].tolist(), block, shape)
        )

    def data_box(self, box: Region) -> Region:
        """``box`` (array coordinates) relative to the region, to index the written data."""
        return tuple(slice(s.start - r.start, s.stop - r.start) for s, r in zip(box, self.region))


def plan_write(array: zarr.Array, region: slice | Sequence[slice] | None = None) -> WritePlan:
    """Plan the write of ``array[region]``: every file it replaces."""
    layout = write_layout(array)
    region = parse_region(region, layout.shape, layout.root)
    for axis, (sel, block, size) in enumerate(zip(region, layout.block_shape, layout.shape)):
        if sel.start % block or (sel.stop % block and sel.stop != size):
            raise UnsupportedLayoutError(
                f"region {sel.start}:{sel.stop} on axis {axis} is not aligned to the "
                f"{'shards' if layout.sharded else 'chunks'} ({block})"
            )
    axes = [
        np.arange(s.start // b, -(-s.stop // b), dtype=np.int64)
        for s, b in zip(region, layout.block_shape)
    ]
    if not axes:
        raise UnsupportedLayoutError("0-d arrays are left to zarr")
    mesh = np.meshgrid(*axes, indexing="ij")
    blocks = np.stack([m.reshape(-1) for m in mesh], axis=1)
    return WritePlan(layout, region, blocks)


def check_data(plan: WritePlan, data: Any) -> None:
    """Refuse data whose shape is not the region's (no broadcasting here: zarr does that) or
    whose dtype is not numeric."""
    expected = tuple(s.stop - s.start for s in plan.region)
    if tuple(data.shape) != expected:
        raise UnsupportedLayoutError(
            f"data of shape {tuple(data.shape)} for a region of shape {expected}"
        )
    if np.dtype(data.dtype).kind not in _KINDS:
        raise UnsupportedLayoutError(f"data of dtype {data.dtype} is left to zarr")


def gather_chunks(xp: Any, data: Any, chunk_shape: Sequence[int], fill_value: Any) -> Any:
    """Every chunk of ``data`` as one row of a contiguous ``(n_chunks, chunk_size)`` array.

    ``data`` is padded with ``fill_value`` up to whole chunks; rows follow the C order of the
    chunk grid of ``data``. One copy (two with padding) whatever the number of chunks: the GPU
    back end gathers a group of shards with it.
    """
    shape = tuple(data.shape)
    counts = tuple(-(-s // c) for s, c in zip(shape, chunk_shape))
    padded_shape = tuple(n * c for n, c in zip(counts, chunk_shape))
    if padded_shape != shape:
        padded = xp.full(padded_shape, fill_value, dtype=data.dtype)
        padded[tuple(slice(0, s) for s in shape)] = data
        data = padded
    split = [d for n, c in zip(counts, chunk_shape) for d in (n, c)]
    ndim = len(shape)
    order = [2 * i for i in range(ndim)] + [2 * i + 1 for i in range(ndim)]
    rows = xp.ascontiguousarray(data.reshape(split).transpose(order))
    return rows.reshape(math.prod(counts), math.prod(chunk_shape))


def group_boxes(plan: WritePlan, max_blocks: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Cut the plan's blocks into boxes of at most ``max_blocks`` (at least one) blocks each.

    Boxes span whole trailing axes where they can, so that a box's data is few slices of the
    region. Returns ``(start, stop)`` block grid coordinates per box, in C order.
    """
    lo = plan.blocks.min(axis=0)
    hi = plan.blocks.max(axis=0) + 1
    counts = (hi - lo).tolist()
    step = list(counts)
    for axis in range(len(counts)):
        inner = int(np.prod(counts[axis + 1 :], dtype=np.int64))
        if inner * counts[axis] <= max_blocks:
            break
        step[axis] = 1
        if inner <= max_blocks:
            step[axis] = max(1, max_blocks // inner)
            break
    boxes = []
    starts = [range(0, n, s) for n, s in zip(counts, step)]
    for origin in np.stack(np.meshgrid(*starts, indexing="ij"), axis=-1).reshape(-1, len(counts)):
        start = lo + origin
        boxes.append((start, np.minimum(start + np.array(step), hi)))
    return boxes


def group_rows(
    plan: WritePlan, start: np.ndarray, stop: np.ndarray
) -> tuple[Region, np.ndarray, np.ndarray, np.ndarray]:
    """What :func:`gather_chunks` of a box of blocks gives: which file and chunk each row is."""
    layout = plan.layout
    block, chunk = layout.block_shape, layout.chunk_shape
    per_block = np.array(layout.chunks_per_block, dtype=np.int64)
    box = tuple(
        slice(int(a) * b, min(int(z) * b, n))
        for a, z, b, n in zip(start, stop, block, layout.shape)
    )
    counts = tuple(-(-(s.stop - s.start) // c) for s, c in zip(box, chunk))
    coords = np.stack(np.unravel_index(np.arange(math.prod(counts)), counts), axis=1)
    coords = coords + start * per_block  # global chunk coordinates
    region_lo = plan.blocks.min(axis=0)
    grid = tuple((plan.blocks.max(axis=0) + 1 - region_lo).tolist())
    blocks, inner = np.divmod(coords, per_block)
    row_file = np.ravel_multi_index(tuple((blocks - region_lo).T), grid)
    row_inner = np.ravel_multi_index(tuple(inner.T), tuple(per_block.tolist()))
    mesh = np.meshgrid(*(np.arange(a, z) for a, z in zip(start, stop)), indexing="ij")
    box_blocks = np.stack([m.reshape(-1) for m in mesh], axis=1)
    files = np.ravel_multi_index(tuple((box_blocks - region_lo).T), grid)
    return box, files, row_file, row_inner
