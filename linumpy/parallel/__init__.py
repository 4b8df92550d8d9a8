"""Where dask work runs: local threads, an existing ``dask.distributed`` scheduler, or one
dask-cuda worker per GPU; how much memory one task may use; progress bars over dask tasks.

:func:`dask_cluster` turns the scripts' ``--memory-limit``, ``--scheduler`` and ``--gpus`` into a
:class:`Cluster`. Library functions that run out of core (``stitch_omezarr``, ``store_dask``, ...)
take one and size their blocks with :meth:`Cluster.task_bytes`, so that the blocks one worker
holds at once fit its memory limit. ``distributed`` and ``dask_cuda`` are imported only when a
scheduler or GPUs are asked for.

The policy's figures (tasks per worker slot, the share of memory a task may use) are constants
of the internal module ``linumpy.parallel.block_sizes``.
"""

from __future__ import annotations

from linumpy.parallel.block_sizes import parse_size
from linumpy.parallel.cluster import Cluster
from linumpy.parallel.startup import dask_cluster

__all__ = ["Cluster", "dask_cluster", "parse_size"]
