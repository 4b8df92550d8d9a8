"""The read orchestrator: one way from ``array[region]`` to an array, for every back end.

It checks the output's memory, plans, and reads through the back end, or through zarr where the
back end cannot produce the plan's output; every read ends with a :class:`ReadReport`. The back
end is handed in by :func:`linumpy.io.reader.read_to`: this module imports neither.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import zarr

from linumpy.errors import UnsupportedLayoutError
from linumpy.io.engine.backend import ReadBackend
from linumpy.io.engine.plan import plan_region
from linumpy.io.engine.region import parse_region
from linumpy.settings import Settings

__all__: list[str] = []

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReadReport:
    """What a read did (:func:`last_read_report`), on the CPU or the GPU.

    Attributes
    ----------
    source
        The array read.
    path
        ``"fast"`` (the engine) or ``"zarr"`` (the back end's fallback: zarr itself, on the GPU
        through :func:`~linumpy.gpu.zarr_context.gpu_zarr_context`).
    reason
        Why that path (and reader) was taken.
    reader
        File reader of the fast path (``"kvikio"`` or ``"pread"``), else None.
    n_reads, n_fill, n_cpu_decoded, n_batches
        Chunks decoded, chunks filled with the fill value, chunks decoded on the CPU by a GPU
        read (valid layouts nvCOMP cannot decode), groups of the run loop (0 where the CPU's
        threads read their own chunks).
    compressed_bytes, output_bytes
        Compressed bytes read and bytes of the output.
    device_extra_bytes, pinned_bytes
        For GPU reads: device memory allocated beyond the output, and pinned host memory used.
    seconds
        Wall time of the call.
    phases
        Seconds spent in the engine's steps: planning (``plan``), allocating the output and the
        back end's buffers (``allocate``), the pipeline (``pipeline``) and, where the run loop
        ran, inside it sizing files (``sizes``), grouping (``groups``), reading files
        (``fetch``, on a producer thread), waiting for them (``fetch_wait``), checking frames
        (``validate``), queueing work (``submit``) and waiting for it at the end
        (``final_sync``); a GPU read adds its back end's steps (``pinned``, ``nvcomp``...).
    backend
        ``"cpu"`` or ``"gpu"``.
    """

    source: str
    path: Literal["fast", "zarr"]
    reason: str
    reader: str | None = None
    n_reads: int = 0
    n_fill: int = 0
    n_cpu_decoded: int = 0
    n_batches: int = 0
    compressed_bytes: int = 0
    output_bytes: int = 0
    device_extra_bytes: int = 0
    pinned_bytes: int = 0
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    backend: Literal["cpu", "gpu"] = "cpu"


_reports = threading.local()


def last_read_report(backend: Literal["cpu", "gpu"] = "cpu") -> ReadReport | None:
    """The report of this thread's last read on ``backend``, or None."""
    return getattr(_reports, "last", {}).get(backend)


def _record(report: ReadReport) -> None:
    if not hasattr(_reports, "last"):
        _reports.last = {}
    _reports.last[report.backend] = report
    logger.debug("%s", report)


def read(
    array: zarr.Array,
    region: slice | Sequence[slice] | None,
    *,
    backend: type[ReadBackend],
    settings: Settings,
    source: str,
    out: Any = None,
) -> Any:
    """Read ``array[region]`` with ``backend``, recording a :class:`ReadReport`."""
    started = time.perf_counter()
    selection = parse_region(region, array.shape, source)
    if out is None:  # before planning: the plan of a huge region alone takes long
        shape = tuple(s.stop - s.start for s in selection)
        backend.check_output(shape, np.dtype(array.dtype), source)
    try:
        plan = plan_region(array, selection, settings)
        obstacle = backend.obstacle(plan)
    except UnsupportedLayoutError as exc:
        obstacle = str(exc)
    planned = time.perf_counter() - started
    if obstacle is not None:
        logger.info("%s: engine read not possible (%s); reading through zarr", source, obstacle)
        result = backend.through_zarr(array, selection, out)
        _record(
            ReadReport(
                source=source,
                path="zarr",
                reason=obstacle,
                output_bytes=int(result.nbytes),
                seconds=time.perf_counter() - started,
                backend=backend.name,
            )
        )
        return result
    reader, why = backend.choose_reader(plan, settings)
    mark = time.perf_counter()
    opened = backend.open(plan, settings, reader, out)
    allocated = time.perf_counter() - mark
    mark = time.perf_counter()
    try:
        stats = opened.execute()
    finally:
        opened.close()
    pipeline = time.perf_counter() - mark
    phases = {"plan": planned, "allocate": allocated, "pipeline": pipeline}
    phases |= stats.phases | opened.phases
    report = ReadReport(
        source=plan.source,
        path="fast",
        reason=why,
        reader=reader,
        n_reads=stats.n_reads,
        n_fill=stats.n_fill,
        n_cpu_decoded=stats.n_cpu_decoded,
        n_batches=stats.n_groups,
        compressed_bytes=stats.compressed_bytes,
        output_bytes=plan.out_nbytes,
        seconds=time.perf_counter() - started,
        phases={k: round(v, 6) for k, v in phases.items()},
        backend=backend.name,
    )
    _record(replace(report, **opened.usage()))
    return opened.out


def output_nbytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """Bytes of an output of ``shape`` and ``dtype``."""
    return math.prod(shape) * np.dtype(dtype).itemsize
