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
    """One thread's run: whole chunks decoded side by side, ``count`` of them from ``first``."""

    buffer: np.ndarray
    address: int = 0
    first: int = -1
    count: int = 0

    def __post_init__(self) -> None:
        self.address = self.buffer.ctypes.data


def joins(start: np.ndarray, stop: np.ndarray, direct: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """Per entry: whether its chunk continues entry ``e - 1``'s along the output's last axis,
    both whole chunks copied into the output (see :data:`~linumpy.io.engine.cpu.RUN_BYTES`).
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
    """
    most = max(1, -(-n // (4 * threads)))
    runs, first = [], 0
    while first < n:
        size = min(most, -(-(n - first) // (2 * threads)))
        runs.append((first, first + size))
        first += size
    return runs
