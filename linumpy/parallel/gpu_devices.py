"""The CUDA devices a dask job can use, counted and sized through the CUDA runtime (cupy), which
honours ``CUDA_VISIBLE_DEVICES``: 0 devices and no size without cupy or a driver.

cupy is imported only when asked, and only by GPU jobs, which import it anyway; dask-cuda's NVML
queries give the same answers but would cost an import of dask-cuda in every GPU run, with or
without a dask-cuda cluster.
"""

from __future__ import annotations

__all__ = ["device_memory", "visible_gpus"]


def device_memory() -> int | None:
    """Memory of the smallest CUDA device this process can see, or None without one.

    Examples
    --------
    >>> from linumpy.parallel import device_memory
    >>> device_memory() is None or device_memory() > 0
    True
    """
    count = visible_gpus()
    if not count:
        return None
    try:
        import cupy

        sizes = [cupy.cuda.runtime.getDeviceProperties(i)["totalGlobalMem"] for i in range(count)]
    except Exception:  # no device after all: the host limit alone bounds the blocks
        return None
    known = [int(size) for size in sizes if size]
    return min(known) if known else None


def visible_gpus() -> int:
    """Number of CUDA devices this process can see (0 without cupy or a driver).

    Examples
    --------
    >>> from linumpy.parallel import visible_gpus
    >>> visible_gpus() >= 0
    True
    """
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no cupy, no driver, no device: no usable GPU for a cluster
        return 0
