"""Bytecode for the sources a benchmark's commands import, as an installed package has it.

A package installed with ``pip install --no-compile`` (as on a host prepared from wheels) has no
bytecode: each process then compiles its sources again, which a user's install does not, and a
timing would include the compiler.
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import subprocess
import sys

__all__ = ["compile_sources"]

_SOURCES = ("linumpy", "zarr", "numcodecs", "dask", "distributed", "scipy", "cupy")
_SOURCES += ("cupyx", "nvidia", "kvikio", "dask_cuda", "tifffile", "ome_zarr_models")


# Imported in a child process whose every module without bytecode is then compiled: the
# packages the commands reach through others (cuda.bindings, pandas, ...) included.
_SWEEP = (
    "import importlib, importlib.util, os, py_compile, sys\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        importlib.import_module(name)\n"
    "    except Exception:\n"
    "        pass\n"
    "for module in list(sys.modules.values()):\n"
    "    path = getattr(module, '__file__', None) or ''\n"
    "    if path.endswith('.py') and not os.path.exists(importlib.util.cache_from_source(path)):\n"
    "        try:\n"
    "            py_compile.compile(path, doraise=True)\n"
    "        except (OSError, py_compile.PyCompileError):\n"
    "            pass\n"
)
_SWEPT = (
    "linumpy.mosaic.pipeline", "linumpy.mosaic.registration", "linumpy.gpu.backend",
    "linumpy.gpu.zarr_io", "linumpy.gpu.encode", "linumpy.parallel", "cupyx.scipy.ndimage",
    "distributed", "dask_cuda", "PIL.Image",
)  # fmt: skip


def compile_sources() -> None:
    """Bytecode for the packages the commands import (where their folders are writable).

    Examples
    --------
    >>> compile_sources()  # doctest: +SKIP
    """
    subprocess.run([sys.executable, "-c", _SWEEP, *_SWEPT], capture_output=True, check=False)
    for name in _SOURCES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for folder in (spec.submodule_search_locations or []) if spec else []:
            if os.access(folder, os.W_OK):
                compileall.compile_dir(folder, quiet=2, workers=os.cpu_count() or 1)
