"""Whether the GPU path can run here, and the CUDA streams it runs on.

cupy, nvCOMP and kvikio are imported by the GPU modules inside functions, never at import time:
a CPU-only run imports none of them and creates no CUDA context.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any

from linumpy.errors import GPU_INSTALL_HINT, GPUUnavailableError

if TYPE_CHECKING:
    import cupy

__all__: list[str] = []

_cupyx_lock = threading.Lock()
_cupyx_loaded = threading.Event()


def load_cupy() -> ModuleType:
    """Import cupy and load ``cupyx`` whole, once per process, one thread at a time.

    cupy registers ``cupyx`` as a lazy module (``importlib.util.LazyLoader``) and imports its
    submodules at the first use of some operations. When one thread loads the lazy module while
    another imports one of its submodules, each can hold the lock the other waits for, and both
    threads hang. Called before a command or a read starts its threads, this leaves them an
    ordinary module.

    Raises
    ------
    ImportError
        When cupy (or its ``cupyx``) cannot be imported.
    """
    import cupy

    if not _cupyx_loaded.is_set():
        with _cupyx_lock:
            if not _cupyx_loaded.is_set():
                import cupyx  # noqa: F401  # importing the lazy module executes it

                _cupyx_loaded.set()
    return cupy


def gpu_unavailable_reason() -> str | None:
    """Why the GPU path cannot run here (cupy, nvCOMP or a CUDA device missing), or None.

    Examples
    --------
    >>> reason = gpu_unavailable_reason()
    >>> reason is None or isinstance(reason, str)
    True

    On a machine without cupy:

    >>> gpu_unavailable_reason()  # doctest: +SKIP
    "cupy is not installed (No module named 'cupy')"
    """
    try:
        cupy = load_cupy()
    except ImportError as exc:
        return f"cupy is not installed ({exc})"
    try:
        importlib.import_module("nvidia.libnvcomp")
    except ImportError as exc:
        return f"nvidia-nvcomp is not installed ({exc})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as exc:  # cupy raises several CUDA error types when no driver is present
        return f"no usable CUDA device ({exc})"
    return None


def require_gpu(what: str) -> None:
    """Raise :class:`GPUUnavailableError` naming ``what`` and the reason, when the GPU is unusable.

    Examples
    --------
    >>> try:
    ...     require_gpu("read_volume(gpu=True)")
    ... except GPUUnavailableError as exc:
    ...     print(str(exc).split(":")[0])  # doctest: +SKIP
    read_volume(gpu=True) needs an NVIDIA GPU with cupy and nvCOMP
    """
    reason = gpu_unavailable_reason()
    if reason is not None:
        raise GPUUnavailableError(
            f"{what} needs an NVIDIA GPU with cupy and nvCOMP: {reason}; {GPU_INSTALL_HINT}, "
            "on a machine with an NVIDIA driver"
        )


_local = threading.local()


@contextmanager
def codec_stream() -> Iterator[cupy.cuda.Stream]:
    """Lend one of the calling thread's streams for the zarr codec, on its current device.

    Blocking streams: they wait for earlier work on the legacy default stream, where zarr and
    cupy copy chunk bytes to the device, and memory freed after such work is not reused early.
    Merged codec calls that run at once on one event loop (``CallMerger.max_in_flight``) each
    get a stream of their own; a thread makes no more streams than it had calls at once.
    """
    import cupy

    device = cupy.cuda.runtime.getDevice()
    idle = _local.__dict__.setdefault("codec", {}).setdefault(device, [])
    stream = idle.pop() if idle else cupy.cuda.Stream(non_blocking=False)
    try:
        yield stream
    finally:
        idle.append(stream)


def worker_streams(count: int) -> list[cupy.cuda.Stream]:
    """``count`` streams of the calling thread on its current device, for concurrent groups."""
    import cupy

    device = cupy.cuda.runtime.getDevice()
    streams = _local.__dict__.setdefault("workers", {}).setdefault(device, [])
    while len(streams) < count:
        streams.append(cupy.cuda.Stream(non_blocking=True))
    return streams[:count]


def after_current_stream(streams: list[cupy.cuda.Stream]) -> Any:
    """Make ``streams`` wait for the work queued so far on the calling thread's current stream;
    return the event they wait for.

    cupy's memory pool hands a block freed on a stream back to the next allocation on that
    stream at once, while kernels queued on it may still read the block. A read that allocates
    its output there and fills it from non-blocking streams would overwrite such a block under
    those kernels (a GPU stitch's tiles were read into memory a block of the other dask thread
    was still averaging), so the read's streams first wait for the current stream.
    """
    import cupy

    ready = cupy.cuda.get_current_stream().record()
    for stream in streams:
        stream.wait_event(ready)
    return ready
