"""The OCT-like test volume of the benchmark (and of tests that want realistic chunks).

Real OCT volumes have no all-zero regions: above the tissue surface the detector still records a
low noise floor. A volume with a zero half would flatter every reader, because zarr does not store
chunks that are all fill value and nvCOMP decodes near-empty frames almost for free; this one has
noise everywhere.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["oct_volume"]

#: Voxels generated per slab (float32 temporaries of this many voxels, a few at a time).
_SLAB_VOXELS = 16 * 2**20


def oct_volume(
    shape: tuple[int, int, int],
    dtype: np.typing.DTypeLike = np.uint16,
    *,
    seed: int = 1234,
    xp: ModuleType = np,
) -> Any:
    """An OCT-like volume: speckle under depth attenuation below a wavy surface, a noise floor.

    The tissue is exponentially distributed speckle whose mean decays with depth below a smooth
    surface near mid-depth; everywhere there is a detector noise floor (mean 100, spread 8), so
    no chunk is all zeros. At zstd level 3 a uint16 volume of this kind compresses about 1.65
    times (1.64-1.65 measured at 128 x 1024 x 1024 in the benchmark's four layouts). It is
    generated slab by slab, vectorised, with ``xp`` (numpy, or cupy to generate on the GPU; the
    random draws then differ).

    Parameters
    ----------
    shape
        ``(Z, Y, X)``: depth first, as OCT volumes are stored.
    dtype
        Output dtype; integer types are rounded and clipped to their range.
    seed
        Seed of the random draws: the same seed and ``xp`` give the same volume.
    xp
        ``numpy`` (default) or ``cupy``.

    Returns
    -------
    numpy.ndarray or cupy.ndarray
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
    >>> bool(np.array_equal(volume, oct_volume((32, 64, 64))))  # same seed, same volume
    True
    """
    dtype = np.dtype(dtype)
    depth, height, width = (int(n) for n in shape)
    rng = xp.random.default_rng(seed)
    y = xp.linspace(0.0, 7.0, height, dtype=xp.float32)[:, None]
    x = xp.linspace(0.0, 5.0, width, dtype=xp.float32)[None, :]
    surface = depth * (0.45 + 0.1 * xp.sin(y) * xp.cos(x) + 0.03 * xp.sin(3 * x + y))
    volume = xp.empty((depth, height, width), dtype=dtype)
    info = np.iinfo(dtype) if dtype.kind in "iu" else None
    step = max(1, _SLAB_VOXELS // max(1, height * width))
    for z0 in range(0, depth, step):
        z = xp.arange(z0, min(depth, z0 + step), dtype=xp.float32)[:, None, None]
        below = z - surface[None]
        n = (len(z), height, width)
        speckle = rng.standard_exponential(n, dtype=xp.float32)
        tissue = 1200 * xp.exp(-xp.maximum(below, 0) / (0.25 * depth)) * speckle
        slab = 100 + 8 * rng.standard_normal(n, dtype=xp.float32)
        slab += xp.where(below >= 0, tissue, 0)
        if info is not None:
            slab = xp.clip(xp.rint(slab), info.min, info.max)
        volume[z0 : z0 + len(z)] = slab.astype(dtype)
    return volume
