"""The CPU back end: threads read their chunks, the compressor decodes them, numpy scatters them.

With the ``pread`` reader each thread reads, checks and decodes its own batch of chunks
(:meth:`CpuBackend.read_files`); with ``kvikio`` the run loop reads groups and the back end
decodes them in its pool. A chunk whose place in the output is contiguous is decoded straight
into it; others go through a per-thread scratch buffer, whole chunks along the last axis a run
at a time (:data:`RUN_BYTES`). A new output's pages are faulted in first, in parallel
(:data:`PREFAULT_BYTES`).
"""

from __future__ import annotations

import math
import mmap
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import nullcontext
from typing import Any, ClassVar, Literal

import numpy as np

from linumpy.errors import ChunkDecodeError, LinumpyError
from linumpy.io.engine.backend import Fetched, GroupBudget, Stats
from linumpy.io.engine.codecs.protocol import FRAME_NEEDS_CHECK
from linumpy.io.engine.cpu_files import ChunkReads, OpenShards, RemoteChunkReads
from linumpy.io.engine.cpu_layout import (
    Run,
    batches,
    contiguous_offsets,
    joins,
    tapering_batches,
)
from linumpy.io.engine.fetch import ALIGN
from linumpy.io.engine.fetch_remote import read_order
from linumpy.io.engine.memory import check_host_memory, format_size
from linumpy.io.engine.plan import ReadPlan, chunk_view
from linumpy.io.engine.read import output_nbytes
from linumpy.io.engine.region import Region
from linumpy.io.engine.run import run

__all__: list[str] = []

#: Most compressed bytes per group (three groups are in flight).
GROUP_BYTES = 64 * 1024 * 1024
#: Fewest compressed bytes per group.
MIN_GROUP_BYTES = 8 * 1024 * 1024
#: Per thread: whole chunks that lie side by side along the output's last axis are decoded into
#: a run buffer of this size, small enough to stay in a core's cache, and copied into the output
#: in one assignment, so that numpy writes whole output rows instead of one chunk row at a time
#: (docs/architecture.md, "Measurements behind the defaults": ``RUN_BYTES``). Used only where
#: threads read their own batches of consecutive chunks (:meth:`CpuBackend.read_files`): a
#: run-loop group's batches are too small for runs to form.
RUN_BYTES = 2 * 1024 * 1024
#: A new output at least this large has its pages faulted in before decoding, each thread writing
#: one byte per page of its own contiguous part, because threads scattering chunks across the
#: same pages fault them in slowly (docs/architecture.md, "Measurements behind the defaults":
#: ``PREFAULT_BYTES``).
PREFAULT_BYTES = 64 * 1024 * 1024


class CpuBackend:
    """The read back end of numpy outputs (see :class:`~linumpy.io.engine.backend.ReadBackend`)."""

    name: ClassVar[Literal["cpu"]] = "cpu"
    slots = 3
    max_decode_bytes = 2**62
    size_order = False  # file order: libzstd's decode time does not depend on the order
    #: Whether chunks whose bytes are contiguous in ``out`` are decoded straight into it (off
    #: for an output in device memory: every chunk then goes through :meth:`_scatter`).
    in_place = True

    @classmethod
    def check_output(cls, shape: tuple[int, ...], dtype: np.dtype, source: str) -> None:
        """Refuse an output larger than the host's available memory."""
        check_host_memory(output_nbytes(shape, dtype), source, f"an output of shape {shape}")

    @classmethod
    def obstacle(cls, plan: ReadPlan) -> str | None:
        """None: the CPU back end reads every planned layout."""
        return None

    @classmethod
    def through_zarr(cls, array: Any, region: Region, out: np.ndarray | None) -> np.ndarray:
        """zarr's own read of the region."""
        if out is None:
            return array[region]
        out[...] = array[region]
        return out

    @classmethod
    def choose_reader(cls, plan: ReadPlan, settings: Any) -> tuple[str, str]:
        """``pread``: threads read their own chunks (remote ones from the read ahead)."""
        local = plan.remote is None
        return "pread", "threads read their own chunks" + ("" if local else ", fetched ahead")

    @classmethod
    def open(cls, plan: ReadPlan, settings: Any, reader: str, out: Any) -> CpuBackend:
        """Check the threads' buffers against host memory; allocate the output."""
        check_thread_memory(plan, settings.io_threads)
        return cls(plan, threads=settings.io_threads, out=out, reader=reader)

    def __init__(
        self,
        plan: ReadPlan,
        *,
        threads: int,
        out: np.ndarray | None = None,
        reader: str = "pread",
    ) -> None:
        new = out is None
        fill = np.asarray(plan.fill_value, dtype=plan.dtype)
        # A new output of fill value 0 starts zeroed (fresh pages are zero): chunks not stored
        # (an OCT volume's dark background) then need no filling.
        self._zeroed = new and not fill.dtype.hasobject and not any(fill.tobytes())
        if out is None:
            out = (np.zeros if self._zeroed else np.empty)(plan.shape, dtype=plan.dtype)
        elif out.shape != plan.shape or out.dtype != plan.dtype or not out.flags.c_contiguous:
            raise LinumpyError(
                f"out must be a C-contiguous {plan.dtype} array of shape {plan.shape}, "
                f"got {out.dtype} {out.shape}"
            )
        self.plan = plan
        self.out = out
        self.threads = threads
        self.reader = reader
        self.phases: dict[str, float] = {}
        self._chunk_nbytes = plan.chunk_nbytes  # a property: computed on each access
        # The compressor's fast decode (address in, address out, False on any doubt), if any.
        self._decode_into = plan.codec.decode_into if plan.codec.FAST_DECODE else None
        start, stop, chunk_start = plan.bounds()
        self._bounds = [start.tolist(), stop.tolist(), chunk_start.tolist()]
        # Per entry: output byte offset when decoded in place, -1 when copied, -2 when partial.
        direct = contiguous_offsets(plan, start, stop) if self.in_place else np.full(len(start), -1)
        whole = np.all(stop - start == np.array(plan.chunk_shape, dtype=np.int64), axis=1)
        self._direct = np.where(whole, direct, -2).tolist()
        self._out_address = out.ctypes.data if out.size and self.in_place else 0
        # A whole chunk's rows (its last axis) as single opaque items when the copy converts
        # nothing, which spares numpy's per-row overhead on small chunks.
        dtype, rows = plan.dtype, plan.chunk_shape[-1:]
        plain = plan.order == "C" and plan.stored_dtype == dtype and not dtype.hasobject
        self._rows = np.dtype(f"V{rows[0] * dtype.itemsize}") if plain and rows else None
        # A run continues with entry e when e's chunk lies right after entry e - 1's along the
        # last axis, both whole chunks copied (not decoded in place, not partial).
        runs = self._rows is not None and self.in_place
        self._run_max = RUN_BYTES // max(plan.chunk_nbytes, 1) if runs else 0
        self._joins: list[bool] = (
            joins(start, stop, direct, whole).tolist() if self._run_max > 1 else []
        )
        self._buffers: list[np.ndarray | None] = [None] * self.slots
        self._pending: list[list[Future[None]]] = [[] for _ in range(self.slots)]
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="linumpy-decode")
        if new and threads > 1 and out.nbytes >= PREFAULT_BYTES:
            try:
                self._prefault()
            except BaseException:
                self._pool.shutdown()
                raise

    def _prefault(self) -> None:
        """Fault the new output's pages in, a contiguous part per thread (one byte per page)."""
        flat = self.out.reshape(-1).view(np.uint8)
        page = mmap.PAGESIZE
        bounds = np.linspace(0, flat.size // page, self.threads + 1).astype(np.int64) * page

        def touch(first: int, last: int) -> None:
            flat[first:last:page] = 0

        for future in [self._pool.submit(touch, a, b) for a, b in zip(bounds[:-1], bounds[1:])]:
            future.result()

    def budget(self, sizes: np.ndarray) -> GroupBudget:
        """How the run loop groups the chunks: staging only bounds a group (and no tail: every
        group is decoded alike).

        About four chunks per thread: enough to keep every thread busy with three groups in
        flight, while a small first group lets decoding start sooner and small staging buffers
        cost less to fault in.
        """
        typical = int(np.median(sizes)) if len(sizes) else 0
        return GroupBudget(min(GROUP_BYTES, max(MIN_GROUP_BYTES, 4 * self.threads * typical)))

    def execute(self) -> Stats:
        """Read the plan: threads reading their own chunks with ``pread`` (also a remote plan's,
        from the read ahead's responses) or for an empty output; with kvikio the run loop reads."""
        if self.reader == "pread" or math.prod(self.plan.shape) == 0:
            return self.read_files()
        return run(self.plan, self, reader=self.reader, threads=self.threads)

    def staging(self, slot: int, nbytes: int) -> np.ndarray:
        """The slot's numpy buffer, once the group decoded from it last is done."""
        self._wait(slot)
        buffer = self._buffers[slot]
        if buffer is None or buffer.nbytes < nbytes:
            buffer = self._buffers[slot] = np.empty(max(nbytes, ALIGN), dtype=np.uint8)
        return buffer

    def _out_selection(self, i: int) -> tuple[slice, ...]:
        return tuple(slice(a, b) for a, b in zip(self._bounds[0][i], self._bounds[1][i]))

    def _selections(self, i: int) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
        """Entry ``i``'s part of the output and of its decoded chunk."""
        out_start, out_stop, chunk_start = (b[i] for b in self._bounds)
        out_sel = tuple(slice(a, b) for a, b in zip(out_start, out_stop))
        chunk_sel = tuple(slice(c, c + b - a) for a, b, c in zip(out_start, out_stop, chunk_start))
        return out_sel, chunk_sel

    def fill(self, entries: np.ndarray) -> None:
        """Set the output of chunks that are not stored to the fill value, in the threads (an
        image's background can be half of it: one thread would be slow)."""
        for future in self._fill_tasks(entries):
            future.result()

    def _fill_tasks(self, entries: np.ndarray) -> list[Future[None]]:
        if self._zeroed:
            return []
        chosen = entries.tolist()

        def work(first: int, last: int) -> None:
            for i in chosen[first:last]:
                self._fill_entry(i)

        return [self._pool.submit(work, a, b) for a, b in batches(len(chosen), self.threads)]

    def _fill_entry(self, entry: int) -> None:
        """Set one chunk's part of the output to the fill value (a zeroed output holds it)."""
        if not self._zeroed:
            self.out[self._out_selection(entry)] = self.plan.fill_value

    def _scratch(self) -> tuple[np.ndarray, int, np.ndarray]:
        """This thread's decode buffer: bytes, their address, the chunk-shaped view."""
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            flat = np.empty(self.plan.chunk_nbytes, dtype=np.uint8)
            scratch = self._local.scratch = (flat, flat.ctypes.data, chunk_view(flat, self.plan))
        return scratch

    def _scatter(self, entry: int, chunk: np.ndarray, direct: int) -> None:
        """Copy a decoded chunk (chunk-shaped) into the output."""
        if direct == -2:  # partly outside the region
            out_sel, chunk_sel = self._selections(entry)
            self.out[out_sel] = chunk[chunk_sel]
        elif self._rows is None:
            self.out[self._out_selection(entry)] = chunk
        else:  # one item per row: numpy's loop then runs per plane, not per row
            self.out[self._out_selection(entry)].view(self._rows)[...] = chunk.view(self._rows)

    def _run(self) -> Run:
        """This thread's run buffer (made on first use)."""
        run = getattr(self._local, "run", None)
        if run is None:
            run = self._local.run = Run(np.empty(self._run_max * self.plan.chunk_nbytes, np.uint8))
        return run

    def _decode_into_run(self, entry: int, source: Any, size: int) -> bool:
        """Decode a whole chunk into this thread's run (copying the run out first when ``entry``
        does not continue it); False when the decoder rejects the frame."""
        run = self._run()
        continues = (
            entry == run.first + run.count and self._joins[entry] and run.count < self._run_max
        )
        if not (run.count and continues):
            self.flush_run()
            run.first = entry
        nbytes = self._chunk_nbytes
        if not self._decode_into(source, size, run.address + run.count * nbytes, nbytes):
            return False
        run.count += 1
        return True

    def flush_run(self) -> None:
        """Copy this thread's run of decoded chunks into the output, in one assignment."""
        run = getattr(self._local, "run", None)
        if run is None or not run.count:
            return
        first, count, run.count = run.first, run.count, 0
        start, stop = self._bounds[0][first], self._bounds[1][first + count - 1]
        target = self.out[tuple(slice(a, b) for a, b in zip(start, stop))].view(self._rows)
        rows = run.buffer[: count * self.plan.chunk_nbytes].view(self._rows)
        target[...] = np.moveaxis(rows.reshape(count, *target.shape[:-1]), 0, -1)

    def _decode_slow(self, entry: int, frame: Any, direct: int, *, checked: bool) -> None:
        """Decode with the compressor's ``decode``: without its fast decode, or to say why a
        chunk fails."""
        plan = self.plan
        if direct >= 0:
            target = self.out.reshape(-1).view(np.uint8)[direct : direct + plan.chunk_nbytes]
        else:
            target = self._scratch()[0]
        try:
            plan.codec.decode(frame, key="", out=target, checked=checked)
        except ChunkDecodeError as exc:  # the key is made only when needed
            raise ChunkDecodeError(plan.key(entry), exc.reason) from None
        if direct < 0:
            self._scatter(entry, self._scratch()[2], direct)

    def decode_entry(self, entry: int, frame: Any, *, checked: bool, run: bool = False) -> None:
        """Decode one stored chunk into the output (in place when its bytes are contiguous).

        ``checked``: the frame passed the compressor's ``check_frames`` already.
        ``frame`` is a bytes-like object, or ``(address, size, frame)`` of bytes in a buffer
        that stays alive for the call. With ``run``, a whole chunk may wait in this thread's run
        until :meth:`flush_run`.
        """
        direct = self._direct[entry]
        if isinstance(frame, tuple):
            source, size, frame = frame
        elif isinstance(frame, bytes):
            source, size = frame, len(frame)
        else:  # bytearray, memoryview, numpy: ctypes takes their address
            frame = np.frombuffer(frame, dtype=np.uint8)
            source, size = frame.ctypes.data if frame.size else None, frame.size
        decode_into = self._decode_into
        if decode_into is not None:
            nbytes = self._chunk_nbytes
            if direct >= 0:
                if decode_into(source, size, self._out_address + direct, nbytes):
                    return
            elif run and direct == -1 and self._joins:
                if self._decode_into_run(entry, source, size):
                    return
            else:
                _, address, chunk = self._scratch()
                if decode_into(source, size, address, nbytes):
                    self._scatter(entry, chunk, direct)
                    return
        self._decode_slow(entry, frame, direct, checked=checked)

    def submit(self, fetched: Fetched) -> None:
        """Queue the group's chunks in batches for decoding and scattering (see :meth:`finish`)."""
        plan = self.plan
        entries = fetched.group.entries.tolist()
        offsets = fetched.group.layout.offsets.tolist()
        sizes = fetched.sizes.tolist()
        needs_check = (fetched.verdicts == FRAME_NEEDS_CHECK).tolist()
        staging = fetched.staging
        base = staging.ctypes.data
        decoded = dict(fetched.decoded)

        def work(first: int, last: int) -> None:
            for i in range(first, last):
                entry = entries[i]
                if needs_check[i]:
                    self._scatter(entry, chunk_view(decoded[i], plan), self._direct[entry])
                    continue
                o, n = offsets[i], sizes[i]
                self.decode_entry(entry, (base + o, n, staging[o : o + n]), checked=True)

        if self.threads == 1:
            work(0, len(entries))
            return
        # Queued, not waited for: the next group's chunks line up behind these, so every thread
        # stays busy across groups; the slot is waited for before its buffer is reused.
        self._pending[fetched.slot] = [
            self._pool.submit(work, first, last)
            for first, last in batches(len(entries), self.threads)
        ]

    def usage(self) -> dict[str, int]:
        """Nothing to report beyond the output."""
        return {}

    def read_files(self) -> Stats:
        """Read a plan's chunks in batches per task, from chunk files, shards or a remote
        store's responses: fetch, check, decode and scatter each chunk in the same thread, while
        its bytes are in cache.

        Without a group barrier, staging, a producer thread or frame checks (libzstd checks what
        it decodes), this is faster than the run loop when the same threads read and decode
        (docs/architecture.md, "Measurements behind the defaults").
        """
        plan = self.plan
        if math.prod(plan.shape) == 0:
            return Stats()
        remote = plan.remote is not None
        # Local chunks in the output's order, also for shards: a batch then writes long rows of
        # the output (docs/architecture.md, "Measurements behind the defaults": shards in the
        # output's order), and a shard's inner chunks along x, stored one after the other, are
        # still read in turn. Remote ones in the order their requests are made.
        order = read_order(plan) if remote else np.flatnonzero(plan.stored)
        entries = order.tolist()
        sharded = plan.chunks_per_shard is not None and not remote
        sizes = [0] * len(entries)
        chunks = RemoteChunkReads(plan, order) if remote else ChunkReads(plan)

        def work(first: int, last: int) -> None:
            chunks.begin(entries[first:last])
            with OpenShards(plan.files) if sharded else nullcontext() as shards:
                for k in range(first, last):
                    entry = entries[k]
                    frame = chunks.read(entry, shards)
                    if frame is None:
                        self._fill_entry(entry)
                        sizes[k] = -1
                        continue
                    self.decode_entry(entry, frame, checked=False, run=True)
                    sizes[k] = frame[1]
            self.flush_run()
            chunks.end(entries[first:last])

        try:
            fills = self._fill_tasks(np.flatnonzero(~plan.stored))
            if self.threads == 1 or len(entries) < 2:
                work(0, len(entries))
            else:
                tasks = tapering_batches(len(entries), self.threads)
                fills += [self._pool.submit(work, a, b) for a, b in tasks]
            for future in fills:
                future.result()
        finally:
            chunks.close()
        found = [n for n in sizes if n >= 0]
        return Stats(
            n_reads=len(found),
            n_fill=plan.n_entries - len(found),
            compressed_bytes=sum(found),
        )

    def _wait(self, slot: int) -> None:
        pending, self._pending[slot] = self._pending[slot], []
        for future in pending:
            future.result()

    def finish(self) -> None:
        """Wait for every queued chunk; raise the first error."""
        for slot in range(self.slots):
            self._wait(slot)

    def synchronize(self) -> None:
        """Wait for every queued chunk, ignoring errors (the caller is raising one already)."""
        for slot in range(self.slots):
            wait(self._pending[slot])

    def close(self) -> None:
        """Stop the decoding threads."""
        self._pool.shutdown()


def check_thread_memory(plan: ReadPlan, threads: int) -> None:
    """Raise MemoryLimitError unless the host has room for ``threads`` decoding threads' buffers."""
    # Per thread: a decoded chunk and, when the thread reads it, its compressed bytes (about as
    # large), and a run of chunks (RUN_BYTES at most).
    per_thread = 2 * plan.chunk_nbytes + min(RUN_BYTES, plan.chunk_nbytes * plan.n_entries)
    check_host_memory(
        per_thread * min(threads, max(1, plan.n_entries)) + GROUP_BYTES * 3,
        plan.source,
        f"decoding its chunks of shape {plan.chunk_shape} ({format_size(plan.chunk_nbytes)} "
        f"each) in {threads} threads",
        "the array's chunks are too large for this machine: rechunk it, or use fewer threads "
        "(LINUMPY_IO_THREADS)",
    )
