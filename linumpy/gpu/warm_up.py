"""A GPU command's first-use costs, paid in a background thread while its modules import.

A ``linum-*`` command run with ``--use-gpu`` spends a second or more importing Python modules
(dask, zarr, linumpy) before its first read, and then, on the critical path of that read, creates
the CUDA context, loads nvCOMP and the kernels, and page-locks its staging buffers: 0.3-0.5 s on
the H200 host (docs/gpu_guide.md, "Measurements behind the GPU defaults": first use). Those steps
wait on the driver and the disk much more than on the interpreter, so
:func:`warm_up_in_background` runs them in a daemon thread as soon as the command's arguments ask
for the GPU; whatever it has not finished when the read starts, the read does itself.

Nothing here is needed for correctness: each step is what the first read would do, any failure
is logged at debug level and left for the read to report.

A command imports cupy, with its lazy ``cupyx`` loaded whole
(:func:`~linumpy.gpu.availability.load_cupy`), before it starts this thread: once the command's
threads run, one importing a ``cupyx`` submodule while another loads the lazy module can each
hold the lock the other waits for (the warm-up and a block thread hung so on the H200 host,
2026-12-02), and a stitch's first block no longer loads ``cupyx`` itself (0.15-0.5 s).
"""

from __future__ import annotations

import logging
import threading
import time

__all__ = ["warm_up_in_background"]

logger = logging.getLogger(__name__)

_started = threading.Event()


def warm_up_in_background() -> threading.Thread | None:
    """Start the warm-up thread (once per process); None when it was already started.

    Examples
    --------
    >>> from linumpy.gpu.warm_up import warm_up_in_background
    >>> thread = warm_up_in_background()  # doctest: +SKIP
    """
    if _started.is_set():
        return None
    _started.set()
    thread = threading.Thread(target=_warm_up, name="linumpy-gpu-warm-up", daemon=True)
    thread.start()
    return thread


def _warm_up() -> None:
    started = time.perf_counter()
    try:
        from linumpy.gpu.availability import load_cupy

        cupy = load_cupy()
        cupy.empty(1)  # the first allocation creates the CUDA context
        cupy.cuda.runtime.deviceSynchronize()
        _load_libraries_and_kernels()
        _nvcomp_round_trip()
        _page_lock_staging()
    except Exception as exc:  # the read that follows reports what is wrong
        logger.debug("GPU warm-up stopped: %s", exc)
        return
    logger.debug("GPU warm-up done in %.2f s", time.perf_counter() - started)


def _load_libraries_and_kernels() -> None:
    import cupy

    from linumpy.gpu import nvcomp
    from linumpy.gpu._xxhash import _kernel as xxh64_kernel
    from linumpy.gpu.crc_device import _guard_kernel
    from linumpy.gpu.scatter import _scatter_kernel

    nvcomp.alignments()  # loads the library
    for word in (2, 4):  # uint16 volumes and float32 images
        _scatter_kernel(3, word, False)
    _guard_kernel()
    xxh64_kernel("xxh64_lanes")
    xxh64_kernel("xxh64_tiled")
    # cupy's own kernels: its first of a kind runs NVRTC once for its compiler options
    plane = cupy.zeros((2, 2), dtype=cupy.uint16)
    plane.astype(cupy.float32).sum(axis=0)


def _nvcomp_round_trip() -> None:
    """Encode, check and decode one small frame: CUDA loads nvCOMP's kernels at their first
    launch, and the first read or write would wait for it."""
    import cupy
    import numpy as np

    from linumpy.gpu import nvcomp
    from linumpy.gpu.crc_device import crc32c_device

    nbytes = 1 << 16
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        data = cupy.arange(nbytes // 4, dtype=cupy.uint32)
        frame = cupy.empty(nvcomp.max_encoded_size(nbytes), dtype=cupy.uint8)
        pending = nvcomp.encode(
            np.array([data.data.ptr]), np.array([nbytes]), np.array([frame.data.ptr]), stream=stream
        )
        stream.synchronize()
        pending.check()
        size = int(pending.sizes()[0])
        table = cupy.asarray(np.array([frame.data.ptr, size], dtype=np.int64))
        crc = cupy.empty(1, dtype=cupy.uint32)
        address = int(table.data.ptr)
        crc32c_device(address, address + 8, 1, int(crc.data.ptr), largest=size, stream=stream)
        out = cupy.empty(nbytes, dtype=cupy.uint8)
        pending = nvcomp.decode(
            np.array([frame.data.ptr]),
            np.array([size]),
            np.array([out.data.ptr]),
            np.array([nbytes]),
            stream=stream,
        )
        stream.synchronize()
        pending.check()


def _page_lock_staging() -> None:
    from linumpy import settings
    from linumpy.gpu.pinned_buffers import pinned_allowance, prestage
    from linumpy.parallel.block_sizes import DEFAULT_GPU_THREADS

    current = settings.get()
    slots = max(2, current.gpu_streams)  # as the GPU back end's staging slots
    # a job's reads run on DEFAULT_GPU_THREADS threads at once, each with staging of its own
    prestage("staging", slots, pinned_allowance(current.pinned_bytes) // slots, DEFAULT_GPU_THREADS)
