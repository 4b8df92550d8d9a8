"""What the read engine asks of a back end (:class:`ReadBackend`, one class per destination),
and the groups and counts the run loop and the back ends exchange.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

import numpy as np

from linumpy.io.engine.fetch import Layout
from linumpy.io.engine.plan import ReadPlan
from linumpy.io.engine.region import Region
from linumpy.settings import Settings

__all__: list[str] = []


@dataclass(frozen=True, slots=True)
class GroupBudget:
    """How a back end wants a read's stored chunks grouped by the run loop
    (:func:`~linumpy.io.engine.run.make_groups`).
    """

    max_compressed: int
    max_total: int = 2**62
    min_groups: int = 1
    tail: float = 0.0


@dataclass(frozen=True, slots=True)
class Group:
    """Stored chunks fetched together into one staging buffer and decoded together."""

    entries: np.ndarray
    layout: Layout
    tail: bool = False


@dataclass(slots=True)
class Fetched:
    """A group read and checked: what the back end needs to decode and scatter it."""

    index: int
    slot: int
    group: Group
    staging: np.ndarray
    sizes: np.ndarray
    verdicts: np.ndarray
    decoded: list[tuple[int, np.ndarray]] = field(default_factory=list)
    seconds: float = 0.0
    crc32c_on_device: bool = False
    missing: np.ndarray | None = None


@dataclass(slots=True)
class Stats:
    """What one read of a plan did, for reports."""

    n_reads: int = 0
    n_fill: int = 0
    n_cpu_decoded: int = 0
    n_groups: int = 0
    compressed_bytes: int = 0
    phases: dict[str, float] = field(default_factory=dict)


class ReadBackend(Protocol):
    """A read back end: one class per destination, the one protocol the read orchestrator and
    the run loop call.

    The class methods come before a read's buffers exist; :meth:`open` returns the instance
    that holds them, and the run loop (:func:`~linumpy.io.engine.run.run`) uses the instance's
    ``slots``, ``max_decode_bytes``, ``size_order``, :meth:`budget`, :meth:`staging`,
    :meth:`fill`, :meth:`submit`, :meth:`finish` and :meth:`synchronize`. A back end may also
    have ``crc32c_on_device(group) -> bool``: True leaves a group's crc32c checks to the back
    end (:attr:`Fetched.crc32c_on_device`).
    """

    name: ClassVar[Literal["cpu", "gpu"]]  # the report's ``backend``, the key of its last report
    out: Any  # the output the back end fills
    phases: dict[str, float]  # seconds of the back end's own steps, for the report
    slots: int  # staging buffers in use at once
    max_decode_bytes: int  # larger chunks are decoded by libzstd in the validate stage
    size_order: bool  # the run loop reads the best-compressed chunks first

    @classmethod
    def check_output(cls, shape: tuple[int, ...], dtype: np.dtype, source: str) -> None:
        """Raise before planning when an output of this shape cannot be allocated."""
        ...

    @classmethod
    def obstacle(cls, plan: ReadPlan) -> str | None:
        """Why this back end cannot produce the plan's output, or None."""
        ...

    @classmethod
    def through_zarr(cls, array: Any, region: Region, out: Any) -> Any:
        """``array[region]`` read by zarr itself (into ``out`` when given)."""
        ...

    @classmethod
    def choose_reader(cls, plan: ReadPlan, settings: Settings) -> tuple[str, str]:
        """The file reader for this read, and why."""
        ...

    @classmethod
    def open(cls, plan: ReadPlan, settings: Settings, reader: str, out: Any) -> ReadBackend:
        """Check the memory of the read's buffers, allocate the output (unless ``out``), and
        return the back end holding it (``.out``)."""
        ...

    def execute(self) -> Stats:
        """Read, decode and scatter the whole plan into ``out``: through the run loop or with
        threads that read their own chunks, as the back end chooses."""
        ...

    def budget(self, sizes: np.ndarray) -> GroupBudget:
        """How the run loop groups the stored chunks, given their sizes in read order."""
        ...

    def staging(self, slot: int, nbytes: int) -> np.ndarray:
        """A host buffer of at least ``nbytes`` for ``slot``, free to overwrite."""
        ...

    def fill(self, entries: np.ndarray) -> None:
        """Fill the output of these plan entries (not stored) with the fill value."""
        ...

    def submit(self, fetched: Fetched) -> None:
        """Decode and scatter a fetched group (may return before the work is done)."""
        ...

    def finish(self) -> None:
        """Wait for all submitted work; raise the first error it met."""
        ...

    def synchronize(self) -> None:
        """Wait for all submitted work, raising nothing (an error is being raised already)."""
        ...

    def usage(self) -> dict[str, int]:
        """Memory the read held beyond its output, as :class:`~linumpy.io.engine.read.ReadReport`
        fields (``device_extra_bytes``, ``pinned_bytes``); after :meth:`close`."""
        ...

    def close(self) -> None:
        """Give back threads and buffers (after :meth:`execute`, or after :meth:`finish` or
        :meth:`synchronize` of a run)."""
        ...
