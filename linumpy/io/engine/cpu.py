"""`read_volume`: batched zstd zarr reads on the CPU (plan -> fetch -> decode -> scatter).

Chunks are fetched with plain positional reads and decoded by libzstd (numcodecs) in a thread
pool; both release the GIL. A chunk whose destination in the output is one contiguous block is
decoded straight into it; others are decoded into a per-thread scratch buffer and copied.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import zarr

from linumpy.errors import ChunkDecodeError, GPUUnavailableError, LinumpyError
from linumpy.io.omezarr import open_array
from linumpy.io.plan import (
    ChunkRead,
    ReadPlan,
    UnsupportedLayoutError,
    fill_missing,
    parse_region,
    plan_read,
    scatter_chunk,
)
from linumpy.io.zstd_frames import decode_zstd_cpu

__all__ = ["default_threads", "fetch_chunk", "read_plan", "read_volume"]

logger = logging.getLogger(__name__)

THREADS_ENV = "LINUMPY_IO_THREADS"


def default_threads() -> int:
    """Threads used for CPU reads: ``$LINUMPY_IO_THREADS``, else the CPUs this process may use.

    Examples
    --------
    >>> import os
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"LINUMPY_IO_THREADS": "4"}):
    ...     default_threads()
    4
    """
    value = os.environ.get(THREADS_ENV)
    if value is not None:
        try:
            threads = int(value)
        except ValueError:
            threads = 0
        if threads < 1:
            raise LinumpyError(f"{THREADS_ENV} must be a positive integer, got {value!r}")
        return threads
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def fetch_chunk(read: ChunkRead) -> bytes | None:
    """Read a chunk's compressed bytes, or return None when its file does not exist.

    Raises
    ------
    ChunkDecodeError
        When the file is shorter than the plan says (a truncated shard).

    Examples
    --------
    >>> import tempfile, zarr
    >>> from linumpy.io.plan import plan_read
    >>> path = tempfile.mkdtemp() + "/array.zarr"
    >>> array = zarr.create_array(path, shape=(4,), chunks=(2,), dtype="uint8")
    >>> array[:2] = 1
    >>> first, second = plan_read(array).reads
    >>> fetch_chunk(first).startswith(bytes.fromhex("28b52ffd"))  # the zstd magic number
    True
    >>> fetch_chunk(second) is None  # never written: reads as the fill value
    True
    """
    try:
        fd = os.open(read.path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        nbytes = os.fstat(fd).st_size - read.offset if read.nbytes < 0 else read.nbytes
        data = os.pread(fd, nbytes, read.offset)
        while len(data) < nbytes:
            more = os.pread(fd, nbytes - len(data), read.offset + len(data))
            if not more:
                raise ChunkDecodeError(
                    read.key, f"file ends after {len(data)} of {nbytes} bytes at {read.offset}"
                )
            data += more
        return data
    finally:
        os.close(fd)


def _direct_target(out: np.ndarray, plan: ReadPlan, read: ChunkRead) -> np.ndarray | None:
    """The output bytes a chunk can be decoded into in place, if its layout allows."""
    if plan.order != "C" or plan.stored_dtype != plan.dtype:
        return None
    if any(s.stop - s.start != n for s, n in zip(read.chunk_sel, plan.chunk_shape, strict=True)):
        return None
    target = out[(*read.out_sel, ...)]  # a view even for 0-d arrays
    return target.reshape(-1).view(np.uint8) if target.flags.c_contiguous else None


def read_plan(
    plan: ReadPlan, *, out: np.ndarray | None = None, threads: int | None = None
) -> np.ndarray:
    """Execute a read plan on the CPU.

    Parameters
    ----------
    plan
        From :func:`linumpy.io.plan.plan_read`.
    out
        A C-contiguous array of the plan's shape and dtype to fill; allocated when None.
    threads
        Worker threads; :func:`default_threads` when None.

    Returns
    -------
    numpy.ndarray
        The region's data.

    Examples
    --------
    >>> import numpy as np, tempfile, zarr
    >>> from linumpy.io.plan import plan_read
    >>> path = tempfile.mkdtemp() + "/array.zarr"
    >>> array = zarr.create_array(path, shape=(4, 4), chunks=(2, 2), dtype="int16")
    >>> array[:] = np.arange(16, dtype=np.int16).reshape(4, 4)
    >>> read_plan(plan_read(array, (slice(1, 3),)), threads=2)
    array([[ 4,  5,  6,  7],
           [ 8,  9, 10, 11]], dtype=int16)
    """
    if out is None:
        out = np.empty(plan.shape, dtype=plan.dtype)
    elif out.shape != plan.shape or out.dtype != plan.dtype or not out.flags.c_contiguous:
        raise LinumpyError(
            f"out must be a C-contiguous {plan.dtype} array of shape {plan.shape}, "
            f"got {out.dtype} {out.shape}"
        )
    for read in plan.missing:
        fill_missing(out, plan, read)
    local = threading.local()

    def work(read: ChunkRead) -> None:
        data = fetch_chunk(read)
        if data is None:
            fill_missing(out, plan, read)
            return
        target = _direct_target(out, plan, read)
        if target is not None:
            decode_zstd_cpu(data, key=read.key, out=target)
            return
        scratch = getattr(local, "scratch", None)
        if scratch is None:
            scratch = local.scratch = np.empty(plan.chunk_nbytes, dtype=np.uint8)
        decode_zstd_cpu(data, key=read.key, out=scratch)
        scatter_chunk(out, plan, read, scratch)

    threads = threads or default_threads()
    if threads == 1 or len(plan.reads) < 2:
        for read in plan.reads:
            work(read)
    else:
        with ThreadPoolExecutor(threads, thread_name_prefix="linumpy-read") as pool:
            for _ in pool.map(work, plan.reads):
                pass
    return out


def _check_dtype(array: zarr.Array, source: str) -> None:
    if np.dtype(array.dtype).kind not in "biufc":
        raise LinumpyError(
            f"{source}: dtype {array.dtype} is not supported; read_volume reads numeric arrays "
            "(bool, integers, floats, complex)"
        )


def read_volume(
    path: str | os.PathLike[str],
    *,
    level: int = 0,
    gpu: bool = False,
    region: slice | Sequence[slice] | None = None,
) -> Any:
    """Read a zarr volume, or a region of it, into memory.

    Parameters
    ----------
    path
        An OME-Zarr image (NGFF 0.4 or 0.5) or a plain zarr array (v2 or v3).
    level
        The multiscale level of an OME-Zarr image (0 is full resolution).
    gpu
        Return a ``cupy.ndarray`` read through :mod:`linumpy.gpu` (nvCOMP decode on the GPU).
    region
        A tuple of slices (step 1) selecting the part to read; the whole array by default.

    Returns
    -------
    numpy.ndarray or cupy.ndarray
        The data, byte-identical to ``zarr.open_array(...)[region]``.

    Raises
    ------
    LinumpyError
        For a missing path, a path that is not zarr, a level out of range, a region out of
        bounds, or a non-numeric dtype; the message names them.
    ChunkDecodeError
        When a stored chunk is corrupt or truncated; it names the chunk.
    GPUUnavailableError
        When ``gpu=True`` and cupy, nvCOMP or a CUDA device is missing.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import save_omezarr
    >>> path = tempfile.mkdtemp() + "/volume.ome.zarr"
    >>> save_omezarr(np.arange(4096, dtype=np.uint16).reshape(16, 16, 16), path,
    ...              voxel_size=(1, 1, 1), chunks=(8, 8, 8))
    >>> read_volume(path, region=(slice(0, 1), slice(0, 2), slice(0, 4)))
    array([[[ 0,  1,  2,  3],
            [16, 17, 18, 19]]], dtype=uint16)
    """
    array = open_array(path, level)
    source = f"{path} (level {level})"
    _check_dtype(array, source)
    if gpu:
        try:
            from linumpy.gpu.zarr_io import read_zarr_to_gpu
        except ImportError as exc:
            raise GPUUnavailableError(
                f"read_volume(gpu=True) needs linumpy's GPU support: {exc}. Install the GPU "
                "extra (pip install 'linumpy[gpu-cu13]' or '[gpu-cu12]')"
            ) from None
        return read_zarr_to_gpu(array, region=region)
    try:
        plan = plan_read(array, region)
    except UnsupportedLayoutError as exc:
        logger.info("%s: reading through zarr: %s", source, exc)
        return array[parse_region(region, array.shape, source)]
    return read_plan(plan)
