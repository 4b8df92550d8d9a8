"""The OCT-like test volume of the benchmark (and of tests that want realistic chunks).

Real OCT volumes have no all-zero regions: above the tissue surface the detector still records a
low noise floor. A volume with a zero half would flatter every reader, because zarr does not store
chunks that are all fill value and nvCOMP decodes near-empty frames almost for free; this one has
noise everywhere.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from linumpy.settings import available_cpus

__all__ = ["oct_volume"]

#: Voxels generated per slab (float32 temporaries of this many voxels, a few at a time per thread).
_SLAB_VOXELS = 4 * 2**20


def oct_volume(
    shape: tuple[int, int, int],
    dtype: np.typing.DTypeLike = np.uint16,
    *,
    seed: int = 1234,
    threads: int | None = None,
) -> np.ndarray:
    """An OCT-like volume: speckle under depth attenuation below a wavy surface, a noise floor.

    The tissue is exponentially distributed speckle whose mean decays with depth below a smooth
    surface near mid-depth; everywhere there is a detector noise floor (mean 100, spread 8), so
    no chunk is all zeros. At zstd level 3 a uint16 volume of this kind compresses about 1.65
    times (1.648 measured at 512 x 1024 x 1024 in 128^3 chunks).

    The volume is generated on the CPU, slab by slab on ``threads`` threads, each slab from its
    own seeded generator: the same ``shape``, ``dtype`` and ``seed`` give the same bytes on every
    machine, whatever ``threads``, so GPU and CPU runs of the benchmark measure the same data.

    Parameters
    ----------
    shape
        ``(Z, Y, X)``: depth first, as OCT volumes are stored.
    dtype
        Output dtype; integer types are rounded and clipped to their range.
    seed
        Seed of the random draws.
    threads
        Threads generating slabs (None: the CPUs available).

    Returns
    -------
    numpy.ndarray
        The volume, of ``shape`` and ``dtype``.

    Examples
    --------
    >>> import numpy as np
    >>> from linumpy.bench import oct_volume
    >>> volume = oct_volume((32, 64, 64))
    >>> volume.shape, volume.dtype
    ((32, 64, 64), dtype('uint16'))
    >>> bool(volume.min() > 0)  # a noise floor everywhere, no zeros
    True
    >>> bool(np.array_equal(volume, oct_volume((32, 64, 64), threads=1)))  # same seed, same bytes
    True
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
