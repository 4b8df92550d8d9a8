"""kvikio in the fetch stage: whether it can read files here, its threads, and its reads
(``CuFile.pread``, no GIL). kvikio is imported inside the functions only.
"""

from __future__ import annotations

import functools
import os
import tempfile
import threading
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

import numpy as np

from linumpy.errors import ChunkDecodeError

__all__: list[str] = []

#: Files kept open at once by the kvikio reader (unsharded arrays have one file per chunk).
_OPEN_FILES = 256


def read_runs_kvikio(
    runs: Sequence[tuple[str, int, int, int, int]], buffer: np.ndarray, keys: Any
) -> None:
    """Read ``runs`` (path, file offset, bytes, buffer offset, first chunk) into ``buffer`` with
    kvikio, at most a window of files open at once; ``keys(i)`` names chunk ``i`` for errors.
    """
    import kvikio

    for first_run in range(0, len(runs), _OPEN_FILES):
        window = runs[first_run : first_run + _OPEN_FILES]
        files: dict[str, Any] = {}
        pending = []
        waited = 0
        try:
            for run_path, start, nbytes, at, first in window:
                handle = files.get(run_path)
                if handle is None:
                    try:
                        handle = files[run_path] = kvikio.CuFile(run_path, "r")
                    except (FileNotFoundError, RuntimeError) as exc:
                        raise ChunkDecodeError(keys(first), f"cannot open: {exc}") from None
                future = handle.pread(buffer[at : at + nbytes], nbytes, start)
                pending.append((first, start, nbytes, future))
            for first, start, nbytes, future in pending:
                waited += 1  # a future can be waited for once, even when that raises
                got = future.get()
                if got != nbytes:
                    raise ChunkDecodeError(
                        keys(first), f"file ends after {got} of {nbytes} bytes at offset {start}"
                    )
        finally:
            # Reads still in flight write into ``buffer``: let them finish before leaving.
            for _, _, _, future in pending[waited:]:
                with suppress(Exception):
                    future.get()
            for handle in files.values():
                handle.close()


@functools.cache
def kvikio_unusable_reason() -> str | None:
    """Say why kvikio cannot read files here, or None after a real ``CuFile.pread`` worked.

    kvikio imports on machines without a GPU driver and only fails when it reads, so a small
    temporary file is read once per process before kvikio is chosen.
    """
    try:
        import kvikio
    except ImportError as exc:
        return f"kvikio is not installed ({exc})"
    payload = bytes(range(256)) * 16
    try:
        with tempfile.NamedTemporaryFile() as probe:
            probe.write(payload)
            probe.flush()
            target = np.zeros(len(payload), dtype=np.uint8)
            with kvikio.CuFile(probe.name, "r") as handle:
                got = handle.pread(target, len(payload), 0).get()
    except Exception as exc:  # kvikio raises RuntimeError and others when CUDA/cuFile is missing
        return f"kvikio cannot read files here ({type(exc).__name__}: {exc})"
    if got != len(payload) or target.tobytes() != payload:
        return "kvikio's probe read returned wrong bytes"
    return None


_kvikio_threads_lock = threading.Lock()


def use_kvikio_threads(threads: int) -> None:
    """Give kvikio's thread pool ``threads`` threads (its default of 1 is several times slower).

    An explicit ``KVIKIO_NTHREADS`` in the environment is the user's choice and is left alone.
    """
    if "KVIKIO_NTHREADS" in os.environ:
        return
    import kvikio.defaults

    with _kvikio_threads_lock:
        if kvikio.defaults.get("num_threads") != threads:
            kvikio.defaults.set("num_threads", threads)
