""":func:`read_volume`: a zarr volume, or a region of it, into host or GPU memory.

:func:`read_to` opens the array, names it for errors, picks the destination's back end (the
GPU's imported only when asked for) and hands both to :func:`linumpy.io.engine.read.read`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import zarr

from linumpy import settings as _settings
from linumpy.errors import GPU_INSTALL_HINT, GPUUnavailableError, LinumpyError
from linumpy.io.engine.backend import ReadBackend
from linumpy.io.engine.cpu import CpuBackend
from linumpy.io.engine.read import read
from linumpy.io.omezarr import open_array
from linumpy.io.stores import SourceLike, describe

__all__ = ["read_volume"]


def read_volume(
    path: SourceLike,
    *,
    level: int = 0,
    gpu: bool = False,
    region: slice | Sequence[slice] | None = None,
    settings: _settings.Settings | Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Any:
    """Read a zarr volume, or a region of it, into memory.

    Parameters
    ----------
    path
        An OME-Zarr image (NGFF 0.4 or 0.5) or a plain zarr array (v2 or v3): a local path, a
        ``file://``, ``http(s)://``, ``s3://`` or ``gs://`` URL (the ``remote`` extra), a
        ``zarr.Array``, a ``zarr.Group`` or a zarr store.
    level
        The multiscale level of an OME-Zarr image (0 is full resolution).
    gpu
        Return a ``cupy.ndarray`` decoded on the GPU by nvCOMP (GPU extra).
    region
        A tuple of slices (step 1) selecting the part to read; the whole array by default.
    settings
        A :class:`linumpy.settings.Settings`, or a dict of its fields overriding the current
        ones (:func:`linumpy.settings.get`), for this call.
    storage_options
        Options of a remote store: ``anonymous``, ``endpoint_url``, credentials, ``headers``
        (see :func:`linumpy.io.remote.object_store`).

    Returns
    -------
    numpy.ndarray or cupy.ndarray
        The data, byte-identical to ``zarr.open_array(...)[region]``.

    Raises
    ------
    LinumpyError
        For a missing path, a path that is not zarr, a level out of range, a region out of
        bounds, or a non-numeric dtype; the message names them.
    ChunkDecodeError
        When a stored chunk is corrupt or truncated; it names the chunk.
    RemoteError
        When a remote store cannot be reached, refuses access, stalls past ``remote_timeout``
        or cuts an answer short (after ``remote_retries``); it names the URL.
    GPUUnavailableError
        When ``gpu=True`` and cupy, nvCOMP or a CUDA device is missing.
    DeviceMemoryError
        When ``gpu=True`` and the region does not fit in the device's free memory.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import save_omezarr
    >>> path = tempfile.mkdtemp() + "/volume.ome.zarr"
    >>> save_omezarr(np.arange(4096, dtype=np.uint16).reshape(16, 16, 16), path,
    ...              voxel_size=(1, 1, 1), chunks=(8, 8, 8))
    >>> read_volume(path, region=(slice(0, 1), slice(0, 2), slice(0, 4)))
    array([[[ 0,  1,  2,  3],
            [16, 17, 18, 19]]], dtype=uint16)
    >>> read_volume(path, region=(slice(0, 1),), settings={"io_threads": 1}).shape
    (1, 16, 16)
    """
    return read_to(
        "gpu" if gpu else "cpu",
        path,
        level=level,
        region=region,
        settings=settings,
        storage_options=storage_options,
    )


Destination = Literal["cpu", "gpu"]


def read_to(
    destination: Destination,
    path: SourceLike,
    *,
    level: int = 0,
    region: slice | Sequence[slice] | None = None,
    out: Any = None,
    settings: _settings.Settings | Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Any:
    """:func:`read_volume` to a destination, into ``out`` when given (see :func:`read_volume`)."""
    resolved = _settings.resolve(settings)
    array = open_array(path, level, storage_options=storage_options)
    source = f"{describe(path)} (level {level})"
    return read_opened(destination, array, source, region=region, out=out, settings=resolved)


def read_opened(
    destination: Destination,
    array: zarr.Array,
    source: str,
    *,
    region: slice | Sequence[slice] | None = None,
    out: Any = None,
    settings: _settings.Settings | Mapping[str, Any] | None = None,
) -> Any:
    """:func:`read_to` of an array opened already (by :func:`~linumpy.io.open_array`), named
    ``source`` in errors: nothing is opened."""
    resolved = _settings.resolve(settings)
    if np.dtype(array.dtype).kind not in "biufc":
        raise LinumpyError(
            f"{source}: dtype {array.dtype} is not supported; read_volume reads numeric arrays "
            "(bool, integers, floats, complex)"
        )
    backend: type[ReadBackend] = CpuBackend
    if destination == "gpu":  # the GPU's back end imported only when asked for
        try:
            from linumpy.gpu.availability import require_gpu
            from linumpy.gpu.backend import GpuBackend
        except ImportError as exc:
            raise GPUUnavailableError(
                f"read_volume(gpu=True) needs linumpy's GPU support ({exc}): {GPU_INSTALL_HINT}"
            ) from None
        require_gpu("read_volume(gpu=True)")
        backend = GpuBackend
    return read(array, region, backend=backend, settings=resolved, source=source, out=out)
