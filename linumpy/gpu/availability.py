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
    """Import cupy and load its lazy ``cupyx`` whole, once per process, one thread at a time.

    Two threads, one loading the lazy module while another imports one of its submodules, can
    each hold the lock the other waits for; called before a command's threads start, this
    leaves them an ordinary module.
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
    """Raise :class:`GPUUnavailableError` naming ``what`` and why, when the GPU is unusable."""
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

    Blocking streams: they wait for zarr's and cupy's copies on the legacy default stream, and
    memory freed after such work is not reused early. Merged codec calls running at once each
    get a stream of their own.
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

    cupy's pool hands a block freed on a stream to the next allocation on that stream at once,
    while kernels queued there may still read it: an output allocated there and filled from other
    streams would overwrite such a block under those kernels.
    """
    import cupy

    ready = cupy.cuda.get_current_stream().record()
    for stream in streams:
        stream.wait_event(ready)
    return ready
