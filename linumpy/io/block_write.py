"""One block into a zarr array: by the write engine when it can, else by zarr."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import zarr

from linumpy._numpy_or_cupy import array_module, to_numpy
from linumpy.errors import UnsupportedLayoutError
from linumpy.io.durable import flush_on_worker
from linumpy.io.engine.write import DeviceEncoder, write_array

__all__ = ["store_block"]

logger = logging.getLogger(__name__)


def _as_region(key: Any, shape: tuple[int, ...]) -> tuple[slice, ...] | None:
    """``key`` as one in-bounds slice per leading axis when it is only slices and an Ellipsis
    (step 1), else None."""
    ndim = len(shape)
    key = key if isinstance(key, tuple) else (key,)
    if sum(k is Ellipsis for k in key) > 1:
        return None
    if Ellipsis in key:
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (ndim - len(key) + 1) + key[at + 1 :]
    if len(key) > ndim or not all(isinstance(k, slice) for k in key):
        return None
    region = []
    for k, n in zip(key, shape):
        start, stop, step = k.indices(n)  # clipped to the array, as zarr does
        if step != 1 or start > stop:
            return None
        region.append(slice(start, stop))
    return tuple(region)


def device_encoder(data: Any) -> DeviceEncoder | None:
    """The write engine's encoder of ``data``: nvCOMP's for a cupy array (the GPU layer imported
    only then), None for host data (the CPU encodes it)."""
    if array_module(data) is np:
        return None
    from linumpy.gpu.encode import GPU_ENCODER

    return GPU_ENCODER


def store_block(
    array: zarr.Array, key: Any, block: Any, settings: Mapping[str, Any] | None = None
) -> None:
    """``array[key] = block``: by the write engine when the region is aligned to the array's
    files and the layout is one it writes (cupy blocks encoded on their GPU), else by zarr."""
    region = _as_region(key, array.shape)
    written = False
    if region is not None and hasattr(block, "shape") and hasattr(block, "dtype"):
        try:
            write_array(array, block, region, settings=settings, encoder=device_encoder(block))
            written = True
        except UnsupportedLayoutError as exc:
            logger.debug("%s: zarr writes %s: %s", array.store, key, exc)
    if not written:
        array[key] = to_numpy(block)
    root = getattr(array.store, "root", None)
    if root is not None:  # a dask worker's task: its files durable on its host before it is done
        flush_on_worker(root)
