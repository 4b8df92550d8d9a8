"""The CPU destination of a read: :class:`CpuRead`, the back end the read orchestrator runs.

:func:`linumpy.io.read_volume` hands it to :func:`linumpy.io.engine.read.read`, which asks it for
host memory checks, its fallback (zarr's own read), its file reader and its run-loop back end
(:class:`~linumpy.io.engine.cpu.CpuBackend`). The GPU's is :class:`linumpy.gpu.gpu_read.GpuRead`.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from linumpy.io.engine.cpu import CpuBackend, check_thread_memory
from linumpy.io.engine.memory import check_host_memory
from linumpy.io.engine.plan import ReadPlan
from linumpy.io.engine.read import output_nbytes

__all__: list[str] = []


class CpuRead:
    """The CPU back end as the read orchestrator asks it: host memory checks, zarr's own read
    as the fallback, a :class:`CpuBackend` (see :class:`~linumpy.io.engine.read.ReadBackend`).

    Examples
    --------
    See :func:`linumpy.io.engine.read.read`:

    >>> CpuRead().name
    'cpu'
    """

    name: Literal["cpu"] = "cpu"

    def check_output(self, shape: tuple[int, ...], dtype: np.dtype, source: str) -> None:
        """Refuse an output larger than the host's available memory."""
        check_host_memory(output_nbytes(shape, dtype), source, f"an output of shape {shape}")

    def obstacle(self, plan: ReadPlan) -> str | None:
        """None: the CPU back end reads every planned layout."""
        return None

    def through_zarr(self, array: Any, region: tuple[slice, ...], out: Any) -> Any:
        """zarr's own read of the region."""
        if out is None:
            return array[region]
        out[...] = array[region]
        return out

    def choose_reader(self, plan: ReadPlan, settings: Any) -> tuple[str, str]:
        """``pread``: threads read their own chunks (remote ones from the read ahead)."""
        local = plan.remote is None
        return "pread", "threads read their own chunks" + ("" if local else ", fetched ahead")

    def open(self, plan: ReadPlan, settings: Any, reader: str, out: Any) -> CpuBackend:
        """Check the threads' buffers against host memory; allocate the output."""
        check_thread_memory(plan, settings.io_threads)
        return CpuBackend(plan, threads=settings.io_threads, out=out)
