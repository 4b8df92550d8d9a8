"""Where the CPU back end's chunks go and which a thread takes together: chunks decoded in
place, runs of chunks along the last axis, batches of chunks per task.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from linumpy.io.engine.plan import ReadPlan

__all__: list[str] = []


def contiguous_offsets(plan: ReadPlan, start: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """Per entry, the byte offset in the output of a whole chunk that lands there as one
    contiguous block (decoded in place); -1 for the others.

    Parameters
    ----------
    plan
        The read plan.
    start, stop
        Per entry: where its part of the output starts and stops (``plan.bounds()``).

    Examples
    --------
    >>> import tempfile, zarr
    >>> from linumpy.io.engine.plan import plan_read
    >>> array = zarr.create_array(tempfile.mkdtemp() + "/a.zarr", shape=(4, 6), chunks=(2, 6),
    ...                           dtype="uint16")
    >>> plan = plan_read(array)
    >>> contiguous_offsets(plan, *plan.bounds()[:2]).tolist()  # rows 0-1, then rows 2-3
    [0, 24]
    """
    shape = np.array(plan.shape, dtype=np.int64)
    extent = stop - start
    whole = np.all(extent == np.array(plan.chunk_shape, dtype=np.int64), axis=1)
    if plan.order != "C" or plan.stored_dtype != plan.dtype or not len(extent):
        return np.full(len(extent), -1, dtype=np.int64)
    # C order: a block is contiguous when every axis after its first longer than 1 is full.
    longer = extent > 1
    after_longer = (np.cumsum(longer, axis=1) - longer) > 0
    contiguous = np.all(~after_longer | (extent == shape), axis=1) & whole
    strides = np.cumprod(np.concatenate([shape[1:], [1]])[::-1])[::-1] * plan.dtype.itemsize
    offsets = (start * strides).sum(axis=1)
    return np.where(contiguous, offsets, -1)


@dataclass(slots=True)
class Run:
    """One thread's run: whole chunks decoded side by side, ``count`` of them from ``first``.

    Examples
    --------
    >>> run = Run(np.zeros(64, np.uint8))
    >>> run.address == run.buffer.ctypes.data, run.count
    (True, 0)
    """

    buffer: np.ndarray
    address: int = 0
    first: int = -1
    count: int = 0

    def __post_init__(self) -> None:
        self.address = self.buffer.ctypes.data


def joins(start: np.ndarray, stop: np.ndarray, direct: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """Per entry: whether its chunk continues entry ``e - 1``'s along the output's last axis,
    both whole chunks copied into the output (see :data:`~linumpy.io.engine.cpu.RUN_BYTES`).

    Parameters
    ----------
    start, stop
        Per entry: where its part of the output starts and stops.
    direct
        Per entry: :func:`contiguous_offsets` (-1: copied, not decoded in place).
    whole
        Per entry: whether the whole chunk lies in the output.

    Examples
    --------
    >>> start = np.array([[0, 0], [0, 4], [0, 8]])
    >>> joins(start, start + 4, np.array([-1, -1, -1]), np.array([True, True, False])).tolist()
    [False, True, False]
    """
    joins = np.zeros(len(start), dtype=bool)
    if len(start) > 1:
        copied = whole & (direct == -1)
        joins[1:] = (
            copied[1:]
            & copied[:-1]
            & np.all(start[1:, :-1] == start[:-1, :-1], axis=1)
            & np.all(stop[1:, :-1] == stop[:-1, :-1], axis=1)
            & (start[1:, -1] == stop[:-1, -1])
        )
    return joins


def batches(n: int, threads: int) -> list[tuple[int, int]]:
    """``[first, last)`` runs of ``range(n)``: about four per thread, so that threads finishing
    early take more, with fewer tasks (and less GIL-held bookkeeping) than one per chunk.

    Examples
    --------
    >>> batches(10, 2)
    [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]
    """
    size = max(1, -(-n // (4 * threads)))
    return [(first, min(n, first + size)) for first in range(0, n, size)]


def tapering_batches(n: int, threads: int) -> list[tuple[int, int]]:
    """``[first, last)`` runs of ``range(n)`` as :func:`batches` makes them, until half the
    chunks are handed out; then each a ``1 / (2 * threads)`` share of those left, down to one
    chunk, so that the threads finish within about a chunk of each other.

    Batches of equal size end the read with the threads apart by up to a batch, which on a few
    threads is a noticeable share of the read. Tasks are handed out in order, so the large come
    first.

    Examples
    --------
    >>> [last - first for first, last in tapering_batches(40, 2)]
    [5, 5, 5, 5, 5, 4, 3, 2, 2, 1, 1, 1, 1]
    """
    most = max(1, -(-n // (4 * threads)))
    runs, first = [], 0
    while first < n:
        size = min(most, -(-(n - first) // (2 * threads)))
        runs.append((first, first + size))
        first += size
    return runs
