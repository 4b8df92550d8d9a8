"""How large a dask job's blocks are: sizes given as text, and the policy that cuts a job into
blocks that fit a worker's memory limit (and a GPU's memory) and keep every worker busy.

:meth:`linumpy.parallel.Cluster.task_bytes` applies this policy to a cluster's workers and
threads; the constants here are the policy's figures, documented with :mod:`linumpy.parallel`
(docs/gpu_guide.md, "Measurements behind the GPU defaults", says how the GPU ones were chosen).
"""

from __future__ import annotations

import logging
import math

from dask.utils import parse_bytes

from linumpy.errors import LinumpyError, MemoryLimitError

# The policy's figures below are public too, and documented with linumpy.parallel, which
# exports them.
__all__ = ["limit_bytes", "parse_size", "split_bytes"]

logger = logging.getLogger(__name__)

#: Working set of one task when no memory limit is given.
DEFAULT_TASK_BYTES = 128 * 2**20
#: ... of one GPU task, and the smallest a GPU job's blocks are cut to: a GPU read or encode
#: costs a fixed latency per call (nvCOMP's), which small blocks pay over and over.
DEFAULT_GPU_TASK_BYTES = 2**30
#: ... of a GPU task that only reads and reduces its block (the projection): each GPU read pays
#: a fixed cost (its first group's fetch, its last group's decode), which larger tasks pay
#: less often.
GPU_READ_TASK_BYTES = 2 * 2**30
#: Local threads of a GPU job when none are asked for: threads share one device, and more of
#: them only queue on it.
DEFAULT_GPU_THREADS = 2
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


def split_bytes(
    budget: int,
    minimum: int,
    total: int,
    slots: int,
    *,
    gpu: bool = False,
    gpu_task_bytes: int = DEFAULT_GPU_TASK_BYTES,
) -> int:
    """``budget`` lowered so that a job of ``total`` bytes makes about ``BLOCKS_PER_SLOT``
    (GPU: ``GPU_BLOCKS_PER_SLOT``) blocks per task that runs at once (``slots``, with
    ``SPLIT_SLACK``), but not below ``SPLIT_FLOOR_BYTES`` (GPU: ``gpu_task_bytes``) nor
    ``minimum``.

    Examples
    --------
    >>> from linumpy.parallel.block_sizes import split_bytes
    >>> split_bytes(2**40, 2**20, 2**32, slots=2) == int(2**32 * 1.25) // 8
    True
    >>> split_bytes(2**40, 2**20, 2**20, slots=2)  # never below the floor: 64 MiB
    67108864
    """
    floor = gpu_task_bytes if gpu else SPLIT_FLOOR_BYTES
    per_slot = GPU_BLOCKS_PER_SLOT if gpu else BLOCKS_PER_SLOT
    share = max(floor, int(total * SPLIT_SLACK) // (per_slot * slots))
    return max(minimum, min(budget, share))


def limit_bytes(
    memory_limit: int | None,
    threads: int,
    minimum: int,
    what: str,
    *,
    default: int | None = None,
    fewer_threads: bool = True,
) -> tuple[int, int]:
    """The working set each of a worker's ``threads`` may use under ``memory_limit``
    (``TASK_SHARE`` of it, shared by the threads), and the threads that then run.

    Without a limit, ``default`` (or ``DEFAULT_TASK_BYTES``), at least ``minimum``. When the
    limit cannot hold ``minimum`` bytes per thread, fewer threads run (``fewer_threads``, the
    local scheduler's case) or :class:`~linumpy.errors.MemoryLimitError` is raised (a remote
    worker's threads are not ours to change).

    Raises
    ------
    MemoryLimitError
        When the limit is smaller than ``minimum`` (times the threads, when they are fixed).

    Examples
    --------
    >>> from linumpy.parallel.block_sizes import limit_bytes
    >>> limit_bytes(4 * 2**20, 4, 2**20, "this job")  # 3 threads fit, not 4
    (1048576, 3)
    >>> limit_bytes(None, 4, 2**20, "this job")  # no limit: 128 MiB per task
    (134217728, 4)
    """
    if memory_limit is None:
        return max(minimum, default or DEFAULT_TASK_BYTES), threads
    usable = int(memory_limit * TASK_SHARE)
    if usable // threads >= minimum:
        return usable // threads, threads
    if not fewer_threads:
        needed = math.ceil(minimum * threads / TASK_SHARE)
        raise MemoryLimitError(memory_limit, needed, what)
    fit = usable // minimum
    if fit < 1:
        raise MemoryLimitError(memory_limit, math.ceil(minimum / TASK_SHARE), what)
    logger.info("%s: %d thread(s) fit the memory limit, not %d", what, fit, threads)
    return usable // int(fit), int(fit)
