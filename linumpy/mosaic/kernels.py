"""Compile the GPU kernels of the pipeline once per machine, ahead of the first real job.

cupy compiles each kernel the first time a process on a machine uses it and keeps the result in
its on-disk cache (``CUPY_CACHE_DIR``, by default ``~/.cupy/kernel_cache``), linumpy its own
kernels in its cubin cache (:mod:`linumpy.gpu.kernel_cache`); later processes load them from
there. A pipeline's first job on a new machine therefore pays for every compilation
(seconds), its later jobs do not. :func:`prepare_gpu_kernels` runs every GPU step of the pipeline
on a tiny demo mosaic, so that the cache holds the kernels before the first job does
(``linum-gpu-info --prepare-kernels``).
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KernelReport", "prepare_gpu_kernels"]


@dataclass(frozen=True)
class KernelReport:
    """What :func:`prepare_gpu_kernels` did.

    Attributes
    ----------
    cache_dir
        cupy's kernel cache folder.
    compiled
        Kernel files the caches (cupy's and linumpy's) gained (0 when they held them all).
    seconds
        Time taken.

    Examples
    --------
    >>> KernelReport("/root/.cupy/kernel_cache", 12, 4.5).compiled
    12
    """

    cache_dir: str
    compiled: int
    seconds: float


def _cache_files(folder: str) -> int:
    return sum(len(names) for _, _, names in os.walk(folder)) if os.path.isdir(folder) else 0


def prepare_gpu_kernels() -> KernelReport:
    """Run each GPU step of the pipeline on a tiny mosaic, filling the kernel caches.

    The steps: the demo mosaic written from the GPU (both layouts), GPU reads of it, the tile
    registration, the 3-D stitch with each blending, its pyramid, the projection and the 2-D
    stitch, with the device encoding every write (the small writes of real jobs are encoded on
    the CPU, larger ones on the GPU). Nothing is kept but the cache.

    Raises
    ------
    GPUUnavailableError
        When cupy, nvCOMP or a device is missing.

    Examples
    --------
    >>> report = prepare_gpu_kernels()  # doctest: +SKIP
    >>> report.compiled  # the second time on a machine: nothing left to compile  # doctest: +SKIP
    0
    """
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
