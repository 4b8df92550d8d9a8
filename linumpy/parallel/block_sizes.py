"""Sizes given as text, and the figures of the policy that cuts a dask job into blocks, which
:meth:`linumpy.parallel.Cluster.task_bytes` applies (docs/gpu_guide.md, "Measurements behind the
GPU defaults", says how the GPU ones were chosen)."""

from __future__ import annotations

from dask.utils import parse_bytes

from linumpy.errors import LinumpyError

__all__ = ["parse_size"]

#: Working set of one task when no memory limit is given.
DEFAULT_TASK_BYTES = 128 * 2**20
#: ... of one GPU task, and the smallest a GPU job's blocks are cut to: a GPU read or encode
#: costs a fixed latency per call (nvCOMP's), which small blocks pay over and over.
DEFAULT_GPU_TASK_BYTES = 2**30
#: ... of a GPU task that only reads and reduces its block (the projection): each GPU read pays
#: a fixed cost, which larger tasks pay less often.
GPU_READ_TASK_BYTES = 2 * 2**30
#: Local threads of a GPU job when none are asked for: threads share one device, and more of
#: them only queue on it.
DEFAULT_GPU_THREADS = 2
#: Blocks a job is cut into per task that can run at once (workers x threads), when its working
#: set allows: a large memory limit must not leave one block, run by one worker, per job.
BLOCKS_PER_SLOT = 4
#: ... for a GPU job: a GPU task runs alone on its device and pays fixed costs per block
#: (nvCOMP's latency per call; docs/gpu_guide.md, "Measurements behind the GPU defaults").
GPU_BLOCKS_PER_SLOT = 1
#: A GPU task's working set stays within this share of its device's memory, shared by the tasks
#: on the device at once (the engine's scratch, nvCOMP's work space, temporaries come on top).
GPU_DEVICE_SHARE = 0.25
#: ... but blocks are not cut smaller than this for it (a task's own cost would dominate).
SPLIT_FLOOR_BYTES = 64 * 2**20
#: The split's share of the job per block may exceed an even split by this factor: a block's
#: working set holds parts that do not shrink with it (a tile, a plane of weights), and without
#: slack a job comes out in twice the blocks of half the size (docs/gpu_guide.md).
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
    >>> parse_size("2GiB"), parse_size("1.5GB"), parse_size(4096)
    (2147483648, 1500000000, 4096)
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
