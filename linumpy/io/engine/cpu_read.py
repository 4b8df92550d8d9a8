"""A CPU read of a plan without the read orchestrator: :func:`read_plan`.

The orchestrator (:func:`linumpy.io.engine.read.read`) plans a region, asks the back end and
reports; :func:`read_plan` executes a plan made already through
:class:`~linumpy.io.engine.cpu.CpuBackend` (benchmarks and tests time and check the engine this
way, into an output they reuse).
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
    """Execute a read plan on the CPU.

    Parameters
    ----------
    plan
        From :func:`linumpy.io.engine.plan.plan_read`.
    out
        A C-contiguous array of the plan's shape and dtype to fill; allocated when None.
    threads
        Threads reading and decoding.
    reader
        How files are read (``"pread"``; ``"kvikio"`` works too where it reads files).

    Returns
    -------
    numpy.ndarray, Stats
        The region's data and what the run did.

    Examples
    --------
    >>> import numpy as np, tempfile, zarr
    >>> from linumpy.io.engine.plan import plan_read
    >>> path = tempfile.mkdtemp() + "/array.zarr"
    >>> array = zarr.create_array(path, shape=(4, 4), chunks=(2, 2), dtype="int16")
    >>> array[:] = np.arange(16, dtype=np.int16).reshape(4, 4)
    >>> read_plan(plan_read(array, (slice(1, 3),)), threads=2)[0]
    array([[ 4,  5,  6,  7],
           [ 8,  9, 10, 11]], dtype=int16)
    """
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
