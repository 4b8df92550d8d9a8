"""GPU reads of chunks too large for nvCOMP: libzstd decodes them on the host's threads, and each
thread copies its chunk up and scatters it on a stream of its own while the others decode.

nvCOMP decodes a zstd frame on one thread block, so a frame of tens of MiB takes it about half a
second however many run beside it (docs/gpu_guide.md). Chunks above
:data:`~linumpy.io.engine.plan.GPU_CHUNK_BYTES` (16 MiB) are decoded by the CPU back end's
threads instead (:class:`HostDecoder`, which the GPU back end reads such plans with), as a CPU
read decodes them (same reads, checksums and errors): each thread
decodes into its own host buffer, copies it into its own device buffer (from pageable memory:
nothing is page-locked, and the copy returns once the host buffer may be reused) and scatters it
into the output with a copy kernel on its stream. So the upload of one chunk overlaps the
decoding of the others, and the read takes about the time of a CPU read.
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
    """Whether every chunk of ``plan`` is larger than nvCOMP is given to decode, and stored in
    native byte order (byte-swapped chunks keep the GPU back end, whose scatter swaps them:
    cupy has no arrays of swapped dtypes).

    Examples
    --------
    >>> import tempfile, zarr
    >>> from linumpy.io.engine.plan import plan_read
    >>> array = zarr.create_array(tempfile.mkdtemp() + "/a.zarr", shape=(64,), chunks=(32,),
    ...                           dtype="uint16")
    >>> decodes_on_host(plan_read(array), 32), decodes_on_host(plan_read(array), 64)
    (True, False)
    """
    return plan.chunk_nbytes > max_decode_bytes and plan.stored_dtype.isnative


class HostDecoder(CpuBackend):
    """The CPU back end's reads and libzstd decodes, into a cupy output (see the module): what
    the GPU back end (:class:`~linumpy.gpu.backend.GpuBackend`) reads such plans with.

    Parameters
    ----------
    plan
        The read plan.
    threads
        Decoding threads (each holds one decoded chunk on the host and one on the device).
    out
        The C-contiguous cupy output of the plan's shape and dtype.
    ready
        A CUDA event recorded where ``out`` was allocated: the threads' streams wait for it
        before they write (:func:`~linumpy.gpu.availability.after_current_stream`).

    Examples
    --------
    What :func:`~linumpy.gpu.gpu_read.open_host_decode` and the GPU back end do for such a plan:

    >>> out = cupy.empty(plan.shape, plan.dtype)  # doctest: +SKIP
    >>> decoder = HostDecoder(plan, threads=16, out=out, ready=after_current_stream([]))
    ... # doctest: +SKIP
    >>> stats = decoder.read_files(); decoder.close()  # doctest: +SKIP
    """

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

    def _synchronize_streams(self) -> None:
        for stream in self._streams:
            stream.synchronize()

    def read_files(self) -> Stats:
        """Read, decode and copy up every chunk (see :meth:`CpuBackend.read_files`), then wait
        for the threads' streams."""
        try:
            stats = super().read_files()
        finally:
            self._synchronize_streams()
        stats.n_cpu_decoded = stats.n_reads
        return stats

    def usage(self) -> dict[str, int]:
        """The device buffers of the threads (one chunk each)."""
        return {"device_extra_bytes": len(self._streams) * self.plan.chunk_nbytes}


_decode_pools: dict[int, ThreadPoolExecutor] = {}
_decode_pools_lock = threading.Lock()


def decode_pool(threads: int) -> ThreadPoolExecutor:
    """The process's libzstd threads for GPU reads' CPU decodes, ``threads`` of them.

    Kept for later reads, so that no read pays for starting its threads and their libzstd
    contexts' first allocations.

    Examples
    --------
    >>> decode_pool(2) is decode_pool(2)
    True
    """
    with _decode_pools_lock:
        pool = _decode_pools.get(threads)
        if pool is None:
            pool = _decode_pools[threads] = ThreadPoolExecutor(
                threads, thread_name_prefix="linumpy-gpu-cpu-decode"
            )
        return pool
