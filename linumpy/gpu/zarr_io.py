"""Public GPU reads: a zarr volume straight into GPU memory, or zarr itself on the GPU.

- :func:`read_zarr_to_gpu` (what ``linumpy.io.read_volume(path, gpu=True)`` calls) runs the read
  engine (:mod:`linumpy.io.engine`) with the GPU back end (:mod:`linumpy.gpu.backend`): chunk
  files are read into pinned host memory and their zstd frames checked on the CPU, groups of
  chunks are decoded by nvCOMP on several CUDA streams at once and scattered into the output by
  one kernel per group. Layouts the engine does not plan fall back to :func:`gpu_zarr_context`
  (the reason is logged and reported).
- :func:`gpu_zarr_context` makes zarr itself return cupy arrays and decode zstd with nvCOMP, for
  arbitrary slicing and for writing cupy arrays (GPU encode).

Settings come from :mod:`linumpy.settings` (``settings=`` per call, ``linumpy.settings.set``, or
the ``LINUMPY_*`` environment variables). CPU-only use never imports nvCOMP or kvikio and never
creates a CUDA context.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import zarr

from linumpy import settings as _settings
from linumpy.errors import LinumpyError, UnsupportedLayoutError
from linumpy.gpu import backend as gpu_backend
from linumpy.gpu.availability import (
    after_current_stream,
    gpu_unavailable_reason,
    require_gpu,
    worker_streams,
)
from linumpy.gpu.backend import (
    GpuBackend,
    choose_reader,
    device_memory_needed,
    fast_path_obstacle,
)
from linumpy.gpu.device_memory import check_free
from linumpy.gpu.host_decode import HostDecodeBackend, decodes_on_host
from linumpy.gpu.zarr_context import describe_gpu, gpu_zarr_context
from linumpy.io.engine import plan as engine_plan
from linumpy.io.engine.cpu import check_thread_memory
from linumpy.io.engine.memory import format_size
from linumpy.io.engine.plan import ReadPlan, plan_read
from linumpy.io.engine.read import ReadReport, output_nbytes, read
from linumpy.io.engine.read import last_read_report as _last_report
from linumpy.io.engine.region import Region
from linumpy.io.omezarr import open_array
from linumpy.settings import Settings

if TYPE_CHECKING:
    import cupy

__all__ = [
    "GpuRead",
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


def _open(source: str | os.PathLike[str] | zarr.Array) -> zarr.Array:
    return source if isinstance(source, zarr.Array) else open_array(source)


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
    array = _open(source)
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
    settings = _settings.resolve(settings)
    array = _open(source)
    return read(
        array, region, backend=GpuRead(), settings=settings, source=str(array.store_path), out=out
    )


class GpuRead:
    """The GPU back end as the read orchestrator asks it: device memory checks, zarr on the GPU
    (:func:`gpu_zarr_context`) as the fallback, a :class:`~linumpy.gpu.backend.GpuBackend` on
    :data:`~linumpy.gpu.backend.STREAMS` CUDA streams (see
    :class:`~linumpy.io.engine.read.ReadBackend`).

    Examples
    --------
    What :func:`read_zarr_to_gpu` does, for an open ``array``:

    >>> from linumpy.io.engine.read import read  # doctest: +SKIP
    >>> read(array, None, backend=GpuRead(), settings=Settings(), source="a")  # doctest: +SKIP
    array([0, 0, 0, 0], dtype=int8)
    """

    name: Literal["gpu"] = "gpu"

    def check_output(self, shape: tuple[int, ...], dtype: np.dtype, source: str) -> None:
        """Refuse an output larger than the device's free memory."""
        check_free(output_nbytes(shape, dtype), source, shape, dtype, "the output")

    def obstacle(self, plan: ReadPlan) -> str | None:
        """What the GPU back end cannot produce (see :func:`fast_path_obstacle`)."""
        return fast_path_obstacle(plan)

    def through_zarr(self, array: zarr.Array, region: Region, out: cupy.ndarray | None) -> Any:
        """Read with zarr inside :func:`gpu_zarr_context` (reopened there: codecs are fixed at
        open)."""
        with gpu_zarr_context():
            reopened = zarr.open_array(store=array.store, path=array.path, mode="r")
            result = reopened[region]
        if out is not None:
            out[...] = result
            return out
        return result

    def choose_reader(self, plan: ReadPlan, settings: Settings) -> tuple[str, str]:
        """kvikio or pread, by the ``fetch`` setting (see :func:`choose_reader`); the CPU back
        end's own reads for chunks that libzstd decodes (see :mod:`linumpy.gpu.host_decode`)."""
        limit = _max_decode_bytes(settings)
        if decodes_on_host(plan, limit):
            return "pread", (
                f"chunks of {format_size(plan.chunk_nbytes)}, above the {format_size(limit)} "
                "nvCOMP is given: libzstd threads decode them, each chunk "
                "copied up as it is decoded"
            )
        return choose_reader(settings.fetch, settings.io_threads)

    def open(
        self, plan: ReadPlan, settings: Settings, reader: str, out: cupy.ndarray | None
    ) -> GpuBackend | HostDecodeBackend:
        """Fit the read's buffers in the device's free memory (``scratch_bytes`` halved when
        needed), check it, allocate the output on the first stream."""
        import cupy

        dtype = plan.dtype.newbyteorder("=")
        if out is not None:
            _check_out(out, plan.shape, dtype)
        if decodes_on_host(plan, _max_decode_bytes(settings)):
            return _open_host_decode(plan, settings, out, dtype)
        settings = _fit_scratch(plan, settings, plan.out_nbytes if out is None else 0)
        extra = device_memory_needed(plan, settings)
        check_free(
            extra + (plan.out_nbytes if out is None else 0),
            plan.source,
            plan.shape,
            dtype,
            f"output {format_size(plan.out_nbytes)}, buffers and nvCOMP work space "
            f"{format_size(extra)}",
        )
        streams = worker_streams(gpu_backend.STREAMS)
        pool_before = cupy.get_default_memory_pool().used_bytes()
        with streams[0]:
            result = cupy.empty(plan.shape, dtype=dtype) if out is None else out
        after_current_stream(streams)
        return GpuBackend(
            plan, settings, result, streams, pool_before=pool_before, new_output=out is None
        )


def _max_decode_bytes(settings: Settings) -> int:
    from linumpy.gpu import nvcomp

    return min(engine_plan.GPU_CHUNK_BYTES, nvcomp.MAX_DECODE_BYTES)


def _open_host_decode(
    plan: ReadPlan, settings: Settings, out: cupy.ndarray | None, dtype: np.dtype
) -> HostDecodeBackend:
    """Check host and device memory for libzstd's threads, allocate the output."""
    import cupy

    threads = min(settings.io_threads, max(1, plan.n_entries))
    check_thread_memory(plan, threads)
    extra = threads * plan.chunk_nbytes
    check_free(
        extra + (plan.out_nbytes if out is None else 0),
        plan.source,
        plan.shape,
        dtype,
        f"output {format_size(plan.out_nbytes)} and a decoded chunk per thread "
        f"{format_size(extra)}",
    )
    result = cupy.empty(plan.shape, dtype=dtype) if out is None else out
    return HostDecodeBackend(plan, threads=threads, out=result, ready=after_current_stream([]))


def _check_out(out: Any, shape: tuple[int, ...], dtype: np.dtype) -> None:
    import cupy

    if (
        not isinstance(out, cupy.ndarray)
        or out.shape != shape
        or out.dtype != dtype
        or not out.flags.c_contiguous
        or out.device.id != cupy.cuda.runtime.getDevice()
    ):
        raise LinumpyError(
            f"out must be a C-contiguous cupy {dtype} array of shape {shape} on the current "
            f"device, got {type(out).__name__} {getattr(out, 'dtype', '')} "
            f"{getattr(out, 'shape', '')}"
        )


def _fit_scratch(plan: Any, settings: Settings, out_nbytes: int) -> Settings:
    """``settings`` with ``scratch_bytes`` halved until the read fits the device's free memory.

    It stays at least one chunk (compressed and decoded) per stream; :func:`check_free` then
    says when even that does not fit.
    """
    import cupy

    free = cupy.cuda.runtime.memGetInfo()[0] + cupy.get_default_memory_pool().free_bytes()
    least = gpu_backend.STREAMS * 3 * plan.chunk_nbytes
    scratch = settings.scratch_bytes
    while (
        scratch > least
        and out_nbytes + device_memory_needed(plan, replace(settings, scratch_bytes=scratch)) > free
    ):
        scratch = max(least, scratch // 2)
    return (
        settings if scratch == settings.scratch_bytes else replace(settings, scratch_bytes=scratch)
    )
