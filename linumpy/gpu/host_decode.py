"""GPU reads of chunks too large for nvCOMP: libzstd decodes them on the host's threads, and each
thread copies its chunk up and scatters it on a stream of its own while the others decode.

nvCOMP decodes a frame on one thread block, so a frame of tens of MiB takes it about half a second
(docs/gpu_guide.md). Chunks above :data:`~linumpy.io.engine.plan.GPU_CHUNK_BYTES` are read and
decoded as a CPU read does (same checksums and errors), so the upload of one chunk overlaps the
decoding of the others and the read takes about the time of a CPU read.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from linumpy.io.engine.backend import Stats
from linumpy.io.engine.cpu import CpuBackend
from linumpy.io.engine.plan import ReadPlan, chunk_view

__all__: list[str] = []


def decodes_on_host(plan: ReadPlan, max_decode_bytes: int) -> bool:
    """Whether every chunk of ``plan`` is larger than nvCOMP is given and stored in native byte
    order (swapped chunks keep the GPU back end, whose scatter swaps them)."""
    return plan.chunk_nbytes > max_decode_bytes and plan.stored_dtype.isnative


class HostDecoder(CpuBackend):
    """The CPU back end's reads and libzstd decodes into the cupy ``out`` (see the module); each
    of ``threads`` holds one decoded chunk on the host and one on the device, and its stream
    waits for ``ready``, recorded where ``out`` was allocated."""

    in_place = False

    def __init__(self, plan: ReadPlan, *, threads: int, out: Any, ready: Any = None) -> None:
        super().__init__(plan, threads=threads, out=out)
        self._ready = ready
        self._streams: list[Any] = []
        self._streams_lock = threading.Lock()

    def _device_chunk(self) -> tuple[Any, Any, Any]:
        """This thread's stream, device buffer and its chunk-shaped view (made on first use)."""
        device = getattr(self._local, "device", None)
        if device is None:
            import cupy

            stream = cupy.cuda.Stream(non_blocking=True)
            if self._ready is not None:
                stream.wait_event(self._ready)
            with stream:
                flat = cupy.empty(self.plan.chunk_nbytes, dtype=np.uint8)
            device = self._local.device = (stream, flat, chunk_view(flat, self.plan))
            with self._streams_lock:
                self._streams.append(stream)
        return device

    def _scatter(self, entry: int, chunk: np.ndarray, direct: int) -> None:
        """Copy a decoded chunk (host, chunk-shaped) to this thread's device buffer, then into
        the output on this thread's stream."""
        stream, flat, view = self._device_chunk()
        # the bytes in the chunk's memory order (F for some zarr v2 arrays), as ``view`` reads them
        flat.set(np.ravel(chunk, order="A").view(np.uint8), stream=stream)
        with stream:
            if direct == -2:  # partly outside the region
                out_sel, chunk_sel = self._selections(entry)
                self.out[out_sel] = view[chunk_sel]
            else:
                self.out[self._out_selection(entry)] = view

    def _fill_entry(self, entry: int) -> None:
        """Set one chunk's part of the output to the fill value, on this thread's stream (which
        waited for the output's allocation and is synchronized before the read returns)."""
        stream, _, _ = self._device_chunk()
        with stream:
            super()._fill_entry(entry)

    def read_files(self) -> Stats:
        """Read, decode and copy up every chunk (see :meth:`CpuBackend.read_files`), then wait
        for the threads' streams."""
        try:
            stats = super().read_files()
        finally:
            for stream in self._streams:
                stream.synchronize()
        stats.n_cpu_decoded = stats.n_reads
        return stats

    def usage(self) -> dict[str, int]:
        """The device buffers of the threads (one chunk each)."""
        return {"device_extra_bytes": len(self._streams) * self.plan.chunk_nbytes}


_decode_pools: dict[int, ThreadPoolExecutor] = {}
_decode_pools_lock = threading.Lock()


def decode_pool(threads: int) -> ThreadPoolExecutor:
    """The process's ``threads`` libzstd threads for GPU reads' CPU decodes, kept for later
    reads so that none pays for starting them."""
    with _decode_pools_lock:
        pool = _decode_pools.get(threads)
        if pool is None:
            pool = _decode_pools[threads] = ThreadPoolExecutor(
                threads, thread_name_prefix="linumpy-gpu-cpu-decode"
            )
        return pool
