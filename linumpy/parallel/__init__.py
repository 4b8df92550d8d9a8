"""Where dask work runs: local threads, an existing ``dask.distributed`` scheduler, or one
dask-cuda worker per GPU; how much memory one task may use; progress bars over dask tasks.

:func:`dask_cluster` turns the scripts' ``--memory-limit``, ``--scheduler`` and ``--gpus`` into a
:class:`Cluster`. Library functions that run out of core (``stitch_omezarr``, ``store_dask``, ...)
take one and size their blocks with :meth:`Cluster.task_bytes`, so that the blocks one worker
holds at once fit its memory limit. ``distributed`` and ``dask_cuda`` are imported only when a
scheduler or GPUs are asked for.

The package's modules, each of one concern:

- :mod:`linumpy.parallel.startup`: :func:`dask_cluster`, the cluster start-up;
- :mod:`linumpy.parallel.cluster`: :class:`Cluster`, where tasks run and their working set;
- :mod:`linumpy.parallel.block_sizes`: sizes as text and the policy that cuts a job into blocks;
- :mod:`linumpy.parallel.gpu_devices`: the GPUs visible and their memory (the CUDA runtime);
- :mod:`linumpy.parallel.host_memory`: freed memory handed back to the system at once;
- :mod:`linumpy.parallel.progress`: the progress bar over a computation's tasks;
- :mod:`linumpy.parallel.on_workers`: a computation on a distributed cluster that stops at its
  first failed task, with errors and timeouts in one line;
- :mod:`linumpy.parallel.workers`: the scheduler's workers checked before a job (one joined,
  the client's versions);
- :mod:`linumpy.parallel.task_inputs`: the paths tasks open (absolute), and the check that each
  worker sees the client's input.

The policy's figures are read where they are defined: a change to one (a benchmark's
``--blocks-per-slot``) is made in :mod:`linumpy.parallel.block_sizes` (or, for
``GPU_WORKER_THREADS``, :mod:`linumpy.parallel.startup`).
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
