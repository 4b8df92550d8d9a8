"""Where dask work runs: local threads, an existing ``dask.distributed`` scheduler, or one
dask-cuda worker per GPU; how much memory one task may use; progress bars over dask tasks.

:func:`dask_cluster` turns the scripts' ``--memory-limit``, ``--scheduler`` and ``--gpus`` into a
:class:`Cluster`. Library functions that run out of core (``stitch_omezarr``, ``store_dask``, ...)
take one and size their blocks with :meth:`Cluster.task_bytes`, so that the blocks one worker
holds at once fit its memory limit. ``distributed`` and ``dask_cuda`` are imported only when a
scheduler or GPUs are asked for.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import Any

import dask
import dask.threaded
from dask.callbacks import Callback
from dask.utils import format_bytes, parse_bytes
from tqdm import tqdm

from linumpy.errors import ClusterError, LinumpyError, MemoryLimitError

__all__ = [
    "BLOCKS_PER_SLOT",
    "DEFAULT_GPU_TASK_BYTES",
    "DEFAULT_GPU_THREADS",
    "DEFAULT_TASK_BYTES",
    "GPU_BLOCKS_PER_SLOT",
    "GPU_DEVICE_SHARE",
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

logger = logging.getLogger(__name__)

#: Working set of one task when no memory limit is given.
DEFAULT_TASK_BYTES = 128 * 2**20
#: ... of one GPU task, and the smallest a GPU job's blocks are cut to: a GPU read or encode
#: costs a fixed latency per call (nvCOMP's), which small blocks pay over and over.
DEFAULT_GPU_TASK_BYTES = 2**30
#: Local threads of a GPU job when none are asked for: threads share one device, and more of
#: them only queue on it (docs/gpu_guide.md, "Measurements behind the GPU defaults": GPU
#: threads).
DEFAULT_GPU_THREADS = 2
#: Threads of each dask-cuda worker started by :func:`dask_cluster` (``gpus=``).
GPU_WORKER_THREADS = 1
#: Blocks a job is cut into per task that can run at once (workers x threads), when its working
#: set allows: a large memory limit must not leave one block, run by one worker, per job.
BLOCKS_PER_SLOT = 4
#: ... for a GPU job: a GPU task runs alone on its device and pays fixed costs per block
#: (nvCOMP's latency per call, tens of milliseconds for a decode of large frames and for any
#: encode; the first reads before the device starts, the last writes after it is done), so one
#: block per task that can run at once (docs/gpu_guide.md, "Measurements behind the GPU
#: defaults": GPU blocks per task).
GPU_BLOCKS_PER_SLOT = 1
#: A GPU task's working set stays within this share of its device's memory, shared by the
#: tasks that run on one device at once: the engine's scratch, nvCOMP's work space (1-3 GiB)
#: and the stitch's temporaries come on top.
GPU_DEVICE_SHARE = 0.25
#: ... but blocks are not cut smaller than this for it (a task's own cost would dominate).
SPLIT_FLOOR_BYTES = 64 * 2**20
#: The split's share of the job per block may exceed an even split by this factor: blocks grow
#: by doubling, and a block's working set holds parts that do not shrink with it (a tile, a
#: plane of weights), so the block of exactly 1/4 of a slot's share costs a hair more than that
#: share, and without slack a job comes out in 8 blocks per slot of half the size, which costs
#: most on a GPU, where an encode call costs about the same for 64 or 128 chunks
#: (docs/gpu_guide.md, "Measurements behind the GPU defaults": ``SPLIT_SLACK``).
SPLIT_SLACK = 1.25
#: Share of a worker's memory limit that its tasks' planned working sets may use; the rest is
#: left to what a plan does not count (zarr's and the read engine's buffers, the allocator).
TASK_SHARE = 0.75
#: Seconds to wait for an existing scheduler before giving up.
SCHEDULER_TIMEOUT_S = 3
#: What brings dask-cuda (the package index's ``linumpy`` is another project).
GPU_EXTRA_HINT = 'pip install -e ".[gpu-cu13]" (or ".[gpu-cu12]") from the linumpy checkout'


def parse_size(value: str | int) -> int:
    """Bytes in a size such as ``"2GiB"``, ``"512MB"`` or ``1048576``.

    Raises
    ------
    LinumpyError
        For anything that is not a positive size.

    Examples
    --------
    >>> from linumpy.parallel import parse_size
    >>> parse_size("2GiB"), parse_size("64 MiB"), parse_size("1.5GB"), parse_size(4096)
    (2147483648, 67108864, 1500000000, 4096)
    >>> parse_size("lots")
    Traceback (most recent call last):
        ...
    linumpy.errors.LinumpyError: 'lots' is not a size (examples: 512MiB, 2GiB, 1.5GB)
    """
    try:
        size = int(parse_bytes(value))
    except (ValueError, TypeError):
        size = 0
    if isinstance(value, str) and not any(c.isdigit() for c in value):
        size = 0  # dask reads "" as 1 byte
    if size <= 0:
        raise LinumpyError(f"{value!r} is not a size (examples: 512MiB, 2GiB, 1.5GB)")
    return size


def device_memory() -> int | None:
    """Memory of the smallest CUDA device this process can see (NVML), or None without one.

    Examples
    --------
    >>> from linumpy.parallel import device_memory
    >>> device_memory() is None or device_memory() > 0
    True
    """
    count = visible_gpus()
    if not count:
        return None
    try:
        from dask_cuda.utils import get_device_total_memory

        sizes = [get_device_total_memory(i) for i in range(count)]
    except Exception:  # no dask-cuda, NVML or device: the host limit alone bounds the blocks
        return None
    known = [int(size) for size in sizes if size]
    return min(known) if known else None


def visible_gpus() -> int:
    """Number of CUDA devices this process can see (0 without a driver or NVML).

    Examples
    --------
    >>> from linumpy.parallel import visible_gpus
    >>> visible_gpus() >= 0
    True
    """
    try:
        from dask_cuda.utils import get_n_gpus

        return int(get_n_gpus())
    except Exception:  # no dask-cuda, no driver, no NVML: no usable GPU for a cluster
        return 0


#: Allocations from this size up are mapped and unmapped one by one under a memory limit.
MMAP_THRESHOLD = 256 * 2**10


def release_freed_memory() -> bool:
    """Make glibc return large freed blocks to the system at once (Linux, glibc only).

    glibc raises its mmap threshold as large blocks are freed and then keeps later ones in its
    per-thread arenas: a process that allocates and frees block after block in several threads
    holds far more than it uses. Fixing the threshold (``mallopt(M_MMAP_THRESHOLD)``, what
    ``MALLOC_MMAP_THRESHOLD_`` does at start-up) keeps the resident size near the working set.
    ``dask.distributed``'s nanny does the like for its workers (``MALLOC_TRIM_THRESHOLD_``).

    Returns
    -------
    bool
        Whether the setting took effect.

    Examples
    --------
    >>> from linumpy.parallel import release_freed_memory
    >>> release_freed_memory() in (True, False)
    True
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    m_mmap_threshold = -3
    return bool(mallopt(m_mmap_threshold, MMAP_THRESHOLD))


def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


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


class Cluster:
    """Where dask work runs and how much memory each of its tasks may use.

    Build one with :func:`dask_cluster`; ``Cluster()`` alone is the local threaded scheduler
    with one thread per CPU and no memory limit.

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
        Memory of each GPU the tasks run on, which bounds a GPU task's working set
        (:data:`GPU_DEVICE_SHARE`); None: :func:`device_memory` for local threads and local GPU
        workers, no bound for a scheduler elsewhere (its workers' devices are not known here).

    Examples
    --------
    >>> import dask.array as da
    >>> from linumpy.parallel import Cluster
    >>> cluster = Cluster(memory_limit=2**30, threads=2)
    >>> cluster.task_bytes(minimum=2**20)  # each of the 2 threads: half of 3/4 of the limit
    402653184
    >>> int(cluster.compute(da.ones((10, 10), chunks=5).sum()))
    100
    """

    def __init__(
        self,
        client: Any | None = None,
        *,
        memory_limit: int | None = None,
        threads: int | None = None,
        gpus: int = 0,
        device_bytes: int | None = None,
    ) -> None:
        self.client = client
        self.memory_limit = memory_limit
        self.gpus = gpus
        self._device_bytes = device_bytes
        self._threads_given = threads is not None
        if threads is None:
            threads = _cpu_count() if client is None else _worker_threads(client)
        self.max_threads = max(1, int(threads))
        #: Tasks one worker runs at once in the current job (local threads: at most
        #: ``max_threads``, fewer when the memory limit needs it).
        self.threads = self.max_threads

    def __repr__(self) -> str:
        where = "threads" if self.client is None else f"scheduler {self.client.scheduler.address}"
        limit = "none" if self.memory_limit is None else format_bytes(self.memory_limit)
        return f"Cluster({where}, {self.threads} thread(s) per worker, memory limit {limit})"

    @property
    def slots(self) -> int:
        """Tasks that run at once: the workers times their threads (local threads: the threads).

        Examples
        --------
        >>> from linumpy.parallel import Cluster
        >>> Cluster(threads=3).slots
        3
        """
        if self.client is None:
            return self.threads
        return max(1, len(self.client.scheduler_info().get("workers", {}))) * self.threads

    def task_bytes(
        self, minimum: int, what: str = "this job", *, total: int | None = None, gpu: bool = False
    ) -> int:
        """The working set one task may use: :data:`TASK_SHARE` of the memory limit, shared by
        a worker's threads, and no more than ``total`` split into :data:`BLOCKS_PER_SLOT`
        (GPU: :data:`GPU_BLOCKS_PER_SLOT`) blocks per :attr:`slots` (down to
        :data:`SPLIT_FLOOR_BYTES`), so that every worker gets blocks to run; a GPU task's also
        within :data:`GPU_DEVICE_SHARE` of its device's memory (:meth:`device_bytes`).

        With the local threaded scheduler, fewer threads run when the limit cannot hold
        ``minimum`` bytes per thread. A ``gpu`` job uses :data:`DEFAULT_GPU_TASK_BYTES` (as the
        default and as the floor of the split) and, on local threads not set by the caller,
        :data:`DEFAULT_GPU_THREADS` threads.

        Parameters
        ----------
        minimum
            Working set of the job's smallest block, in bytes.
        what
            The job's name, for the error message.
        total
            Working set of the whole job as one block, in bytes, if known.
        gpu
            Whether the job's tasks run on the GPU.

        Raises
        ------
        MemoryLimitError
            When the limit is smaller than ``minimum`` (times a remote worker's threads).

        Examples
        --------
        >>> from linumpy.parallel import SPLIT_SLACK, Cluster
        >>> cluster = Cluster(memory_limit=4 * 2**20, threads=4)
        >>> cluster.task_bytes(minimum=2**20), cluster.threads  # 3 threads fit, not 4
        (1048576, 3)
        >>> big = Cluster(memory_limit=2**40, threads=2)  # ~4 blocks for each of 2 threads
        >>> big.task_bytes(minimum=2**20, total=2**32) == int(2**32 * SPLIT_SLACK) // 8
        True
        >>> from linumpy.parallel import DEFAULT_GPU_TASK_BYTES, DEFAULT_GPU_THREADS
        >>> local = Cluster()  # GPU jobs: fewer threads, larger blocks
        >>> local.task_bytes(2**20, gpu=True) == DEFAULT_GPU_TASK_BYTES
        True
        >>> local.threads <= DEFAULT_GPU_THREADS
        True
        """
        self.threads = self.max_threads
        if gpu and self.client is None and not self._threads_given:
            self.threads = min(self.max_threads, DEFAULT_GPU_THREADS)
        budget = self._limit_bytes(minimum, what, DEFAULT_GPU_TASK_BYTES if gpu else None)
        if total is not None:
            budget = self.split_bytes(budget, minimum, total, gpu=gpu)
        if gpu and (device := self.device_bytes()):
            budget = max(minimum, min(budget, int(device * GPU_DEVICE_SHARE) // self.threads))
        return budget

    def device_bytes(self) -> int | None:
        """Memory of the GPUs this cluster's GPU tasks run on, when known here.

        Examples
        --------
        >>> from linumpy.parallel import Cluster
        >>> Cluster(device_bytes=2**34).device_bytes()
        17179869184
        """
        if self._device_bytes is None and (self.client is None or self.gpus):
            self._device_bytes = device_memory() or 0
        return self._device_bytes or None

    def split_bytes(self, budget: int, minimum: int, total: int, *, gpu: bool = False) -> int:
        """``budget`` lowered so that a job of ``total`` bytes makes about
        :data:`BLOCKS_PER_SLOT` (GPU: :data:`GPU_BLOCKS_PER_SLOT`) blocks per :attr:`slots`
        (:data:`SPLIT_SLACK`), but not below
        :data:`SPLIT_FLOOR_BYTES` (GPU: :data:`DEFAULT_GPU_TASK_BYTES`) nor ``minimum``:
        :meth:`task_bytes` with ``total``."""
        floor = DEFAULT_GPU_TASK_BYTES if gpu else SPLIT_FLOOR_BYTES
        per_slot = GPU_BLOCKS_PER_SLOT if gpu else BLOCKS_PER_SLOT
        share = max(floor, int(total * SPLIT_SLACK) // (per_slot * self.slots))
        return max(minimum, min(budget, share))

    def _limit_bytes(self, minimum: int, what: str, default: int | None) -> int:
        if self.memory_limit is None:
            return max(minimum, default or DEFAULT_TASK_BYTES)
        usable = int(self.memory_limit * TASK_SHARE)
        if usable // self.threads >= minimum:
            return usable // self.threads
        if self.client is not None:
            needed = math.ceil(minimum * self.threads / TASK_SHARE)
            raise MemoryLimitError(self.memory_limit, needed, what)
        fit = usable // minimum
        if fit < 1:
            raise MemoryLimitError(self.memory_limit, math.ceil(minimum / TASK_SHARE), what)
        logger.info("%s: %d thread(s) fit the memory limit, not %d", what, fit, self.threads)
        self.threads = int(fit)
        return usable // self.threads

    def compute(self, collection: Any, *, desc: str = "dask", progress: bool = False) -> Any:
        """Compute a dask collection here, with a progress bar over its tasks.

        With a distributed client the bar counts the collection's output blocks as they finish.

        Examples
        --------
        >>> import dask.array as da
        >>> from linumpy.parallel import Cluster
        >>> Cluster(threads=1).compute(da.arange(6, chunks=2) * 2)
        array([ 0,  2,  4,  6,  8, 10])
        """
        # delay: no bar is drawn before the task count is known (reset draws the first one)
        with tqdm(desc=desc, unit="task", disable=not progress, total=0, delay=1e-9) as bar:
            if self.client is None:
                # A pool of its own: on an error or Ctrl-C the tasks already running finish
                # before the caller cleans up (an aborted write's tasks would recreate its files).
                pool = ThreadPoolExecutor(self.threads, thread_name_prefix="linumpy-dask")
                try:
                    with _TaskBar(bar):
                        # the threaded get itself: scheduler="threads" would import distributed
                        return dask.compute(collection, scheduler=dask.threaded.get, pool=pool)[0]
                finally:
                    pool.shutdown(wait=True, cancel_futures=True)
            from distributed import as_completed, futures_of

            persisted = self.client.persist(collection)
            futures = futures_of(persisted)
            bar.reset(total=len(futures))
            for _ in as_completed(futures):
                bar.update()
            return self.client.compute(persisted, sync=True)


def _worker_threads(client: Any) -> int:
    workers = client.scheduler_info().get("workers", {})
    return min((w.get("nthreads", 1) for w in workers.values()), default=1)


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
            f"--gpus {gpus} needs dask-cuda, which is not installed: {GPU_EXTRA_HINT}"
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
    threads: int | None = None,
) -> Iterator[Cluster]:
    """Yield a :class:`Cluster`: an existing scheduler, a dask-cuda cluster, or local threads.

    Parameters
    ----------
    memory_limit
        Working set per worker (``"2GiB"``, bytes); blocks are sized so that one worker's tasks
        fit it. With a scheduler, the workers' own limit is used when this is None.
    scheduler
        Address of a running ``dask.distributed`` scheduler (``tcp://host:8786``).
    gpus
        Start a dask-cuda ``LocalCUDACluster`` with one worker per GPU on this many GPUs.
    threads
        Threads of the local scheduler (the CPUs by default).

    Raises
    ------
    ClusterError
        For an unreachable scheduler (after a few seconds), more GPUs than are visible,
        dask-cuda missing, or ``scheduler`` and ``gpus`` together.
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
        yield Cluster(memory_limit=limit, threads=threads)
        return
    from distributed import Client

    with ExitStack() as stack:
        if scheduler is not None:
            client = stack.enter_context(_connect(scheduler))
        else:
            cluster = stack.enter_context(_start_cuda_cluster(gpus))
            client = stack.enter_context(Client(cluster))
        yield Cluster(client, memory_limit=limit or _worker_memory(client), gpus=gpus or 0)
