"""What a GPU read settles before its back end opens: what nvCOMP cannot read, the file reader,
and the device memory of the read's buffers. Importing this module imports no GPU library.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from linumpy.errors import GPUUnavailableError, LinumpyError
from linumpy.gpu import nvcomp
from linumpy.gpu.availability import after_current_stream
from linumpy.gpu.device_memory import check_free
from linumpy.gpu.host_decode import HostDecoder
from linumpy.io.engine import plan as engine_plan
from linumpy.io.engine.cpu import check_thread_memory
from linumpy.io.engine.fetch_kvikio import kvikio_unusable_reason, use_kvikio_threads
from linumpy.io.engine.memory import format_size
from linumpy.io.engine.plan import ReadPlan
from linumpy.settings import Settings

if TYPE_CHECKING:
    import cupy

__all__: list[str] = []


def fast_path_obstacle(plan: ReadPlan) -> str | None:
    """Why the GPU back end cannot produce this plan's output, or None."""
    if plan.codec.NVCOMP is None:
        return f"nvCOMP does not decode {plan.codec.NAME} here"
    dtype = plan.dtype
    components = 2 if dtype.kind == "c" else 1
    if dtype.kind not in "biufc" or dtype.itemsize // components not in (1, 2, 4, 8):
        return f"dtype {dtype} has no cupy equivalent"
    if plan.chunk_nbytes > nvcomp.MAX_DECODE_BYTES:
        return f"chunks of {plan.chunk_nbytes} bytes exceed nvCOMP's limit of 2 GiB"
    return None


def choose_reader(fetch: str, threads: int) -> tuple[str, str]:
    """The file reader for the ``fetch`` setting, and why it was chosen."""
    if fetch == "pread":
        return "pread", "requested"
    reason = kvikio_unusable_reason()
    if reason is None:
        use_kvikio_threads(threads)
        return "kvikio", "kvikio reads files here"
    if fetch == "kvikio":
        raise GPUUnavailableError(f"LINUMPY_GPU_FETCH/fetch='kvikio' was asked for, but {reason}")
    return "pread", reason


def nvcomp_chunk_limit() -> int:
    """The largest decoded chunk nvCOMP is given; larger ones libzstd decodes."""
    return min(engine_plan.GPU_CHUNK_BYTES, nvcomp.MAX_DECODE_BYTES)


def device_memory_needed(plan: ReadPlan, settings: Settings) -> int:
    """Device memory a read may take beyond its output: slots' buffers and nvCOMP's work space."""
    chunks = max(1, plan.n_entries)
    decoded = min(settings.scratch_bytes, chunks * plan.chunk_nbytes)
    # nvCOMP's work space grows with the decoded bytes in flight: allow 1.6 times them, 64 MiB
    # at least.
    workspace = max(64 * 2**20, decoded * 8 // 5)
    return math.ceil(settings.scratch_bytes + workspace)


def fit_scratch(plan: ReadPlan, settings: Settings, out_nbytes: int, streams: int) -> Settings:
    """``settings`` with ``scratch_bytes`` halved until the read fits the device's free memory.

    It stays at least one chunk (compressed and decoded) per stream (``streams`` of them);
    :func:`check_free` then says when even that does not fit.
    """
    import cupy

    free = cupy.cuda.runtime.memGetInfo()[0] + cupy.get_default_memory_pool().free_bytes()
    least = streams * 3 * plan.chunk_nbytes
    scratch = settings.scratch_bytes
    while (
        scratch > least
        and out_nbytes + device_memory_needed(plan, replace(settings, scratch_bytes=scratch)) > free
    ):
        scratch = max(least, scratch // 2)
    return (
        settings if scratch == settings.scratch_bytes else replace(settings, scratch_bytes=scratch)
    )


def check_device_memory(
    plan: ReadPlan, settings: Settings, new_output: bool, dtype: np.dtype, streams: int
) -> Settings:
    """``settings`` with the read's buffers fitted in the device's free memory
    (:func:`fit_scratch`), once checked there with the output when it is new (``new_output``).
    """
    out_nbytes = plan.out_nbytes if new_output else 0
    settings = fit_scratch(plan, settings, out_nbytes, streams)
    extra = device_memory_needed(plan, settings)
    check_free(
        extra + out_nbytes,
        plan.source,
        plan.shape,
        dtype,
        f"output {format_size(plan.out_nbytes)}, buffers and nvCOMP work space "
        f"{format_size(extra)}",
    )
    return settings


def check_out(out: Any, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """Raise LinumpyError unless ``out`` is a C-contiguous cupy array of ``shape`` and ``dtype``
    on the current device."""
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


def open_host_decode(
    plan: ReadPlan, settings: Settings, out: cupy.ndarray | None, dtype: np.dtype
) -> HostDecoder:
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
    return HostDecoder(plan, threads=threads, out=result, ready=after_current_stream([]))
