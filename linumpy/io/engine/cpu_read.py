"""A CPU read of a plan made already, without the read orchestrator (:func:`read_plan`):
benchmarks and tests time and check the engine this way, into an output they reuse.
"""

from __future__ import annotations

import numpy as np

from linumpy.io.engine.backend import Stats
from linumpy.io.engine.cpu import CpuBackend, check_thread_memory
from linumpy.io.engine.memory import check_host_memory
from linumpy.io.engine.plan import ReadPlan
from linumpy.io.engine.read import output_nbytes

__all__: list[str] = []


def read_plan(
    plan: ReadPlan, *, out: np.ndarray | None = None, threads: int = 1, reader: str = "pread"
) -> tuple[np.ndarray, Stats]:
    """Execute a read plan on the CPU."""
    if out is None:
        nbytes, shape = output_nbytes(plan.shape, plan.dtype), plan.shape
        check_host_memory(nbytes, plan.source, f"an output of shape {shape}")
    check_thread_memory(plan, threads)
    backend = CpuBackend(plan, threads=threads, out=out, reader=reader)
    try:
        stats = backend.execute()
    finally:
        backend.close()
    return backend.out, stats
