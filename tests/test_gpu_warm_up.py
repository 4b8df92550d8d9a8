"""The GPU warm-up a ``--use-gpu`` command starts while its modules import."""

from __future__ import annotations

import argparse
import logging

import numpy as np
import pytest

from linumpy.cli.run import _runs_on_this_gpu
from linumpy.gpu import warm_up


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"use_gpu": True}, True),
        ({"use_gpu": True, "gpus": None, "scheduler": None}, True),
        ({"use_gpu": False}, False),
        ({}, False),
        ({"use_gpu": True, "gpus": 2}, False),  # the GPU work runs in dask-cuda's workers
        ({"use_gpu": True, "scheduler": "tcp://127.0.0.1:8786"}, False),
    ],
)
def test_only_a_command_running_on_this_processs_gpu_warms_it_up(
    values: dict, expected: bool
) -> None:
    assert _runs_on_this_gpu(argparse.Namespace(**values)) is expected


def test_a_warm_up_that_cannot_run_says_so_at_debug_level_only(caplog, monkeypatch) -> None:
    def no_gpu() -> None:
        raise RuntimeError("no CUDA driver here")

    monkeypatch.setattr(warm_up, "_load_libraries_and_kernels", no_gpu)
    with caplog.at_level(logging.DEBUG, logger="linumpy.gpu.warm_up"):
        warm_up._warm_up()  # without a GPU, importing cupy or creating the context fails first
    records = [r for r in caplog.records if r.name == "linumpy.gpu.warm_up"]
    assert records and all(r.levelno == logging.DEBUG for r in records)
    assert "GPU warm-up stopped" in records[0].getMessage()


@pytest.mark.gpu
def test_the_first_read_takes_the_staging_the_warm_up_page_locked(tmp_path, monkeypatch) -> None:
    from linumpy.gpu import pinned_buffers
    from linumpy.io import read_volume, save_omezarr

    monkeypatch.setattr(pinned_buffers, "_idle", {})
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    warm_up._warm_up()
    staged = {key: list(entries) for key, entries in pinned_buffers._idle.items()}
    assert staged and all(role == "staging" for role, _ in staged)
    buffers = {id(entry[1]) for entries in staged.values() for entry in entries}

    volume = np.random.default_rng(0).integers(0, 4000, (64, 128, 128), dtype=np.uint16)
    path = tmp_path / "volume.ome.zarr"
    save_omezarr(volume, path, voxel_size=(1, 1, 1))
    moved = pinned_buffers._moved
    np.testing.assert_array_equal(read_volume(path, gpu=True).get(), volume)
    assert pinned_buffers._moved > moved, "the read staged nothing through pinned memory"
    after = {id(e[1]) for entries in pinned_buffers._idle.values() for e in entries}
    assert after == buffers, "the read page-locked buffers of its own"


@pytest.mark.parametrize("use_gpu", [True, False])
def test_a_command_line_run_warms_the_gpu_up_only_with_use_gpu(tmp_path, use_gpu: bool) -> None:
    """The hook in the scripts' argument parsing: ``-vv`` shows the warm-up's end (stopped
    without a GPU; on a GPU host done, unless the command ended first), and nothing of it
    without ``--use-gpu``."""
    import subprocess

    from conftest import gpu_missing_reason

    from linumpy.bench.pipeline import _script_argv
    from linumpy.mosaic.demo import make_demo_data

    mosaic = tmp_path / "mosaic.ome.zarr"
    make_demo_data(mosaic, grid_shape=(2, 2), tile_shape=(8, 32, 32))
    argv = [*_script_argv("linum_aip"), str(mosaic), str(tmp_path / "aip.ome.zarr"), "-vv"]
    done = subprocess.run(
        argv + (["--use-gpu"] if use_gpu else []), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "GPU warm-up" in line]
    if not use_gpu:
        assert said == []
    elif gpu_missing_reason() is not None:
        assert len(said) == 1 and "GPU warm-up stopped" in said[0], done.stderr
    else:
        assert len(said) <= 1 and all("GPU warm-up done in" in line for line in said), done.stderr


@pytest.mark.parametrize("use_gpu", [pytest.param(True, marks=pytest.mark.gpu), False])
def test_a_gpu_command_has_cupyx_loaded_whole_before_its_threads_start(use_gpu: bool) -> None:
    """cupy's lazy ``cupyx`` is executed by the command's argument parsing (a thread loading it
    while another imports one of its submodules deadlocks); a CPU command never loads it."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from linumpy.cli import build_parser, parse_args\n"
        "from linumpy.cli.parser import add_gpu_arg\n"
        "parser = build_parser('Demo.', prog='linum-demo')\n"
        "add_gpu_arg(parser)\n"
        f"sys.argv = ['linum-demo'{", '--use-gpu'" if use_gpu else ''}]\n"
        "parse_args(parser, None)\n"
        "module = sys.modules.get('cupyx')\n"
        "print('absent' if module is None else type(module).__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("module" if use_gpu else "absent"), done.stdout


@pytest.mark.parametrize("on_gpu_host", [pytest.param(True, marks=pytest.mark.gpu), False])
def test_the_cuda_context_is_created_ahead_without_cupy(on_gpu_host: bool) -> None:
    """Where a CUDA driver and device are, the primary context of device 0 is active once the
    thread ends, with cupy still not imported; elsewhere the thread says so at debug level."""
    import subprocess
    import sys

    code = (
        "import ctypes, logging, sys\n"
        "logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format='%(message)s')\n"
        "from linumpy.gpu.warm_up import create_context_in_background\n"
        "create_context_in_background().join()\n"
        "assert create_context_in_background() is None\n"
        "print('cupy imported' if 'cupy' in sys.modules else 'no cupy')\n"
        "try:\n"
        "    driver = ctypes.CDLL('libcuda.so.1')\n"
        "except OSError:\n"
        "    sys.exit(0)\n"
        "flags, active = ctypes.c_uint(), ctypes.c_int()\n"
        "status = driver.cuDevicePrimaryCtxGetState(0, ctypes.byref(flags), ctypes.byref(active))\n"
        "print('active' if status == 0 and active.value else 'inactive')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == "no cupy", done.stdout
    if on_gpu_host or lines[0].startswith("CUDA context created ahead in"):
        assert lines[0].startswith("CUDA context created ahead in"), done.stdout
        assert lines[-1] == "active", done.stdout
    else:
        assert lines[0].startswith("CUDA context not created ahead:"), done.stdout
        assert lines[-1] != "active", done.stdout
