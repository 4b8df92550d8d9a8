"""Shared pytest configuration: `gpu` tests skip cleanly on machines without a usable GPU."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def gpu_missing_reason() -> str | None:
    """Say why GPU tests cannot run here; None when cupy, nvCOMP and a device are usable."""
    try:
        import cupy
    except ImportError as exc:
        return f"cupy is not installed ({exc})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as exc:  # cupy raises several CUDA error types when no driver is present
        return f"no usable CUDA device ({exc})"
    try:
        import nvidia.nvcomp  # noqa: F401
    except ImportError as exc:
        return f"nvidia-nvcomp is not installed ({exc})"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    reason = gpu_missing_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU test: {reason}")
    for item in gpu_items:
        item.add_marker(skip)
