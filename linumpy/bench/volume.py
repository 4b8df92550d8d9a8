"""The benchmark's OCT-like volume. Real OCT volumes have no all-zero regions (the detector
records a noise floor above the tissue); a zero region would flatter every reader, as zarr does
not store all-fill chunks and nvCOMP decodes near-empty frames almost for free."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from linumpy.settings import available_cpus

# Voxels per slab (float32 temporaries of this size, a few at a time per thread).
_SLAB_VOXELS = 4 * 2**20


def oct_volume(
    shape: tuple[int, int, int],
    dtype: np.typing.DTypeLike = np.uint16,
    *,
    seed: int = 1234,
    threads: int | None = None,
) -> np.ndarray:
    """An OCT-like volume of ``shape`` (Z, Y, X): exponential speckle decaying with depth below a
    wavy surface near mid-depth, over a noise floor (mean 100, spread 8) so that no chunk is all
    zeros. Slabs are generated on ``threads`` threads, each from its own seeded generator: the
    same arguments give the same bytes on every machine, whatever ``threads``.
    """
    dtype = np.dtype(dtype)
    depth, height, width = (int(n) for n in shape)
    y = np.linspace(0.0, 7.0, height, dtype=np.float32)[:, None]
    x = np.linspace(0.0, 5.0, width, dtype=np.float32)[None, :]
    surface = depth * (0.45 + 0.1 * np.sin(y) * np.cos(x) + 0.03 * np.sin(3 * x + y))
    volume = np.empty((depth, height, width), dtype=dtype)
    info = np.iinfo(dtype) if dtype.kind in "iu" else None
    step = max(1, _SLAB_VOXELS // max(1, height * width))

    def slab(z0: int) -> None:
        # One generator per slab: the bytes do not depend on which thread made them.
        rng = np.random.default_rng([seed, z0])
        z = np.arange(z0, min(depth, z0 + step), dtype=np.float32)[:, None, None]
        below = z - surface[None]
        n = (len(z), height, width)
        speckle = rng.standard_exponential(n, dtype=np.float32)
        tissue = 1200 * np.exp(-np.maximum(below, 0) / (0.25 * depth)) * speckle
        values = 100 + 8 * rng.standard_normal(n, dtype=np.float32)
        values += np.where(below >= 0, tissue, 0)
        if info is not None:
            values = np.clip(np.rint(values), info.min, info.max)
        volume[z0 : z0 + len(z)] = values.astype(dtype)

    starts = range(0, depth, step)
    workers = max(1, min(len(starts), threads or available_cpus()))
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(slab, starts))
    return volume
