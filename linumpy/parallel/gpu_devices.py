"""The CUDA devices a dask job can use, through the CUDA runtime (cupy, imported only when asked,
by GPU jobs, which import it anyway; dask-cuda's NVML would cost its import in every GPU run)."""

from __future__ import annotations

__all__: list[str] = []


def device_memory() -> int | None:
    """Memory of the smallest CUDA device this process can see, or None without one."""
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
    """Number of CUDA devices this process can see (0 without cupy or a driver)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no cupy, no driver, no device: no usable GPU for a cluster
        return 0
