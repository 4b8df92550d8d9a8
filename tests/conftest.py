"""Shared pytest configuration: `gpu` tests skip cleanly on machines without a usable GPU."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile

import pytest

_CACHE: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    # on-disk caches (linumpy's record of valid NGFF metadata) go to a folder of the run's own,
    # for the tests' subprocesses too, never into the user's home
    _CACHE.append(tempfile.mkdtemp(prefix="linumpy-test-cache-"))
    os.environ["XDG_CACHE_HOME"] = _CACHE[-1]


def pytest_unconfigure(config: pytest.Config) -> None:
    while _CACHE:
        shutil.rmtree(_CACHE.pop(), ignore_errors=True)


@functools.cache
def gpu_missing_reason() -> str | None:
    """Say why GPU tests cannot run here; None when cupy, nvCOMP and a device are usable."""
    from linumpy.gpu.zarr_io import gpu_unavailable_reason

    return gpu_unavailable_reason()


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
