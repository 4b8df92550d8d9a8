"""A zarr volume as a lazy dask array whose blocks are read by :func:`~linumpy.io.read_volume`:
:func:`~linumpy.io.open_volume` without its ``xarray`` option. The volume is opened once, here;
the tasks read it through an :class:`~linumpy.io.array_ref.ArrayRef`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from linumpy.errors import LinumpyError
from linumpy.io.array_ref import ArrayRef, array_ref
from linumpy.io.blocks import (
    DEFAULT_BLOCK_BYTES,
    DEFAULT_GPU_BLOCK_BYTES,
    aligned_chunks,
    grow_block,
    region_bounds,
    round_block,
    storage_unit,
)
from linumpy.io.stores import describe
from linumpy.parallel import parse_size

if TYPE_CHECKING:
    import dask.array as da

__all__ = ["dask_volume"]


def _read_block(
    source: ArrayRef,
    gpu: bool,
    origin: tuple[int, ...],
    settings: Any,
    block_info: dict[Any, Any] | None = None,
) -> Any:
    location = block_info[None]["array-location"]
    region = tuple(slice(o + a, o + b) for o, (a, b) in zip(origin, location))
    return source.read(region, gpu=gpu, settings=settings)


def dask_volume(
    path: Any,
    *,
    level: int = 0,
    gpu: bool = False,
    region: slice | Sequence[slice] | None = None,
    chunks: Sequence[int | None] | int | str | None = None,
    settings: Any = None,
    storage_options: dict[str, Any] | None = None,
) -> da.Array:
    """Open a zarr volume as a lazy dask array: :func:`~linumpy.io.open_volume` without
    ``xarray``; the parameters, the result and the errors are that function's."""
    import dask.array as da
    from dask.base import tokenize

    ref = array_ref(path, level, storage_options=storage_options)  # the blocks read it
    array = ref.array
    source = f"{describe(path)} (level {level})"
    dtype = np.dtype(array.dtype)
    if dtype.kind not in "biufc":
        raise LinumpyError(f"{source}: dtype {dtype} is not supported; open numeric arrays")
    bounds = region_bounds(region, array.shape, source)
    shape = tuple(s.stop - s.start for s in bounds)
    unit = storage_unit(array)
    if chunks is None or isinstance(chunks, str):
        default = DEFAULT_GPU_BLOCK_BYTES if gpu else DEFAULT_BLOCK_BYTES
        target = default if chunks is None else parse_size(chunks)
        block = grow_block(unit, array.shape, dtype.itemsize, target)
    else:
        requested = (chunks,) * array.ndim if isinstance(chunks, int) else tuple(chunks)
        block = round_block(requested, unit, array.shape)
    if gpu:
        try:
            import cupy
        except ImportError as exc:
            from linumpy.errors import GPUUnavailableError

            raise GPUUnavailableError(f"open_volume(gpu=True) needs cupy: {exc}") from None
        meta = cupy.empty((0,) * array.ndim, dtype=dtype)
    else:
        meta = np.empty((0,) * array.ndim, dtype=dtype)
    origin = tuple(s.start for s in bounds)
    name = "open-volume-" + tokenize(ref, gpu, origin, shape, block, dtype.str, settings)
    return da.map_blocks(
        _read_block,
        ref,
        gpu,
        origin,
        settings,
        name=name,
        chunks=aligned_chunks(bounds, block),
        dtype=dtype,
        meta=meta,
    )
