"""Where dask work runs: local threads, an existing ``dask.distributed`` scheduler, or one
dask-cuda worker per GPU; how much memory one task may use; progress bars over dask tasks.

:func:`dask_cluster` turns the scripts' ``--memory-limit``, ``--scheduler`` and ``--gpus`` into a
:class:`Cluster`. Library functions that run out of core (``stitch_omezarr``, ``store_dask``, ...)
take one and size their blocks with :meth:`Cluster.task_bytes`, so that the blocks one worker
holds at once fit its memory limit. ``distributed`` and ``dask_cuda`` are imported only when a
scheduler or GPUs are asked for.

The policy's figures (``BLOCKS_PER_SLOT``, ...) are read where they are defined, in
:mod:`linumpy.parallel.block_sizes` (and :mod:`linumpy.parallel.startup`): change them there.
"""

from __future__ import annotations

from linumpy.parallel.block_sizes import (
    BLOCKS_PER_SLOT,
    DEFAULT_GPU_TASK_BYTES,
    DEFAULT_GPU_THREADS,
    DEFAULT_TASK_BYTES,
    GPU_BLOCKS_PER_SLOT,
    GPU_DEVICE_SHARE,
    GPU_READ_TASK_BYTES,
    SPLIT_FLOOR_BYTES,
    SPLIT_SLACK,
    TASK_SHARE,
    parse_size,
)
from linumpy.parallel.cluster import Cluster
from linumpy.parallel.gpu_devices import device_memory, visible_gpus
from linumpy.parallel.host_memory import release_freed_memory
from linumpy.parallel.startup import GPU_WORKER_THREADS, dask_cluster

__all__ = [
    "BLOCKS_PER_SLOT",
    "DEFAULT_GPU_TASK_BYTES",
    "DEFAULT_GPU_THREADS",
    "DEFAULT_TASK_BYTES",
    "GPU_BLOCKS_PER_SLOT",
    "GPU_DEVICE_SHARE",
    "GPU_READ_TASK_BYTES",
    "GPU_WORKER_THREADS",
    "SPLIT_FLOOR_BYTES",
    "SPLIT_SLACK",
    "TASK_SHARE",
    "Cluster",
    "dask_cluster",
    "device_memory",
    "parse_size",
    "release_freed_memory",
    "visible_gpus",
]
