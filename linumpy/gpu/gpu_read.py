"""The GPU destination of a read: :class:`GpuRead`, the back end the read orchestrator runs.

:func:`linumpy.io.read_volume` looks it up when ``gpu=True`` (and
:func:`linumpy.gpu.zarr_io.read_zarr_to_gpu`, its alias, through it) and hands it to
:func:`linumpy.io.engine.read.read`, which asks it for memory checks, its fallback through zarr on
the GPU, its file reader and its run-loop back end (:class:`~linumpy.gpu.backend.GpuBackend`, or
:class:`~linumpy.gpu.host_decode.HostDecodeBackend` for chunks too large for nvCOMP). Importing
this module imports no GPU library.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import zarr

from linumpy.errors import LinumpyError
from linumpy.gpu import backend as gpu_backend
from linumpy.gpu.availability import after_current_stream, worker_streams
from linumpy.gpu.backend import (
    GpuBackend,
    choose_reader,
    device_memory_needed,
    fast_path_obstacle,
)
from linumpy.gpu.device_memory import check_free
from linumpy.gpu.host_decode import HostDecodeBackend, decodes_on_host
from linumpy.gpu.zarr_context import gpu_zarr_context
from linumpy.io.engine import plan as engine_plan
from linumpy.io.engine.cpu import check_thread_memory
from linumpy.io.engine.memory import format_size
from linumpy.io.engine.plan import ReadPlan
from linumpy.io.engine.read import output_nbytes
from linumpy.io.engine.region import Region
from linumpy.settings import Settings

if TYPE_CHECKING:
    import cupy

__all__: list[str] = []


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
