"""Cluster start-up: :func:`~linumpy.parallel.dask_cluster`, which imports ``distributed`` and
``dask_cuda`` only when a scheduler or GPUs are asked for."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from linumpy.errors import GPU_INSTALL_HINT, ClusterError
from linumpy.parallel.block_sizes import parse_size
from linumpy.parallel.cluster import Cluster
from linumpy.parallel.gpu_devices import visible_gpus
from linumpy.parallel.host_memory import release_freed_memory
from linumpy.parallel.workers import DEFAULT_CLUSTER_TIMEOUT_S, check_workers

__all__ = ["dask_cluster"]

#: Threads of each dask-cuda worker started by :func:`~linumpy.parallel.dask_cluster` (``gpus=``).
GPU_WORKER_THREADS = 1
#: Seconds to wait for an existing scheduler before giving up.
SCHEDULER_TIMEOUT_S = 3


def _worker_memory(client: Any) -> int | None:
    workers = client.scheduler_info().get("workers", {})
    limits = [w.get("memory_limit") or 0 for w in workers.values()]
    return min(limits) if limits and min(limits) > 0 else None


def _connect(address: str) -> Any:
    from distributed import Client

    try:
        return Client(address, timeout=f"{SCHEDULER_TIMEOUT_S}s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise ClusterError(
            f"cannot reach the dask scheduler at {address!r} within {SCHEDULER_TIMEOUT_S} s "
            f"({type(exc).__name__}: {exc}); is it running, and is the address right?"
        ) from None


def _start_cuda_cluster(gpus: int) -> Any:
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError:
        raise ClusterError(
            f"--gpus {gpus} needs dask-cuda, which is not installed: {GPU_INSTALL_HINT}"
        ) from None
    visible = visible_gpus()
    if gpus > visible:
        raise ClusterError(f"--gpus {gpus}: only {visible} GPU(s) are visible to this process")
    # dask's own worker memory limit (whole process: interpreter, CUDA context and all) stays
    # its default; ``memory_limit`` sizes the blocks, whose working set it bounds
    return LocalCUDACluster(
        n_workers=gpus,
        CUDA_VISIBLE_DEVICES=list(range(gpus)),
        threads_per_worker=GPU_WORKER_THREADS,
    )


@contextmanager
def dask_cluster(
    *,
    memory_limit: str | int | None = None,
    scheduler: str | None = None,
    gpus: int | None = None,
    timeout: float = DEFAULT_CLUSTER_TIMEOUT_S,
) -> Iterator[Cluster]:
    """Yield a :class:`~linumpy.parallel.Cluster`: an existing scheduler, a dask-cuda cluster, or
    local threads.

    Parameters
    ----------
    memory_limit
        Working set per worker (``"2GiB"``, bytes); blocks are sized so that one worker's tasks
        fit it. With a scheduler, the workers' own limit is used when this is None.
    scheduler
        Address of a running ``dask.distributed`` scheduler (``tcp://host:8786``).
    gpus
        Start a dask-cuda ``LocalCUDACluster`` with one worker per GPU on this many GPUs.
    timeout
        With a scheduler: seconds to wait for a first worker (blocks are planned for the
        workers' own memory limit and threads), and for another when all are lost mid-job.

    Raises
    ------
    ClusterError
        For an unreachable scheduler (after a few seconds), workers with other versions of
        linumpy, zarr, numpy or dask, more GPUs than are visible, dask-cuda missing, or
        ``scheduler`` and ``gpus`` together.
    ClusterLostError
        When no worker joins the scheduler within ``timeout`` seconds.
    LinumpyError
        For a memory limit that is not a size.

    Examples
    --------
    >>> import dask.array as da
    >>> from linumpy.parallel import dask_cluster
    >>> with dask_cluster(memory_limit="256MiB") as cluster:
    ...     total = cluster.compute(da.ones((100, 100), chunks=50).sum())
    >>> int(total), cluster.memory_limit
    (10000, 268435456)
    """
    limit = None if memory_limit is None else parse_size(memory_limit)
    if gpus is not None and gpus < 1:
        raise ClusterError(f"gpus must be a positive number of GPUs, got {gpus}")
    if scheduler is not None and gpus is not None:
        raise ClusterError("use either a scheduler address or gpus, not both")
    if scheduler is None and gpus is None:
        if limit is not None:
            release_freed_memory()
        yield Cluster(memory_limit=limit)
        return
    from distributed import Client

    with ExitStack() as stack:
        if scheduler is not None:
            client = stack.enter_context(_connect(scheduler))
            check_workers(client, scheduler, timeout)
        else:
            cluster = stack.enter_context(_start_cuda_cluster(gpus))
            client = stack.enter_context(Client(cluster))
        yield Cluster(
            client, memory_limit=limit or _worker_memory(client), gpus=gpus or 0, timeout=timeout
        )
