"""linumpy's own CUDA kernels, compiled once per machine and then loaded without a compiler.

cupy's ``RawKernel`` runs NVRTC in every process before it finds its on-disk cache, a cost on the
critical path of a first read. Here ``cuda.core`` (in the ``gpu`` extras) compiles a kernel into
a cubin under ``$XDG_CACHE_HOME/linumpy/kernels``, which later processes load in about a
millisecond. Without ``cuda.core`` or a writable cache, cupy compiles and caches as it always does.
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
# (source, name, device) -> (module or None, kernel); a module is kept with its function.
_loaded: dict[tuple[str, str, int], tuple[Any, cupy.RawKernel]] = {}


def raw_kernel(source: str, name: str) -> cupy.RawKernel:
    """The ``extern "C"`` kernel ``name`` of ``source`` (no cupy headers), ready on the current
    device: loaded from the cubin cache (compiled into it first), once per process and device."""
    import cupy

    key = (source, name, cupy.cuda.runtime.getDevice())
    found = _loaded.get(key)
    if found is None:
        with _lock:
            found = _loaded.get(key)
            if found is None:
                found = _load(source, name)
                _loaded[key] = found
    return found[1]


def cubin_path(source: str, arch: str, toolchain: str | None = None) -> Path:
    """Where the cubin of ``source`` for ``arch`` (``"sm_90"``) is cached: named by a SHA-256 of
    both and of ``toolchain`` (by default :func:`_toolchain`), so that a new toolkit compiles
    again."""
    toolchain = _toolchain() if toolchain is None else toolchain
    key = hashlib.sha256(f"{toolchain}\0{arch}\0{source}".encode()).hexdigest()
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


def _load(source: str, name: str) -> tuple[Any, cupy.RawKernel]:
    import cupy

    arch = f"sm_{cupy.cuda.Device().compute_capability}"
    path = cubin_path(source, arch)
    if path.is_file():
        try:
            module = cupy.RawModule(path=os.fspath(path))
            return module, module.get_function(name)
        except cupy.cuda.driver.CUDADriverError as exc:  # a damaged file: compile it again
            logger.debug("%s: not loadable (%s); compiling the kernel again", path, exc)
    cubin = _compile(source, arch)
    if cubin is not None and _store(path, cubin):
        module = cupy.RawModule(path=os.fspath(path))
        return module, module.get_function(name)
    kernel = cupy.RawKernel(source, name)
    kernel.compile()
    return None, kernel


def _compile(source: str, arch: str) -> bytes | None:
    """The cubin of ``source`` from ``cuda.core``'s NVRTC, or None when it is not installed."""
    try:
        from cuda.core import Program, ProgramOptions
    except ImportError:
        try:
            from cuda.core.experimental import Program, ProgramOptions
        except ImportError:
            return None

    return bytes(Program(source, "c++", ProgramOptions(arch=arch)).compile("cubin").code)


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
