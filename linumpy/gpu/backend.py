"""The GPU back end of the read engine: nvCOMP decodes each group, one kernel scatters it.

While the run loop fetches and checks group k+1, group k is queued on a stream of its own
(:data:`STREAMS`, in turn): one upload of its compressed bytes, one nvCOMP call, XXH64 of stored
checksums, one scatter kernel into the output. An nvCOMP call lasts its slowest frame however few
frames it has, and calls on separate streams run together, so streams overlap reads with decodes
(docs/gpu_guide.md). Each stream holds one device buffer (bounded by ``scratch_bytes``) and one
pinned staging buffer (:func:`~linumpy.gpu.pinned_buffers.pinned_allowance`); groups of the
read's tail (``Group.tail``) are decoded by libzstd threads into pinned memory instead.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
import zarr

from linumpy.errors import ChunkDecodeError
from linumpy.gpu import nvcomp
from linumpy.gpu.availability import after_current_stream, worker_streams
from linumpy.gpu.device_memory import check_free
from linumpy.gpu.gpu_read import (
    check_device_memory,
    check_out,
    choose_reader,
    fast_path_obstacle,
    nvcomp_chunk_limit,
    open_host_decode,
)
from linumpy.gpu.host_decode import HostDecoder, decode_pool, decodes_on_host
from linumpy.gpu.pinned_buffers import PinnedLease, count_moved, pinned_allowance
from linumpy.gpu.read_checks import ReadChecks
from linumpy.gpu.scatter import geometry, launch_scatter, scatter_table
from linumpy.gpu.zarr_context import gpu_zarr_context
from linumpy.io.engine.backend import Fetched, Group, GroupBudget, Stats
from linumpy.io.engine.codecs.protocol import FRAME_CHECKSUM, FRAME_NEEDS_CHECK
from linumpy.io.engine.fetch import ALIGN, align_up
from linumpy.io.engine.memory import format_size
from linumpy.io.engine.plan import ReadPlan
from linumpy.io.engine.read import output_nbytes
from linumpy.io.engine.region import Region
from linumpy.io.engine.run import run
from linumpy.settings import Settings

if TYPE_CHECKING:
    import cupy

__all__: list[str] = []

logger = logging.getLogger(__name__)

# Decoded chunks start on this boundary in device buffers (the XXH64 kernel needs 8).
_SLOT_ALIGN = 256
# Below this many compressed bytes a read is one group: overlap would not pay for the calls.
_OVERLAP_MIN_BYTES = 32 * 1024 * 1024
# Tuning fixed in the code: other values measured no faster (docs/gpu_guide.md).
#: Groups of chunks the GPU decodes at once, each on its own CUDA stream.
STREAMS = 4
#: Fraction of a read's chunks, the last ones read, that libzstd decodes on the CPU.
CPU_SHARE = 0.0
# From this decoded chunk size a read takes the best-compressed chunks first, else file order:
# large frames decode slowly enough for their order to matter, small ones do not
# (docs/gpu_guide.md, "Measurements behind the GPU defaults": read order).
SIZE_ORDER_MIN_CHUNK = 1024 * 1024


@dataclass(slots=True)
class _Slot:
    """What one stream owns: its device buffer, its staging buffers, its last copy's event."""

    stream: Any
    device: Any = None
    staging: np.ndarray | None = None
    decoded: np.ndarray | None = None  # pinned: chunks decoded on the CPU
    copied: Any = None  # event: the staging buffers' last copy to the device is done
    cpu_done: Future[None] | None = None  # the CPU decode of its last group, then its copy


class GpuBackend:
    """The read back end of cupy outputs (see :class:`~linumpy.io.engine.backend.ReadBackend`).

    ``out`` is a C-contiguous cupy array of the plan's shape; ``streams`` one per slot;
    ``pool_before``: cupy's pool's used bytes before the read allocated (``new_output``: it then
    allocated ``out``). With ``host``, libzstd's threads decode every chunk instead
    (:class:`~linumpy.gpu.host_decode.HostDecoder`, chunks too large for nvCOMP).
    """

    name: ClassVar[Literal["gpu"]] = "gpu"

    @classmethod
    def check_output(cls, shape: tuple[int, ...], dtype: np.dtype, source: str) -> None:
        """Refuse an output larger than the device's free memory."""
        check_free(output_nbytes(shape, dtype), source, shape, dtype, "the output")

    @classmethod
    def obstacle(cls, plan: ReadPlan) -> str | None:
        """What the GPU back end cannot produce (see :func:`fast_path_obstacle`)."""
        return fast_path_obstacle(plan)

    @classmethod
    def through_zarr(cls, array: Any, region: Region, out: cupy.ndarray | None) -> Any:
        """zarr's own read inside :func:`gpu_zarr_context` (reopened there: codecs are fixed at
        open)."""
        with gpu_zarr_context():
            result = zarr.open_array(store=array.store, path=array.path, mode="r")[region]
        if out is not None:
            out[...] = result
            return out
        return result

    @classmethod
    def choose_reader(cls, plan: ReadPlan, settings: Settings) -> tuple[str, str]:
        """kvikio or pread, by the ``fetch`` setting; the CPU back end's own reads for chunks
        that libzstd decodes (:mod:`linumpy.gpu.host_decode`)."""
        limit = nvcomp_chunk_limit()
        if decodes_on_host(plan, limit):
            return "pread", (
                f"chunks of {format_size(plan.chunk_nbytes)}, above the {format_size(limit)} "
                "nvCOMP is given: libzstd threads decode them, each chunk copied up as decoded"
            )
        return choose_reader(settings.fetch, settings.io_threads)

    @classmethod
    def open(
        cls, plan: ReadPlan, settings: Settings, reader: str, out: cupy.ndarray | None
    ) -> GpuBackend:
        """Fit the read's buffers in the device's free memory, allocate the output on the first
        stream (for chunks too large for nvCOMP: for libzstd's threads)."""
        import cupy

        dtype = plan.dtype.newbyteorder("=")
        if out is not None:
            check_out(out, plan.shape, dtype)
        if decodes_on_host(plan, nvcomp_chunk_limit()):
            host = open_host_decode(plan, settings, out, dtype)
            return cls(plan, settings, host.out, [], reader=reader, host=host)
        settings = check_device_memory(plan, settings, out is None, dtype, STREAMS)
        streams = worker_streams(STREAMS)
        pool_before = cupy.get_default_memory_pool().used_bytes()
        with streams[0]:
            result = cupy.empty(plan.shape, dtype=dtype) if out is None else out
        after_current_stream(streams)
        return cls(
            plan,
            settings,
            result,
            streams,
            reader=reader,
            pool_before=pool_before,
            new_output=out is None,
        )

    def __init__(
        self,
        plan: ReadPlan,
        settings: Settings,
        out: cupy.ndarray,
        streams: list[cupy.cuda.Stream],
        *,
        reader: str = "pread",
        pool_before: int | None = None,
        new_output: bool = False,
        host: HostDecoder | None = None,
    ) -> None:
        self.plan = plan
        self.out = out
        self.reader = reader
        self._settings = settings
        self._host = host
        if host is not None:  # its threads hold the read's buffers; the run loop is not used
            self.slots, self.max_decode_bytes, self.size_order = 1, 0, False
            self.phases = host.phases
            return
        import cupy

        self._pool = cupy.get_default_memory_pool()
        self._pool_before = self._pool.used_bytes() if pool_before is None else pool_before
        self._out_nbytes = plan.out_nbytes if new_output else 0
        # At least two staging slots: the run loop reads group k+1 while group k is still being
        # checked and copied, so one slot alone would be overwritten under its own copy.
        self.slots = max(2, len(streams))
        self.max_decode_bytes = nvcomp_chunk_limit()
        self._geometry = geometry(plan)
        self._slot_nbytes = align_up(plan.chunk_nbytes, _SLOT_ALIGN)
        self._slots = [_Slot(streams[i % len(streams)]) for i in range(self.slots)]
        self._checks = ReadChecks.for_read(plan, streams[0])
        self._lease = PinnedLease()
        self._device_id = cupy.cuda.runtime.getDevice()
        self._cpu_share = CPU_SHARE
        #: Whether the run reads the best-compressed chunks first (:data:`SIZE_ORDER_MIN_CHUNK`).
        self.size_order = plan.chunk_nbytes >= SIZE_ORDER_MIN_CHUNK
        self._staging_room = 0  # the most compressed bytes a group may hold
        self._decoded_room = 0  # the most decoded bytes a group may hold
        self.phases = dict.fromkeys(
            ("pinned", "cpu_queue", "device_alloc", "nvcomp", "scatter"), 0.0
        )
        self._finisher: ThreadPoolExecutor | None = None
        fill = np.array([plan.fill_value], dtype=plan.stored_dtype).view(np.uint8)
        with streams[0]:
            self._fill = cupy.asarray(fill)

    def execute(self) -> Stats:
        """Read the plan: through the run loop, nvCOMP decoding its groups; with ``host``, by
        libzstd's threads reading their own chunks."""
        if self._host is not None:
            return self._host.read_files()
        return run(self.plan, self, reader=self.reader, threads=self._settings.io_threads)

    def budget(self, sizes: np.ndarray) -> GroupBudget:
        """How the run loop groups the chunks (a slot's share of memory), and :data:`CPU_SHARE`
        as the tail that libzstd decodes."""
        settings = self._settings
        largest = int(sizes.max()) if len(sizes) else 0
        per_slot = max(settings.scratch_bytes // self.slots, largest + self._slot_nbytes)
        compressed = max(pinned_allowance() // self.slots, largest)
        count_moved(int(sizes.sum()))
        overlap = int(sizes.sum()) >= _OVERLAP_MIN_BYTES
        self._staging_room = min(compressed, per_slot)
        self._decoded_room = per_slot
        # One group per stream, of equal sizes: a tapered split (a small first group, halved
        # groups at the end) leaves its last groups waiting for busy streams, each call costing
        # nvCOMP's latency (docs/gpu_guide.md, "Measurements behind the GPU defaults": equal
        # groups).
        groups = self.slots if overlap else 1
        # Frames too large for nvCOMP (it decodes one frame serially, however many run beside
        # it) all go to libzstd threads, which decode them into pinned memory for one copy.
        tail = 1.0 if self.plan.chunk_nbytes > self.max_decode_bytes else self._cpu_share
        return GroupBudget(min(compressed, per_slot), per_slot, groups, tail)

    def staging(self, slot: int, nbytes: int) -> np.ndarray:
        """The slot's pinned buffer, once its last copy to the device is done."""
        state = self._slots[slot]
        if state.cpu_done is not None:
            done, state.cpu_done = state.cpu_done, None
            done.result()
        if state.copied is not None:
            state.copied.synchronize()
        mark = time.perf_counter()
        state.staging = self._lease.get("staging", slot, max(nbytes, ALIGN), self._staging_room)
        self.phases["pinned"] += time.perf_counter() - mark
        return state.staging

    def fill(self, entries: np.ndarray) -> None:
        """Queue the fill value into the output of chunks that are not stored."""
        stream = self._slots[0].stream
        table = scatter_table(
            self._geometry,
            np.zeros(0, dtype=np.int64),
            np.asarray(entries, dtype=np.int64),
            sources=np.zeros(0, dtype=np.int64),
            out_ptr=self.out.data.ptr,
            fill_ptr=self._fill.data.ptr,
        )
        launch_scatter(self._geometry, table, stream)

    def _device(self, state: _Slot, nbytes: int) -> Any:
        import cupy

        if state.device is None or state.device.nbytes < nbytes:
            with state.stream:
                state.device = None  # back to the pool first: stream-ordered reuse
                state.device = cupy.empty(nbytes, dtype=np.uint8)
        return state.device

    def crc32c_on_device(self, group: Group) -> bool:
        """Whether the group's crc32c is checked on the device (see :class:`ReadChecks`)."""
        return self._checks.on_device(group)

    def submit(self, fetched: Fetched) -> None:
        """Queue the group: nvCOMP on its slot's stream, or libzstd threads for the read's tail."""
        if fetched.group.tail:
            self._submit_cpu(fetched)
        else:
            self._submit_gpu(fetched)

    def _submit_cpu(self, fetched: Fetched) -> None:
        """Decode the group with libzstd threads into pinned memory, then copy it to the slot's
        device buffer and scatter it from there (libzstd verifies stored checksums)."""
        state = self._slots[fetched.slot]
        n = len(fetched.group.entries)
        mark = time.perf_counter()
        state.decoded = self._lease.get(
            "decoded", fetched.slot, n * self._slot_nbytes, self._decoded_room
        )
        self.phases["pinned"] += time.perf_counter() - mark
        mark = time.perf_counter()
        host = state.decoded
        if self._finisher is None:
            self._finisher = ThreadPoolExecutor(1, thread_name_prefix="linumpy-gpu-cpu-copy")
        already = dict(fetched.decoded)
        offsets, sizes = fetched.group.layout.offsets, fetched.sizes
        chunk = self.plan.chunk_nbytes
        codec = self.plan.codec

        def decode(first: int, last: int) -> None:
            for i in range(first, last):
                target = host[i * self._slot_nbytes : i * self._slot_nbytes + chunk]
                if i in already:
                    target[...] = already[i]
                    continue
                frame = fetched.staging[offsets[i] : offsets[i] + sizes[i]]
                try:
                    codec.decode(frame, key="", out=target, checked=True)
                except ChunkDecodeError as exc:
                    key = self.plan.key(int(fetched.group.entries[i]))
                    raise ChunkDecodeError(key, exc.reason) from None

        threads = self._settings.io_threads
        bounds = np.linspace(0, n, min(n, threads) + 1).astype(int).tolist()
        pool = decode_pool(threads)
        futures = [pool.submit(decode, a, b) for a, b in zip(bounds, bounds[1:])]
        state.cpu_done = self._finisher.submit(self._copy_decoded, fetched, futures)
        self.phases["cpu_queue"] += time.perf_counter() - mark

    def _copy_decoded(self, fetched: Fetched, futures: list[Future[None]]) -> None:
        """Once the group is decoded on the CPU: copy it to the device in one piece, scatter."""
        import cupy

        wait(futures)
        for future in futures:
            future.result()
        state = self._slots[fetched.slot]
        nbytes = len(fetched.group.entries) * self._slot_nbytes
        runtime = cupy.cuda.runtime
        with cupy.cuda.Device(self._device_id), state.stream:
            base = int(self._device(state, nbytes).data.ptr)
            runtime.memcpyAsync(
                base, state.decoded.ctypes.data, nbytes,  # type: ignore[union-attr]
                runtime.memcpyHostToDevice, state.stream.ptr,
            )  # fmt: skip
            state.copied = state.stream.record()
            sources = (
                base + np.arange(len(fetched.group.entries), dtype=np.int64) * self._slot_nbytes
            )
            self._scatter(fetched.group.entries, sources, state)

    def _scatter(self, entries: np.ndarray, sources: np.ndarray, state: _Slot) -> None:
        table = scatter_table(
            self._geometry,
            np.asarray(entries, dtype=np.int64),
            np.zeros(0, dtype=np.int64),
            sources=sources,
            out_ptr=self.out.data.ptr,
            fill_ptr=self._fill.data.ptr,
        )
        launch_scatter(self._geometry, table, state.stream)

    def _submit_gpu(self, fetched: Fetched) -> None:
        """Queue the group's copy, decode, checksum hashes and scatter on its slot's stream."""
        import cupy

        state = self._slots[fetched.slot]
        stream = state.stream
        layout = fetched.group.layout
        entries = fetched.group.entries
        n = len(entries)
        decoded_at = align_up(layout.nbytes, _SLOT_ALIGN)
        mark = time.perf_counter()
        device = self._device(state, decoded_at + n * self._slot_nbytes)
        self.phases["device_alloc"] += time.perf_counter() - mark
        base = int(device.data.ptr)
        slots = base + decoded_at + np.arange(n, dtype=np.int64) * self._slot_nbytes
        runtime = cupy.cuda.runtime
        with stream:
            runtime.memcpyAsync(
                base, fetched.staging.ctypes.data, layout.nbytes, runtime.memcpyHostToDevice,
                stream.ptr,
            )  # fmt: skip
            on_gpu = np.flatnonzero(fetched.verdicts != FRAME_NEEDS_CHECK)
            for i, data in fetched.decoded:
                runtime.memcpyAsync(
                    int(slots[i]), data.ctypes.data, data.nbytes, runtime.memcpyHostToDevice,
                    stream.ptr,
                )  # fmt: skip
            state.copied = stream.record()
            mark = time.perf_counter()
            if len(on_gpu):
                codec = self.plan.codec  # nvCOMP decodes its span of each chunk
                starts, sizes = codec.nvcomp_span(layout.offsets[on_gpu], fetched.sizes[on_gpu])
                pending = nvcomp.decode(
                    base + starts,
                    sizes,
                    slots[on_gpu],
                    np.full(len(on_gpu), self.plan.chunk_nbytes, dtype=np.int64),
                    stream=stream,
                    before_decode=self._checks.before_decode(fetched, on_gpu, stream),
                    algorithm=codec.NVCOMP,  # type: ignore[arg-type]
                )
                self._checks.decoded(pending, entries[on_gpu])
            checked = np.flatnonzero(fetched.verdicts == FRAME_CHECKSUM)
            if len(checked):
                self._checks.hash_content(fetched, checked, device, slots[checked] - base, stream)
            self.phases["nvcomp"] += time.perf_counter() - mark
            mark = time.perf_counter()
            self._scatter(entries, slots, state)
            self.phases["scatter"] += time.perf_counter() - mark

    def finish(self) -> None:
        """Wait for every stream, then check the crc32c verdicts of the device, nvCOMP's
        statuses and the stored checksums."""
        for state in self._slots:
            if state.cpu_done is not None:
                done, state.cpu_done = state.cpu_done, None
                done.result()
        try:
            for state in self._slots:
                state.stream.synchronize()
        except Exception as exc:  # a CUDA error: cupy's own types, which callers cannot expect
            raise ChunkDecodeError(
                self.plan.source,
                f"the GPU failed while decoding ({exc}); nvCOMP does not check the compressed "
                "blocks inside a frame, and a damaged chunk can do this, after which this "
                "process's CUDA context may be unusable. Read such data on the CPU",
            ) from exc
        self._checks.verify(self.phases)

    def synchronize(self) -> None:
        """Wait for the work queued on every stream (errors are logged: one is being raised)."""
        for state in self._slots:
            if state.cpu_done is not None:
                wait([state.cpu_done])
        for state in self._slots:
            try:
                state.stream.synchronize()
            except Exception:
                logger.exception("synchronizing a GPU read stream after an error failed")

    def close(self) -> None:
        """Stop the CPU decoding threads and give the pinned buffers back (after :meth:`finish`
        or :meth:`synchronize`: nothing may still copy from them)."""
        if self._host is not None:
            self._host.close()
            return
        if self._finisher is not None:
            self._finisher.shutdown()
        self._lease.close()

    def usage(self) -> dict[str, int]:
        """Device memory the read took beyond its output, and the pinned memory it used."""
        if self._host is not None:
            return self._host.usage()
        extra = self._pool.used_bytes() - self._pool_before - self._out_nbytes
        return {"device_extra_bytes": max(0, int(extra)), "pinned_bytes": self.pinned_bytes()}

    def pinned_bytes(self) -> int:
        """Pinned memory held by the slots' staging buffers."""
        buffers = [b for s in self._slots for b in (s.staging, s.decoded) if b is not None]
        return sum(b.nbytes for b in buffers)
