"""A GPU command's first-use costs, paid in background threads while its modules import.

A ``--use-gpu`` command spends a second or more importing modules before its first read, which
would then create the CUDA context, load nvCOMP and the kernels and page-lock its staging: steps
that wait on the driver and the disk, not the interpreter. :func:`warm_up_in_background` runs
them in a daemon thread (failures are logged at debug level and left for the read to report);
:func:`create_context_in_background` creates the context earlier still, through the driver
library with :mod:`ctypes`, while the main thread loads cupy (whose runtime then finds it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__: list[str] = []

logger = logging.getLogger(__name__)

_started = threading.Event()
_context_started = threading.Event()

#: The CUDA driver library, by platform: ``sys.platform`` prefix and file name.
_DRIVER_LIBRARIES = (("win", "nvcuda.dll"), ("", "libcuda.so.1"))


def create_context_in_background() -> threading.Thread | None:
    """Start retaining device 0's primary CUDA context (cupy's default device) in a daemon
    thread, without cupy, once per process; None when it was already started."""
    return _start_once(_context_started, _retain_primary_context, "linumpy-cuda-context")


def _start_once(
    flag: threading.Event, target: Callable[[], None], name: str
) -> threading.Thread | None:
    """``target`` in a new daemon thread, unless ``flag`` says it was started already."""
    if flag.is_set():
        return None
    flag.set()
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def _retain_primary_context() -> None:
    import ctypes
    import sys

    started = time.perf_counter()
    name = next(lib for prefix, lib in _DRIVER_LIBRARIES if sys.platform.startswith(prefix))
    try:
        driver = ctypes.CDLL(name)
    except OSError as exc:
        logger.debug("CUDA context not created ahead: %s", exc)
        return
    device, context = ctypes.c_int(), ctypes.c_void_p()
    steps = (
        ("cuInit", lambda: driver.cuInit(0)),
        ("cuDeviceGet", lambda: driver.cuDeviceGet(ctypes.byref(device), 0)),
        (
            "cuDevicePrimaryCtxRetain",
            lambda: driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), device),
        ),
    )
    for step, call in steps:
        status = call()
        if status != 0:  # CUDA_SUCCESS
            logger.debug("CUDA context not created ahead: %s returned %d", step, status)
            return
    logger.debug("CUDA context created ahead in %.2f s", time.perf_counter() - started)


def warm_up_in_background() -> threading.Thread | None:
    """Start the warm-up thread (once per process); None when it was already started."""
    return _start_once(_started, _warm_up, "linumpy-gpu-warm-up")


def _warm_up() -> None:
    started = time.perf_counter()
    try:
        from linumpy.gpu.availability import load_cupy

        cupy = load_cupy()
        cupy.empty(1)  # the first allocation creates the CUDA context, or finds it created
        cupy.cuda.runtime.deviceSynchronize()
        _page_lock_staging()  # first: locked by the time the command's metadata reads end
        _load_libraries_and_kernels()
        _nvcomp_round_trip()
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
    from linumpy.gpu.backend import STREAMS
    from linumpy.gpu.pinned_buffers import pinned_allowance, prestage
    from linumpy.parallel.block_sizes import DEFAULT_GPU_THREADS

    slots = max(2, STREAMS)  # as the GPU back end's staging slots
    # a job's reads run on DEFAULT_GPU_THREADS threads at once, each with staging of its own
    prestage("staging", slots, pinned_allowance() // slots, DEFAULT_GPU_THREADS)
