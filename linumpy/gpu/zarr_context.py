"""zarr itself on the GPU: :func:`gpu_zarr_context`, and :func:`describe_gpu` for people."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import zarr

from linumpy.errors import GPUUnavailableError
from linumpy.gpu.availability import gpu_unavailable_reason, require_gpu
from linumpy.io.engine.fetch_kvikio import kvikio_unusable_reason
from linumpy.io.engine.memory import format_size

__all__: list[str] = []


_context_lock = threading.Lock()
_context_depth = 0
_context_stack: ExitStack | None = None


@contextmanager
def gpu_zarr_context() -> Iterator[None]:
    """Make zarr return cupy arrays and run its ``zstd`` codec on the GPU (nvCOMP) inside the block.

    Arrays opened inside the block (zarr fixes an array's codecs when it opens it) return
    ``cupy.ndarray`` slices and accept cupy arrays on write, encoded on the GPU. Stored bytes stay
    in host memory until the codec uploads them a batch at a time. zarr's config is process-wide:
    it is applied when the first such block is entered (by any thread) and restored when the last
    one exits, so blocks nest and overlap across threads safely.

    Raises
    ------
    GPUUnavailableError
        When cupy, nvCOMP or a CUDA device is missing.
    """
    from linumpy.gpu.nvcomp_zstd import gpu_zstd_config, register_nvcomp_zstd
    from linumpy.gpu.zarr_buffers import host_bytes_config

    require_gpu("gpu_zarr_context()")
    if not register_nvcomp_zstd():
        raise GPUUnavailableError("the nvCOMP zstd codec could not be registered with zarr")
    global _context_depth, _context_stack
    with _context_lock:
        if _context_depth == 0:
            stack = ExitStack()
            stack.enter_context(zarr.config.set(host_bytes_config() | gpu_zstd_config()))
            _context_stack = stack
        _context_depth += 1
    try:
        yield
    finally:
        with _context_lock:
            _context_depth -= 1
            if _context_depth == 0 and _context_stack is not None:
                _context_stack.close()
                _context_stack = None


def describe_gpu() -> dict[str, str]:
    """What the GPU read path would use here: device, CUDA versions, libraries, GPUDirect Storage.

    Returns
    -------
    dict
        Human-readable values keyed ``device``, ``driver``, ``runtime``, ``cupy``, ``nvcomp``,
        ``kvikio`` and ``gds``; an entry says "missing" or why it is unknown.

    Examples
    --------
    >>> sorted(describe_gpu())
    ['cupy', 'device', 'driver', 'gds', 'kvikio', 'nvcomp', 'runtime']

    On a machine without cupy:

    >>> describe_gpu()["device"]  # doctest: +SKIP
    "unavailable: cupy is not installed (No module named 'cupy')"
    """
    info = {"device": "none", "driver": "-", "runtime": "-", "cupy": "missing"}
    info |= {"nvcomp": "missing", "kvikio": "missing", "gds": "-"}
    reason = gpu_unavailable_reason()
    if reason is not None:
        info["device"] = f"unavailable: {reason}"
    try:
        import cupy

        info["cupy"] = cupy.__version__
        if reason is None:
            runtime = cupy.cuda.runtime
            device = runtime.getDevice()
            props = runtime.getDeviceProperties(device)
            free, total = runtime.memGetInfo()
            name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
            info["device"] = f"{device}: {name}, {format_size(total)} ({format_size(free)} free)"
            info["driver"] = _cuda_version(runtime.driverGetVersion())
            info["runtime"] = _cuda_version(runtime.runtimeGetVersion())
    except ImportError:
        pass
    try:
        from nvidia import nvcomp

        info["nvcomp"] = str(nvcomp.__version__)
    except ImportError:
        pass
    if reason is None:
        kvikio_reason = kvikio_unusable_reason()
        if kvikio_reason is None:
            import kvikio
            import kvikio.cufile_driver
            import kvikio.defaults

            info["kvikio"] = kvikio.__version__
            try:
                gds = bool(kvikio.cufile_driver.get("is_gds_available"))
            except Exception as exc:  # cuFile missing or too old to say
                gds = False
                info["kvikio"] += f" (cuFile: {exc})"
            compat = kvikio.defaults.is_compat_mode_preferred()
            info["gds"] = (
                "compat mode (POSIX reads by kvikio's thread pool)"
                if compat or not gds
                else "GPUDirect Storage live"
            )
        else:
            info["kvikio"] = kvikio_reason
    return info


def _cuda_version(version: int) -> str:
    return f"{version // 1000}.{version % 1000 // 10}"
