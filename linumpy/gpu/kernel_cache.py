"""linumpy's own CUDA kernels, compiled once per machine and then loaded without a compiler.

cupy's ``RawKernel`` looks its kernels up in cupy's on-disk cache, but every process first runs
NVRTC on an empty program for each set of compiler options (the cache key holds the compiler's
output), a cost paid on the critical path of a process's first read. Here a kernel's
source is compiled by ``cuda.core`` (NVIDIA's ``cuda-core`` package, in linumpy's ``gpu`` extras)
into a cubin kept under ``$XDG_CACHE_HOME/linumpy/kernels`` (by default
``~/.cache/linumpy/kernels``); a later process loads that file with ``cupy.RawModule(path=...)``,
about a millisecond. Without ``cuda.core``, or without a writable cache folder, cupy compiles
and caches the kernel as it always does.

cupy and ``cuda.core`` are imported inside the functions: importing this module touches no GPU
library.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from linumpy.settings import cache_dir

if TYPE_CHECKING:
    import cupy

__all__: list[str] = []

logger = logging.getLogger(__name__)

_lock = threading.Lock()
# (source, name, std, device) -> (module or None, kernel); a module is kept with its function.
_loaded: dict[tuple[str, str, str | None, int], tuple[Any, cupy.RawKernel]] = {}


def raw_kernel(source: str, name: str, *, std: str | None = None) -> cupy.RawKernel:
    """The ``extern "C"`` kernel ``name`` of ``source``, ready on the current device.

    Loaded from linumpy's cubin cache when it holds it (compiled into it first otherwise);
    loaded once per process and device, also when several threads ask at once.

    Parameters
    ----------
    source
        CUDA C++ source of the kernel (it must not include cupy's headers).
    name
        The kernel's name, declared ``extern "C"``.
    std
        The C++ dialect to compile with (e.g. ``"c++17"``), or the compiler's default.

    Returns
    -------
    cupy.RawKernel
        Called as cupy's kernels are: ``kernel(grid, block, args)`` on the current stream.

    Examples
    --------
    >>> from linumpy.gpu.kernel_cache import raw_kernel
    >>> kernel = raw_kernel('extern "C" __global__ void nothing() {}', "nothing")  # doctest: +SKIP
    >>> kernel((1,), (1,), ())  # doctest: +SKIP
    """
    import cupy

    key = (source, name, std, cupy.cuda.runtime.getDevice())
    found = _loaded.get(key)
    if found is None:
        with _lock:
            found = _loaded.get(key)
            if found is None:
                found = _load(source, name, std)
                _loaded[key] = found
    return found[1]


def cubin_path(
    source: str, arch: str, std: str | None = None, toolchain: str | None = None
) -> Path:
    """Where the cubin of ``source`` for ``arch`` (``"sm_90"``) is cached.

    Its name is a SHA-256 of the source, the architecture, the dialect and ``toolchain`` (by
    default the versions of ``cuda.core``, the CUDA runtime and the driver), so that a new
    toolkit compiles again.

    Examples
    --------
    >>> from linumpy.gpu.kernel_cache import cubin_path
    >>> path = cubin_path("__global__ void k() {}", "sm_90", toolchain="cuda.core 1.2.0")
    >>> path.parent.name, path.suffix
    ('kernels', '.cubin')
    """
    toolchain = _toolchain() if toolchain is None else toolchain
    key = hashlib.sha256(f"{toolchain}\0{arch}\0{std}\0{source}".encode()).hexdigest()
    return cache_dir("kernels") / f"{key[:32]}-{arch}.cubin"


@functools.cache
def _toolchain() -> str:
    """The versions a cubin depends on: ``cuda.core`` (its NVRTC), the runtime and the driver."""
    from importlib import metadata

    import cupy

    try:
        core = metadata.version("cuda-core")
    except metadata.PackageNotFoundError:
        core = "none"
    runtime = cupy.cuda.runtime
    versions = (runtime.runtimeGetVersion(), runtime.driverGetVersion())
    return f"cuda.core {core}, runtime {versions[0]}, driver {versions[1]}"


def _arch() -> str:
    import cupy

    return f"sm_{cupy.cuda.Device().compute_capability}"


def _load(source: str, name: str, std: str | None) -> tuple[Any, cupy.RawKernel]:
    import cupy

    arch = _arch()
    path = cubin_path(source, arch, std)
    if path.is_file():
        try:
            module = cupy.RawModule(path=os.fspath(path))
            return module, module.get_function(name)
        except cupy.cuda.driver.CUDADriverError as exc:  # a damaged file: compile it again
            logger.debug("%s: not loadable (%s); compiling the kernel again", path, exc)
    cubin = _compile(source, arch, std)
    if cubin is not None and _store(path, cubin):
        module = cupy.RawModule(path=os.fspath(path))
        return module, module.get_function(name)
    kernel = cupy.RawKernel(source, name, options=(f"--std={std}",) if std else ())
    kernel.compile()
    return None, kernel


def _compile(source: str, arch: str, std: str | None) -> bytes | None:
    """The cubin of ``source`` from ``cuda.core``'s NVRTC, or None when it is not installed."""
    try:
        from cuda.core import Program, ProgramOptions
    except ImportError:
        try:
            from cuda.core.experimental import Program, ProgramOptions
        except ImportError:
            return None

    options = ProgramOptions(arch=arch, std=std) if std else ProgramOptions(arch=arch)
    return bytes(Program(source, "c++", options).compile("cubin").code)


def _store(path: Path, cubin: bytes) -> bool:
    """Write ``cubin`` to ``path`` whole (another process may be reading the folder)."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(cubin)
        os.replace(partial, path)
    except OSError as exc:  # a read-only or full cache: cupy's own compiler and cache serve
        logger.debug("%s: not written (%s)", path, exc)
        with contextlib.suppress(OSError):
            partial.unlink()
        return False
    return True
