"""Array-module selection: numpy by default, cupy only when a GPU array or the GPU path asks."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np


def array_module(array: Any) -> ModuleType:
    """``cupy`` for a cupy array (imported only then: the CPU path never imports it), else
    ``numpy``."""
    if type(array).__module__.partition(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def gpu_module(gpu: bool) -> ModuleType:
    """Return ``cupy`` when ``gpu`` is true (importing it then), else ``numpy``."""
    if gpu:
        import cupy

        return cupy
    return np


def to_numpy(array: Any) -> np.ndarray:
    """Return ``array`` as a numpy array, copying it from the GPU when it is a cupy array."""
    if array_module(array) is np:
        return np.asarray(array)
    return array.get()


def ndimage_module(xp: ModuleType) -> ModuleType:
    """``scipy.ndimage`` for numpy, ``cupyx.scipy.ndimage`` for cupy."""
    if xp is np:
        from scipy import ndimage

        return ndimage
    from cupyx.scipy import ndimage

    return ndimage
