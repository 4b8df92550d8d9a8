"""The CUDA devices a dask job can use, counted and sized through dask-cuda's NVML queries
(no CUDA context is created; 0 devices and no size without dask-cuda, a driver or NVML)."""

from __future__ import annotations

__all__ = ["device_memory", "visible_gpus"]


def device_memory() -> int | None:
    """Memory of the smallest CUDA device this process can see (NVML), or None without one.

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
        from dask_cuda.utils import get_device_total_memory

        sizes = [get_device_total_memory(i) for i in range(count)]
    except Exception:  # no dask-cuda, NVML or device: the host limit alone bounds the blocks
        return None
    known = [int(size) for size in sizes if size]
    return min(known) if known else None


def visible_gpus() -> int:
    """Number of CUDA devices this process can see (0 without a driver or NVML).

    Examples
    --------
    >>> from linumpy.parallel import visible_gpus
    >>> visible_gpus() >= 0
    True
    """
    try:
        from dask_cuda.utils import get_n_gpus

        return int(get_n_gpus())
    except Exception:  # no dask-cuda, no driver, no NVML: no usable GPU for a cluster
        return 0
