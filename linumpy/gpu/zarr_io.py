"""Public GPU reads: a zarr volume straight into GPU memory, or zarr itself on the GPU.

- :func:`read_zarr_to_gpu` (``linumpy.io.read_volume(path, gpu=True)`` with ``out``) reads chunk
  files into pinned memory, checks their frames on the CPU, decodes groups of chunks with nvCOMP
  on several CUDA streams and scatters them into the output; layouts it does not plan fall back
  to :func:`gpu_zarr_context` (the reason is logged and reported).
- :func:`gpu_zarr_context` makes zarr itself return cupy arrays and decode zstd with nvCOMP, for
  arbitrary slicing and for writing cupy arrays.

Settings come from :mod:`linumpy.settings`. CPU-only use never imports nvCOMP or kvikio and never
creates a CUDA context.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import zarr

from linumpy import settings as _settings
from linumpy.errors import UnsupportedLayoutError
from linumpy.gpu.availability import gpu_unavailable_reason, require_gpu
from linumpy.gpu.gpu_read import choose_reader, fast_path_obstacle
from linumpy.gpu.zarr_context import describe_gpu, gpu_zarr_context
from linumpy.io.engine.plan import plan_read
from linumpy.io.engine.read import ReadReport
from linumpy.io.engine.read import last_read_report as _last_report
from linumpy.io.omezarr import open_array
from linumpy.io.reader import read_to
from linumpy.settings import Settings

if TYPE_CHECKING:
    import cupy

__all__ = [
    "GpuReadReport",
    "GpuReadRoute",
    "describe_gpu",
    "gpu_read_route",
    "gpu_unavailable_reason",
    "gpu_zarr_context",
    "last_read_report",
    "read_zarr_to_gpu",
]


# --- routing ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuReadRoute:
    """How :func:`read_zarr_to_gpu` will read an array.

    Attributes
    ----------
    path
        ``"fast"`` (batched reads, nvCOMP, scatter kernel), ``"zarr"`` (:func:`gpu_zarr_context`)
        or ``"unavailable"`` (no usable GPU: reading raises :class:`GPUUnavailableError`).
    reason
        Why: the fast path's obstacle, or what the GPU lacks.
    reader
        For the fast path, how files are read (``"kvikio"`` or ``"pread"``), else None.
    n_reads, n_missing
        Chunks the plan reads, and chunks known not to be stored.

    Examples
    --------
    For half the array of :func:`gpu_read_route`'s example, on a GPU where kvikio works:

    >>> route = gpu_read_route(array, region=(slice(0, 8),))  # doctest: +SKIP
    >>> route.path, route.reader, route.n_reads, route.n_missing  # doctest: +SKIP
    ('fast', 'kvikio', 2, 0)
    """

    path: Literal["fast", "zarr", "unavailable"]
    reason: str
    reader: str | None = None
    n_reads: int = 0
    n_missing: int = 0


def gpu_read_route(
    source: str | os.PathLike[str] | zarr.Array,
    *,
    region: slice | Sequence[slice] | None = None,
    settings: Settings | Mapping[str, Any] | None = None,
) -> GpuReadRoute:
    """Say which path :func:`read_zarr_to_gpu` takes for ``source[region]``, without reading it.

    Parameters
    ----------
    source
        A path (OME-Zarr image or zarr array) or a ``zarr.Array``.
    region
        The part to read, as for :func:`read_zarr_to_gpu`.
    settings
        As for :func:`read_zarr_to_gpu`.

    Returns
    -------
    GpuReadRoute
        The path, the reason and the plan's chunk counts.

    Examples
    --------
    >>> import tempfile, zarr
    >>> array = zarr.create_array(tempfile.mkdtemp() + "/a.zarr", shape=(16, 16), chunks=(8, 8),
    ...                           dtype="uint8")
    >>> array[...] = 1
    >>> gpu_read_route(array).n_reads, gpu_read_route(array, region=(slice(0, 8),)).n_reads
    (4, 2)
    >>> gpu_read_route(array, settings={"fetch": "pread"})  # doctest: +SKIP
    GpuReadRoute(path='fast', reason='requested', reader='pread', n_reads=4, n_missing=0)

    On a machine without cupy:

    >>> gpu_read_route(array).reason  # doctest: +SKIP
    "cupy is not installed (No module named 'cupy'); with a GPU: the fast path"
    """
    array = source if isinstance(source, zarr.Array) else open_array(source)
    plan = None
    try:
        plan = plan_read(array, region)
        obstacle = fast_path_obstacle(plan)
    except UnsupportedLayoutError as exc:
        obstacle = str(exc)
    counts = (int(plan.stored.sum()), int((~plan.stored).sum())) if plan is not None else (0, 0)
    reason = gpu_unavailable_reason()
    if reason is not None:
        would = "the fast path" if obstacle is None else f"zarr's GPU path ({obstacle})"
        return GpuReadRoute("unavailable", f"{reason}; with a GPU: {would}", None, *counts)
    if obstacle is not None:
        return GpuReadRoute("zarr", obstacle, None, *counts)
    resolved = _settings.resolve(settings)
    reader, why = choose_reader(resolved.fetch, resolved.io_threads)
    return GpuReadRoute("fast", why, reader, *counts)


# --- reads --------------------------------------------------------------------------------

#: The report of a GPU read: :class:`linumpy.io.engine.read.ReadReport` (``backend="gpu"``), the
#: one report type of CPU and GPU reads.
GpuReadReport = ReadReport


def last_read_report() -> ReadReport | None:
    """The report of this thread's last :func:`read_zarr_to_gpu` call, or None.

    Its attributes are those of :class:`~linumpy.io.engine.read.ReadReport`.

    Examples
    --------
    After reading half the volume of :func:`read_zarr_to_gpu`'s example:

    >>> volume = read_zarr_to_gpu(path, region=(slice(0, 8),))  # doctest: +SKIP
    >>> report = last_read_report()  # doctest: +SKIP
    >>> report.path, report.n_reads, report.n_fill, report.output_bytes  # doctest: +SKIP
    ('fast', 4, 0, 4096)
    """
    return _last_report("gpu")


def read_zarr_to_gpu(
    source: str | os.PathLike[str] | zarr.Array,
    *,
    region: slice | Sequence[slice] | None = None,
    out: cupy.ndarray | None = None,
    settings: Settings | Mapping[str, Any] | None = None,
) -> cupy.ndarray:
    """Read a zarr array, or a region of it, into GPU memory.

    Parameters
    ----------
    source
        A path (OME-Zarr image, level 0, or zarr array) or an open ``zarr.Array``.
    region
        A tuple of slices (step 1); the whole array by default.
    out
        A C-contiguous cupy array of the region's shape and dtype to fill instead of allocating.
    settings
        A :class:`linumpy.settings.Settings` or a dict of its fields for this call;
        :func:`linumpy.settings.get` by default.

    Returns
    -------
    cupy.ndarray
        The data, equal to zarr's CPU read of the same region (in native byte order: cupy has no
        big-endian arrays).

    Raises
    ------
    GPUUnavailableError
        When cupy, nvCOMP or a CUDA device is missing (the message says which).
    DeviceMemoryError
        When the output and the read's buffers exceed the device's free memory; raised before
        anything is allocated.
    ChunkDecodeError
        When a chunk is corrupt or truncated (it names the chunk); nothing invalid reaches
        nvCOMP, so the next read in the process works.
    LinumpyError
        For a path that is not zarr, a region out of bounds, or an unsuitable ``out``.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import save_omezarr
    >>> path = tempfile.mkdtemp() + "/volume.ome.zarr"
    >>> data = np.arange(4096, dtype=np.uint16).reshape(16, 16, 16)
    >>> save_omezarr(data, path, voxel_size=(1, 1, 1), chunks=(8, 8, 8))
    >>> volume = read_zarr_to_gpu(path, region=(slice(0, 4),))  # doctest: +SKIP
    >>> volume.shape, volume.dtype  # doctest: +SKIP
    ((4, 16, 16), dtype('uint16'))
    >>> np.array_equal(volume.get(), data[:4])  # doctest: +SKIP
    True

    Into an existing array:

    >>> import cupy  # doctest: +SKIP
    >>> out = cupy.empty((16, 16, 16), dtype=np.uint16)  # doctest: +SKIP
    >>> read_zarr_to_gpu(path, out=out) is out  # doctest: +SKIP
    True
    """
    require_gpu("read_zarr_to_gpu()")
    return read_to("gpu", source, region=region, out=out, settings=settings)
