"""A :class:`~linumpy.parallel.Cluster`: where dask work runs, and the working set each of its
tasks may use."""

from __future__ import annotations

import logging
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dask
import dask.threaded
from dask.callbacks import Callback
from tqdm import tqdm

from linumpy.errors import MemoryLimitError
from linumpy.parallel import block_sizes
from linumpy.parallel.gpu_devices import device_memory
from linumpy.settings import available_cpus

__all__ = ["Cluster"]

logger = logging.getLogger(__name__)


class Cluster:
    """Where dask work runs and how much memory each of its tasks may use.

    Build one with :func:`~linumpy.parallel.dask_cluster`; ``Cluster()`` alone is the
    local threaded scheduler with one thread per CPU and no memory limit.

    Parameters
    ----------
    client
        A ``distributed.Client``, or None for dask's local threaded scheduler.
    memory_limit
        Memory for the working set of one worker, in bytes; None for no limit.
    threads
        Tasks one worker runs at once (local threads: the CPUs by default).
    gpus
        Number of GPU workers (dask-cuda), 0 for none.
    device_bytes
        Memory of each GPU the tasks run on (``GPU_DEVICE_SHARE`` of it bounds a GPU task);
        None: ``device_memory()`` for local threads and GPU workers, no
        bound for a scheduler elsewhere.
    timeout
        Seconds a job on a distributed client waits with every worker lost before it fails
        (``--cluster-timeout``); None waits on.

    Examples
    --------
    >>> from linumpy.parallel import Cluster
    >>> Cluster(memory_limit=2**30, threads=2).task_bytes(minimum=2**20)  # (3/4 of 1 GiB) / 2
    402653184
    """

    def __init__(
        self,
        client: Any | None = None,
        *,
        memory_limit: int | None = None,
        threads: int | None = None,
        gpus: int = 0,
        device_bytes: int | None = None,
        timeout: float | None = None,
    ) -> None:
        self.client = client
        self.timeout = timeout
        self.memory_limit = memory_limit
        self.gpus = gpus
        self._device_bytes = device_bytes
        self._threads_given = threads is not None
        if threads is None:
            threads = available_cpus() if client is None else _worker_threads(client)
        self.max_threads = max(1, int(threads))
        #: Tasks one worker runs at once in the current job (local threads: at most
        #: ``max_threads``, fewer when the memory limit needs it).
        self.threads = self.max_threads

    @property
    def slots(self) -> int:
        """Tasks that run at once: the workers times their threads (local threads: the threads)."""
        if self.client is None:
            return self.threads
        return max(1, len(self.client.scheduler_info().get("workers", {}))) * self.threads

    def task_bytes(
        self,
        minimum: int,
        what: str = "this job",
        *,
        total: int | None = None,
        gpu: bool = False,
        gpu_task_bytes: int = block_sizes.DEFAULT_GPU_TASK_BYTES,
    ) -> int:
        """The working set one task may use: ``TASK_SHARE`` of the memory limit, shared by a
        worker's threads (on local threads, fewer run when the limit cannot hold ``minimum``
        bytes per thread); no more than :meth:`split_bytes` of ``total``; for a GPU task also
        within ``GPU_DEVICE_SHARE`` of its device's memory.

        Parameters
        ----------
        minimum
            Working set of the job's smallest block, in bytes.
        what
            The job's name, for the error message.
        total
            Working set of the whole job as one block, in bytes, if known.
        gpu
            Whether the job's tasks run on the GPU (on local threads not set by the caller:
            ``DEFAULT_GPU_THREADS`` threads).
        gpu_task_bytes
            A GPU task's working set without a memory limit, and the floor of the split.

        Raises
        ------
        MemoryLimitError
            When the limit is smaller than ``minimum`` (times a remote worker's threads).
        """
        self.threads = self.max_threads
        if gpu and self.client is None and not self._threads_given:
            self.threads = min(self.max_threads, block_sizes.DEFAULT_GPU_THREADS)
        budget = self._limit_bytes(minimum, what, gpu_task_bytes if gpu else None)
        if total is not None:
            budget = self.split_bytes(
                budget, minimum, total, gpu=gpu, gpu_task_bytes=gpu_task_bytes
            )
        if gpu and (device := self.device_bytes()):
            share = int(device * block_sizes.GPU_DEVICE_SHARE)
            budget = max(minimum, min(budget, share // self.threads))
        return budget

    def device_bytes(self) -> int | None:
        """Memory of the GPUs this cluster's GPU tasks run on, when known here."""
        if self._device_bytes is None and (self.client is None or self.gpus):
            self._device_bytes = device_memory() or 0
        return self._device_bytes or None

    def split_bytes(
        self,
        budget: int,
        minimum: int,
        total: int,
        *,
        gpu: bool = False,
        gpu_task_bytes: int = block_sizes.DEFAULT_GPU_TASK_BYTES,
    ) -> int:
        """``budget`` lowered so that a job of ``total`` bytes makes about ``BLOCKS_PER_SLOT``
        (GPU: ``GPU_BLOCKS_PER_SLOT``) blocks per :attr:`slots` (with ``SPLIT_SLACK``), but not
        below ``SPLIT_FLOOR_BYTES`` (GPU: ``gpu_task_bytes``) nor ``minimum``."""
        floor = gpu_task_bytes if gpu else block_sizes.SPLIT_FLOOR_BYTES
        per_slot = block_sizes.GPU_BLOCKS_PER_SLOT if gpu else block_sizes.BLOCKS_PER_SLOT
        share = max(floor, int(total * block_sizes.SPLIT_SLACK) // (per_slot * self.slots))
        return max(minimum, min(budget, share))

    def _limit_bytes(self, minimum: int, what: str, default: int | None) -> int:
        """The working set per thread under the memory limit, setting :attr:`threads`: fewer
        run on local threads when it cannot hold ``minimum`` each (a remote worker's threads are
        not ours to change: :class:`~linumpy.errors.MemoryLimitError`)."""
        if self.memory_limit is None:
            return max(minimum, default or block_sizes.DEFAULT_TASK_BYTES)
        usable = int(self.memory_limit * block_sizes.TASK_SHARE)
        if usable // self.threads >= minimum:
            return usable // self.threads
        fit = usable // minimum
        if self.client is not None or fit < 1:
            needed = minimum * (self.threads if self.client is not None else 1)
            raise MemoryLimitError(
                self.memory_limit, math.ceil(needed / block_sizes.TASK_SHARE), what
            )
        logger.info("%s: %d thread(s) fit the memory limit, not %d", what, fit, self.threads)
        self.threads = int(fit)
        return usable // self.threads

    def compute(self, collection: Any, *, desc: str = "dask", progress: bool = False) -> Any:
        """Compute a dask collection here, with a tqdm bar over its tasks (``progress``; on a
        distributed client, over its output blocks); the first failed task stops the job."""
        # delay: no bar is drawn before the task count is known (reset draws the first one)
        with tqdm(desc=desc, unit="task", disable=not progress, total=0, delay=1e-9) as bar:
            if self.client is not None:
                from linumpy.parallel.on_workers import compute_on_workers

                return compute_on_workers(collection, self.client, bar, timeout=self.timeout)
            # A pool of its own: on an error or Ctrl-C the tasks already running finish
            # before the caller cleans up (an aborted write's tasks would recreate its files).
            pool = ThreadPoolExecutor(self.threads, thread_name_prefix="linumpy-dask")
            try:
                with _TaskBar(bar):
                    # the threaded get itself: scheduler="threads" would import distributed
                    return dask.compute(collection, scheduler=dask.threaded.get, pool=pool)[0]
            finally:
                pool.shutdown(wait=True, cancel_futures=True)


class _TaskBar(Callback):
    """tqdm bar over the tasks of a local (threaded) dask computation."""

    def __init__(self, bar: tqdm) -> None:
        super().__init__()
        self._bar = bar

    def _start_state(self, dsk: Any, state: dict[str, Any]) -> None:
        keys = ("ready", "waiting", "running", "finished")
        self._bar.reset(total=sum(len(state[k]) for k in keys))

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        self._bar.update()


def _worker_threads(client: Any) -> int:
    workers = client.scheduler_info().get("workers", {})
    return min((w.get("nthreads", 1) for w in workers.values()), default=1)
