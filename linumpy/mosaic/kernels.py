"""Compile the GPU kernels of the pipeline once per machine, ahead of the first real job.

cupy and linumpy keep compiled kernels in on-disk caches, so a pipeline's first job on a new
machine pays for every compilation (seconds), its later jobs do not; ``linum-gpu-info
--prepare-kernels`` runs :func:`prepare_gpu_kernels` to fill the caches first.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__: list[str] = []


@dataclass(frozen=True)
class KernelReport:
    """What :func:`prepare_gpu_kernels` did: cupy's kernel cache folder, the kernel files the
    caches (cupy's and linumpy's) gained, and the time taken."""

    cache_dir: str
    compiled: int
    seconds: float


def _cache_files(folder: str) -> int:
    return sum(len(names) for _, _, names in os.walk(folder)) if os.path.isdir(folder) else 0


def prepare_gpu_kernels() -> KernelReport:
    """Run each GPU step of the pipeline on a tiny demo mosaic (the device encoding every
    write), filling the kernel caches; nothing else is kept. GPUUnavailableError without a GPU."""
    from linumpy import settings
    from linumpy.gpu.availability import require_gpu

    require_gpu("prepare_gpu_kernels")
    import cupy

    from linumpy.io import read_volume
    from linumpy.io.engine.write import encode_min_bytes
    from linumpy.mosaic.demo import make_demo_data, read_demo_truth
    from linumpy.mosaic.pipeline import (
        estimate_transform_omezarr,
        projection_omezarr,
        stitch_omezarr,
    )

    # where cupy keeps compiled kernels (its documented CUPY_CACHE_DIR and default)
    cache_dir = os.environ.get("CUPY_CACHE_DIR") or os.path.expanduser("~/.cupy/kernel_cache")
    ours = os.fspath(settings.cache_dir("kernels"))
    before = _cache_files(cache_dir) + _cache_files(ours)
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="linumpy-kernels-") as folder,
        encode_min_bytes(1),
        settings.set(durable=False),
    ):
        root = Path(folder)
        mosaic = root / "mosaic.ome.zarr"
        make_demo_data(mosaic, grid_shape=(2, 2), tile_shape=(16, 64, 64), xp=cupy)
        tiled = root / "tiled.ome.zarr"
        make_demo_data(tiled, grid_shape=(2, 2), tile_shape=(16, 64, 64), shards=None, xp=cupy)
        read_volume(tiled, gpu=True)
        transform = read_demo_truth(mosaic)
        estimate_transform_omezarr(mosaic, gpu=True)
        for blending in ("none", "average", "linear"):
            stitched = root / f"stitched-{blending}.ome.zarr"
            stitch_omezarr(mosaic, stitched, transform, blending=blending, gpu=True)
            read_volume(stitched, gpu=True)
        projection = root / "aip.ome.zarr"
        projection_omezarr(mosaic, projection, gpu=True)
        stitch_omezarr(projection, root / "stitched-2d.ome.zarr", transform, gpu=True)
        cupy.cuda.Device().synchronize()
    gained = _cache_files(cache_dir) + _cache_files(ours) - before
    return KernelReport(cache_dir, max(0, gained), time.perf_counter() - started)
