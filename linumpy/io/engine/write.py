"""The write engine: ``plan -> encode -> assemble -> write files``, without zarr's codec pipeline.

Numpy data is encoded on the CPU (:mod:`~linumpy.io.engine.write_cpu`), device data by the
:class:`DeviceEncoder` its caller hands in (the engine imports nothing of the GPU layer). Files
mean what zarr's would: chunks equal to the fill value are left out, edge chunks padded, inner
chunks in zarr's order. Layouts the plan does not know raise :class:`UnsupportedLayoutError`,
and callers let zarr write.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np
import zarr

from linumpy import settings as settings_module
from linumpy._numpy_or_cupy import array_module, to_numpy
from linumpy.io.engine.write_cpu import write_cpu
from linumpy.io.engine.write_files import WriteReport, make_directories
from linumpy.io.engine.write_plan import WritePlan, check_data, plan_write

__all__: list[str] = []


class DeviceEncoder(Protocol):
    """What :func:`write_array` asks of the encoder of device data."""

    def unusable_reason(self, plan: WritePlan) -> str | None:
        """Why it cannot encode this plan's chunks (then the CPU does), or None."""
        ...

    def write(self, plan: WritePlan, data: Any, config: settings_module.Settings) -> WriteReport:
        """Encode and write ``data`` (the plan's region, on the device)."""
        ...


#: The smallest device array the GPU encodes, per I/O thread: below about 2 MiB per host thread
#: the host encodes a block faster than nvCOMP (``benchmarks/gpu_small_writes.py``).
GPU_ENCODE_MIN_BYTES_PER_THREAD = 2 * settings_module.MIB
#: ...and at least this much: on fewer threads the host is slower, but nvCOMP's fixed cost per
#: call still exceeds what the host takes for a block of a few MiB.
GPU_ENCODE_MIN_BYTES_FLOOR = 16 * settings_module.MIB


# The smallest device array the GPU encodes when not 0 (see encode_min_bytes).
_ENCODE_MIN_BYTES = 0


@contextmanager
def encode_min_bytes(nbytes: int) -> Iterator[None]:
    """Within: device arrays of ``nbytes`` or more are encoded by nvCOMP, smaller ones on the
    host (1: every array on the GPU, as the kernel preparation and tests do); process-wide.
    """
    global _ENCODE_MIN_BYTES
    before, _ENCODE_MIN_BYTES = _ENCODE_MIN_BYTES, nbytes
    try:
        yield
    finally:
        _ENCODE_MIN_BYTES = before


def gpu_encode_min_bytes(config: settings_module.Settings) -> int:
    """The smallest device array the GPU encodes: :data:`GPU_ENCODE_MIN_BYTES_PER_THREAD` per
    ``io_threads`` (the host's libzstd threads), at least :data:`GPU_ENCODE_MIN_BYTES_FLOOR`
    (unless :func:`encode_min_bytes` says otherwise).
    """
    default = max(GPU_ENCODE_MIN_BYTES_FLOOR, GPU_ENCODE_MIN_BYTES_PER_THREAD * config.io_threads)
    return _ENCODE_MIN_BYTES or default


def write_array(
    array: zarr.Array,
    data: Any,
    region: slice | Sequence[slice] | None = None,
    *,
    settings: settings_module.Settings | Mapping[str, Any] | None = None,
    encoder: DeviceEncoder | None = None,
) -> WriteReport:
    """Write ``data`` into ``array[region]`` without zarr's codec pipeline.

    Device data is encoded on its device by ``encoder`` (nvCOMP for cupy data, as
    :func:`linumpy.io.block_write.device_encoder` finds it) when large enough; anything else by
    the array's compressor in ``settings.io_threads`` threads. Files are written into the
    array's directory, each whole, in as many threads.
    """
    started = time.perf_counter()
    plan = plan_write(array, region)
    check_data(plan, data)
    config = settings_module.resolve(settings)
    make_directories(plan)
    if array_module(data) is not np:
        small = int(data.nbytes) < gpu_encode_min_bytes(config)
        if encoder is not None and not small and encoder.unusable_reason(plan) is None:
            report = encoder.write(plan, data, config)
            report.seconds = time.perf_counter() - started
            return report
        data = to_numpy(data)
    report = write_cpu(plan, np.asarray(data), config)
    report.seconds = time.perf_counter() - started
    return report
