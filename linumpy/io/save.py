""":func:`save_omezarr`: a numpy, cupy or dask array written as an OME-Zarr image in one call
(dask arrays out of core, through :mod:`linumpy.io.dask_write`, imported only for them).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from linumpy._numpy_or_cupy import array_module
from linumpy.io.formats import NgffVersion
from linumpy.io.layout import ShardsArg
from linumpy.io.remote import is_url
from linumpy.io.writer import AxesArg, OmeZarrWriter

__all__ = ["save_omezarr"]


def save_omezarr(
    data: Any,
    path: str | os.PathLike[str],
    *,
    voxel_size: Sequence[float],
    chunks: Sequence[int] | None = None,
    shards: ShardsArg = "auto",
    n_levels: int = 1,
    zstd_level: int | None = None,
    overwrite: bool = False,
    ngff_version: NgffVersion = "0.5",
    unit: str = "micrometer",
    axes: AxesArg = None,
    checksum: bool | None = None,
    storage_options: Mapping[str, Any] | None = None,
    translation: Sequence[float] | None = None,
) -> None:
    """Write an array as a zstd-compressed OME-Zarr multiscale image.

    The image is written in a staging directory beside ``path`` and moved into place once
    complete: an interrupted write leaves nothing under ``path``, or, when replacing an image
    (``overwrite``), the old image intact; data read from the image being replaced (a dask array
    of it) is read before the swap.

    Parameters
    ----------
    data
        A numpy, dask or cupy array with 2 to 5 axes.
    path
        The image's top-level directory, or an ``s3://`` or ``gs://`` URL (written in place:
        object stores cannot swap an image in; HTTP servers are read-only).
    voxel_size
        Size of a voxel along each axis, in its unit.
    chunks, shards, n_levels, zstd_level, overwrite, ngff_version, unit, axes, checksum, translation
        As for :class:`OmeZarrWriter`.
    storage_options
        Options of a remote store (see :func:`linumpy.io.remote.object_store`).

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> path = tempfile.mkdtemp() + "/volume.ome.zarr"
    >>> save_omezarr(np.zeros((64, 64, 64), np.uint16), path, voxel_size=(3.5, 1.5, 1.5),
    ...              chunks=(32, 32, 32), n_levels=3)
    >>> from linumpy.io import read_omezarr
    >>> read_omezarr(path, level=2)[1]
    (14.0, 6.0, 6.0)
    """
    dask_array = sys.modules.get("dask.array")  # a dask array implies dask is imported
    is_dask = dask_array is not None and isinstance(data, dask_array.Array)
    if is_dask and is_url(path):  # dask's store graph writes files of a local folder
        data = data.compute()
        is_dask = False
    if not is_dask and array_module(data) is np:
        data = np.asarray(data)  # cupy data stays on its GPU: the write engine encodes it there
    writer = OmeZarrWriter(
        path,
        data.shape,
        data.dtype,
        voxel_size=voxel_size,
        chunks=chunks,
        shards=shards,
        n_levels=n_levels,
        zstd_level=zstd_level,
        overwrite=overwrite,
        ngff_version=ngff_version,
        unit=unit,
        axes=axes,
        checksum=checksum,
        always_stage=True,
        storage_options=storage_options,
        translation=translation,
    )
    if is_dask:
        # Out of core: whole shards (or chunks) per task, then each level from the one stored
        # above it, block by block; committed only once every level is written.
        # The level-0 write runs on dask's configured scheduler (a distributed client if one
        # is active); the pyramid is built from the stored level on local threads.
        from linumpy.io.dask_write import committed, space_axes, store_graph, write_pyramid

        on_gpu = type(getattr(data, "_meta", None)).__module__.startswith("cupy")
        with committed(writer):
            store_graph(data, writer.array).sum().compute()
            write_pyramid(writer.arrays, axes=space_axes(writer), gpu=on_gpu)
        return
    with writer:
        writer[...] = data
