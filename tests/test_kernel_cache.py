"""linumpy's cubin cache of its own CUDA kernels (linumpy.gpu.kernel_cache)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from linumpy.gpu import kernel_cache
from linumpy.gpu.kernel_cache import cubin_path, raw_kernel

_SOURCE = r"""
extern "C" __global__ void linumpy_test_fill(unsigned int* out, const unsigned int value, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value + i;
}
"""


def test_cubins_are_named_by_source_architecture_and_toolchain(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    base = cubin_path("a", "sm_90", toolchain="t1")
    assert base.parent == tmp_path / "linumpy" / "kernels"
    assert base.name.endswith("-sm_90.cubin")
    assert base == cubin_path("a", "sm_90", toolchain="t1")
    others = {
        cubin_path("b", "sm_90", toolchain="t1"),
        cubin_path("a", "sm_80", toolchain="t1"),
        cubin_path("a", "sm_90", toolchain="t2"),
    }
    assert base not in others and len(others) == 3


def test_a_cache_that_cannot_be_written_is_reported_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert kernel_cache._store(blocker / "kernels" / "k.cubin", b"\0") is False
    assert kernel_cache._store(tmp_path / "kernels" / "k.cubin", b"\1\2") is True
    assert (tmp_path / "kernels" / "k.cubin").read_bytes() == b"\1\2"
    assert [p.name for p in (tmp_path / "kernels").iterdir()] == ["k.cubin"]  # no partial left


def _run(kernel, n: int = 1000, value: int = 7) -> np.ndarray:
    import cupy

    out = cupy.zeros(n, dtype=cupy.uint32)
    kernel(((n + 127) // 128,), (128,), (out, np.uint32(value), np.int32(n)))
    return cupy.asnumpy(out)


@pytest.mark.gpu
def test_a_kernel_is_compiled_once_then_loaded_from_its_cubin(tmp_path: Path, monkeypatch) -> None:
    import cupy

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(kernel_cache, "_loaded", {})
    expected = 7 + np.arange(1000, dtype=np.uint32)
    np.testing.assert_array_equal(_run(raw_kernel(_SOURCE, "linumpy_test_fill")), expected)
    arch = f"sm_{cupy.cuda.Device().compute_capability}"
    path = cubin_path(_SOURCE, arch)
    assert path.is_file(), "no cubin cached (is cuda.core installed?)"

    # a new process: nothing loaded, and no compiler at hand; the cubin serves
    monkeypatch.setattr(kernel_cache, "_loaded", {})

    def no_compiler(*args: object) -> bytes:
        raise AssertionError("compiled although its cubin is cached")

    monkeypatch.setattr(kernel_cache, "_compile", no_compiler)
    np.testing.assert_array_equal(_run(raw_kernel(_SOURCE, "linumpy_test_fill")), expected)


@pytest.mark.gpu
def test_a_damaged_cubin_is_compiled_again(tmp_path: Path, monkeypatch) -> None:
    import cupy

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(kernel_cache, "_loaded", {})
    path = cubin_path(_SOURCE, f"sm_{cupy.cuda.Device().compute_capability}")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a cubin")
    out = _run(raw_kernel(_SOURCE, "linumpy_test_fill"), value=3)
    np.testing.assert_array_equal(out, 3 + np.arange(1000, dtype=np.uint32))
    assert path.read_bytes() != b"not a cubin"


@pytest.mark.gpu
def test_threads_asking_at_once_share_one_load(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(kernel_cache, "_loaded", {})
    loads: list[str] = []
    real = kernel_cache._load
    monkeypatch.setattr(kernel_cache, "_load", lambda *a: loads.append(a[1]) or real(*a))
    got: list[object] = []
    start = threading.Barrier(8)

    def ask() -> None:
        start.wait()
        got.append(raw_kernel(_SOURCE, "linumpy_test_fill"))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert loads == ["linumpy_test_fill"]
    assert len(got) == 8 and all(kernel is got[0] for kernel in got)
