"""The CPU back end: libzstd decodes each group's frames in a thread pool, numpy scatters them.

A chunk whose destination in the output is one contiguous block is decoded straight into it;
others are decoded into a per-thread scratch buffer and copied. libzstd (through numcodecs)
releases the GIL and verifies stored content checksums.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import numpy as np

from linumpy.errors import ChunkDecodeError, LinumpyError
from linumpy.io.engine.fetch import ALIGN, fetch_chunk
from linumpy.io.engine.frames import FRAME_NEEDS_CHECK, decode_zstd_cpu
from linumpy.io.engine.memory import check_host_memory, format_size
from linumpy.io.engine.plan import ReadPlan, chunk_view
from linumpy.io.engine.run import Fetched, Stats, run

__all__ = ["CpuBackend", "read_plan"]

#: Compressed bytes per group: enough chunks for every thread, small enough to stay in cache.
GROUP_BYTES = 64 * 1024 * 1024


class CpuBackend:
    """Decode groups into a numpy output (see :func:`read_plan`).

    Parameters
    ----------
    plan
        The read plan.
    threads
        Decoding threads.
    out
        A C-contiguous array of the plan's shape and dtype, allocated when None.

    Examples
    --------
    See :func:`linumpy.io.engine.run.run`.
    """

    slots = 3
    max_decode_bytes = 2**62

    def __init__(self, plan: ReadPlan, *, threads: int, out: np.ndarray | None = None) -> None:
        if out is None:
            out = np.empty(plan.shape, dtype=plan.dtype)
        elif out.shape != plan.shape or out.dtype != plan.dtype or not out.flags.c_contiguous:
            raise LinumpyError(
                f"out must be a C-contiguous {plan.dtype} array of shape {plan.shape}, "
                f"got {out.dtype} {out.shape}"
            )
        self.plan = plan
        self.out = out
        self.threads = threads
        self._bounds = [b.tolist() for b in plan.bounds()]
        self._buffers: list[np.ndarray | None] = [None] * self.slots
        self._pending: list[list[Future[None]]] = [[] for _ in range(self.slots)]
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="linumpy-decode")

    def group_bytes(self, sizes: np.ndarray) -> tuple[int, int, int, bool]:
        """Budgets for :func:`~linumpy.io.engine.run.make_groups`: staging only bounds a group."""
        return GROUP_BYTES, 2**62, 1, False

    def staging(self, slot: int, nbytes: int) -> np.ndarray:
        """The slot's numpy buffer, once the group decoded from it last is done."""
        self._wait(slot)
        buffer = self._buffers[slot]
        if buffer is None or buffer.nbytes < nbytes:
            buffer = self._buffers[slot] = np.empty(max(nbytes, ALIGN), dtype=np.uint8)
        return buffer

    def _selections(self, i: int) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
        """Entry ``i``'s part of the output and of its decoded chunk."""
        out_start, out_stop, chunk_start = (b[i] for b in self._bounds)
        out_sel = tuple(slice(a, b) for a, b in zip(out_start, out_stop))
        chunk_sel = tuple(slice(c, c + b - a) for a, b, c in zip(out_start, out_stop, chunk_start))
        return out_sel, chunk_sel

    def fill(self, entries: np.ndarray) -> None:
        """Set the output of chunks that are not stored to the fill value."""
        for i in entries.tolist():
            self.out[self._selections(i)[0]] = self.plan.fill_value

    def _direct_target(self, out_sel: tuple[slice, ...], whole: bool) -> np.ndarray | None:
        """The output bytes a chunk can be decoded into in place, if its layout allows."""
        plan = self.plan
        if not whole or plan.order != "C" or plan.stored_dtype != plan.dtype:
            return None
        target = self.out[(*out_sel, ...)]  # a view even for 0-d arrays
        return target.reshape(-1).view(np.uint8) if target.flags.c_contiguous else None

    def _scratch(self) -> np.ndarray:
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = np.empty(self.plan.chunk_nbytes, dtype=np.uint8)
        return scratch

    def decode_entry(self, entry: int, frame: Any, *, checked: bool) -> None:
        """Decode one stored chunk into the output (in place when its rows are contiguous).

        ``checked``: the frame passed :func:`~linumpy.io.engine.frames.check_frames` already.
        """
        plan = self.plan
        out_sel, chunk_sel = self._selections(entry)
        whole = all(s.stop - s.start == n for s, n in zip(chunk_sel, plan.chunk_shape))
        target = self._direct_target(out_sel, whole)
        try:
            if target is not None:
                decode_zstd_cpu(frame, key="", out=target, checked=checked)
                return
            scratch = self._scratch()
            decode_zstd_cpu(frame, key="", out=scratch, checked=checked)
        except ChunkDecodeError as exc:  # the key is made only when needed
            raise ChunkDecodeError(plan.key(entry), exc.reason) from None
        self.out[out_sel] = chunk_view(scratch, plan)[chunk_sel]

    def submit(self, fetched: Fetched) -> None:
        """Queue every chunk of the group for decoding and scattering (see :meth:`finish`)."""
        plan = self.plan
        entries = fetched.group.entries
        offsets = fetched.group.layout.offsets
        staging = fetched.staging
        decoded = dict(fetched.decoded)

        def work(i: int) -> None:
            entry = int(entries[i])
            if fetched.verdicts[i] == FRAME_NEEDS_CHECK:
                out_sel, chunk_sel = self._selections(entry)
                self.out[out_sel] = chunk_view(decoded[i], plan)[chunk_sel]
                return
            frame = staging[offsets[i] : offsets[i] + fetched.sizes[i]]
            self.decode_entry(entry, frame, checked=True)

        if self.threads == 1:
            for i in range(len(entries)):
                work(i)
            return
        # Queued, not waited for: the next group's chunks line up behind these, so every thread
        # stays busy across groups; the slot is waited for before its buffer is reused.
        self._pending[fetched.slot] = [self._pool.submit(work, i) for i in range(len(entries))]

    def read_files(self) -> Stats:
        """Read an unsharded plan one chunk file per task: fetch, check, decode and scatter in
        the same thread, while the chunk's bytes are still in cache.

        With one file per chunk there is no byte range to merge, and a worker that reads its own
        chunk overlaps reading with the other workers' decoding without a group barrier.
        """
        plan = self.plan
        files, offsets, nbytes = plan.files, plan.offsets, plan.nbytes
        file_index = plan.file_index.tolist()

        def work(entry: int) -> int:
            data = fetch_chunk(
                files[file_index[entry]],
                int(offsets[entry]),
                int(nbytes[entry]),
                plan.key(entry),
                crc32c=plan.crc32c,
            )
            if data is None:
                self.out[self._selections(entry)[0]] = plan.fill_value
                return -1
            self.decode_entry(entry, data, checked=False)
            return len(data)

        entries = np.flatnonzero(plan.stored).tolist()
        if self.threads == 1 or len(entries) < 2:
            sizes = [work(e) for e in entries]
        else:
            sizes = list(self._pool.map(work, entries))
        for entry in np.flatnonzero(~plan.stored).tolist():
            self.out[self._selections(entry)[0]] = plan.fill_value
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
        check_host_memory(plan.out_nbytes, plan.source, f"an output of shape {plan.shape}")
    scratch = plan.chunk_nbytes * min(threads, max(1, plan.n_entries)) + GROUP_BYTES * 3
    check_host_memory(
        scratch,
        plan.source,
        f"decoding its chunks of shape {plan.chunk_shape} ({format_size(plan.chunk_nbytes)} "
        f"each) in {threads} threads",
        "the array's chunks are too large for this machine: rechunk it, or use fewer threads "
        "(LINUMPY_IO_THREADS)",
    )
    backend = CpuBackend(plan, threads=threads, out=out)
    try:
        if math.prod(plan.shape) == 0:
            return backend.out, Stats()
        if plan.chunks_per_shard is None and reader == "pread":
            stats = backend.read_files()  # one file per chunk: nothing to merge
        else:
            stats = run(
                plan, backend, reader=reader, threads=threads, group_bytes=backend.group_bytes
            )
    finally:
        backend.close()
    return backend.out, stats
