"""Zarr volumes straight into GPU memory: batched reads, nvCOMP decode, one scatter per batch.

Two ways to get a zarr array onto the GPU:

- :func:`read_zarr_to_gpu` (what ``linumpy.io.read_volume(path, gpu=True)`` calls) reads a whole
  array or a region through the read plan shared with the CPU reader (:mod:`linumpy.io.plan`).
  Batches of compressed chunks are read into pinned host memory (a thread pool of ``os.preadv``,
  or kvikio's ``CuFile.pread`` when kvikio works here), their zstd frames are checked on the CPU,
  the batch goes to the device in one copy, nvCOMP decodes it in one call into device memory, and
  one kernel scatters every chunk into the output (fill value for chunks that are not stored).
  Reading batch k+1 overlaps the GPU work of batch k. Layouts the plan does not take fall back to
  :func:`gpu_zarr_context` (the reason is logged).
- :func:`gpu_zarr_context` makes zarr itself return cupy arrays and decode zstd with nvCOMP, for
  arbitrary slicing and for writing cupy arrays (GPU encode).

Memory. Decoded chunks go to rows of the output that no batch has written yet, or to their own
rows (copied out a row of chunks at a time before scattering), or to the read's device buffer;
the device memory linumpy allocates beyond the output stays under ``scratch_bytes``, pinned host
memory under ``pinned_bytes``. nvCOMP holds a work space of its own that grows with the batch
(about 1.5 times the decoded bytes of 4 MiB chunks); ``batch_bytes`` bounds it.

Settings (:class:`GpuReadSettings`) have defaults, environment variables and keyword overrides:

======================  ==============================  ===========================================
setting                 environment variable            default
======================  ==============================  ===========================================
``io_threads``          ``LINUMPY_IO_THREADS``          CPUs available to the process
``pinned_bytes``        ``LINUMPY_GPU_PINNED_MIB``      1024 MiB (two staging buffers)
``scratch_bytes``       ``LINUMPY_GPU_SCRATCH_MIB``     640 MiB
``fetch``               ``LINUMPY_GPU_FETCH``           ``auto`` (kvikio if it works, else pread)
``batch_bytes``         ``LINUMPY_GPU_BATCH_MIB``       0: no limit on decoded bytes per batch
``gpu_chunk_bytes``     ``LINUMPY_GPU_CHUNK_MIB``       16 MiB: larger chunks decode on the CPU
======================  ==============================  ===========================================

CPU-only use never imports nvCOMP or kvikio and never creates a CUDA context: cupy, nvCOMP and
kvikio are imported when a GPU read starts.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import zarr

from linumpy.errors import ChunkDecodeError, GPUUnavailableError, LinumpyError
from linumpy.gpu._fetch import (
    ALIGN,
    FRAME_CHECKSUM,
    FRAME_GPU,
    FRAME_NEEDS_CHECK,
    align_up,
    check_frames,
    chunk_sizes,
    kvikio_unusable_reason,
    pinned_buffers,
    read_into,
    use_kvikio_threads,
)
from linumpy.gpu.nvcomp_zstd import gpu_unavailable_reason, nvcomp_context
from linumpy.io.omezarr import open_array
from linumpy.io.plan import (
    ChunkRead,
    ReadPlan,
    UnsupportedLayoutError,
    parse_region,
    plan_read,
)
from linumpy.io.reader import default_threads, fetch_chunk
from linumpy.io.zstd_frames import decode_zstd_cpu, inspect_zstd_chunk

if TYPE_CHECKING:
    import cupy

__all__ = [
    "DeviceMemoryError",
    "GpuReadReport",
    "GpuReadRoute",
    "GpuReadSettings",
    "describe_gpu",
    "gpu_read_route",
    "gpu_unavailable_reason",
    "gpu_zarr_context",
    "last_read_report",
    "read_zarr_to_gpu",
]

logger = logging.getLogger(__name__)

PINNED_ENV = "LINUMPY_GPU_PINNED_MIB"
SCRATCH_ENV = "LINUMPY_GPU_SCRATCH_MIB"
FETCH_ENV = "LINUMPY_GPU_FETCH"
BATCH_ENV = "LINUMPY_GPU_BATCH_MIB"
GPU_CHUNK_ENV = "LINUMPY_GPU_CHUNK_MIB"
MIB = 1024 * 1024
_FETCH_CHOICES = ("auto", "kvikio", "pread")
# Decoded chunks placed in the output start on this boundary.
_TARGET_ALIGN = 256


class DeviceMemoryError(LinumpyError, MemoryError):
    """A GPU read would not fit in the device's free memory (raised before allocating).

    Examples
    --------
    It is a :class:`MemoryError`; a region that fits is the way out:

    >>> issubclass(DeviceMemoryError, MemoryError)
    True
    >>> try:  # doctest: +SKIP
    ...     volume = read_zarr_to_gpu("huge.ome.zarr")
    ... except DeviceMemoryError:
    ...     volume = read_zarr_to_gpu("huge.ome.zarr", region=(slice(0, 256),))
    """


# --- settings ---------------------------------------------------------------------------------


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _env_mib(name: str, default_mib: int, minimum: int = 1) -> int:
    value = os.environ.get(name)
    if value is None:
        return default_mib * MIB
    try:
        mib = int(value)
    except ValueError:
        mib = -1
    if mib < minimum:
        least = "a positive" if minimum else "0 or a positive"
        raise ValueError(f"{name} must be {least} number of MiB, got {value!r}")
    return mib * MIB


def parse_fetch(value: object, name: str = "fetch") -> Literal["auto", "kvikio", "pread"]:
    """Check a fetch method name: ``"auto"``, ``"kvikio"`` or ``"pread"``."""
    if value not in _FETCH_CHOICES:
        raise ValueError(f"{name} must be one of {', '.join(_FETCH_CHOICES)}; got {value!r}")
    return value  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class GpuReadSettings:
    """Resources of one :func:`read_zarr_to_gpu` call.

    Attributes
    ----------
    io_threads
        Threads reading chunk files (and kvikio's thread pool size, unless ``KVIKIO_NTHREADS`` is
        set).
    pinned_bytes
        Page-locked host memory for staging compressed chunks, split in two buffers so that one is
        filled while the other is copied to the device.
    scratch_bytes
        Device memory beyond the output for compressed chunks and decoded chunks that cannot go to
        the output directly; at least one decoded chunk is always allowed.
    fetch
        ``"auto"`` (kvikio when it can read files here, else ``os.preadv``), ``"kvikio"`` or
        ``"pread"``.
    batch_bytes
        Most decoded bytes per nvCOMP call (at least one chunk), 0 for no limit. nvCOMP keeps a
        work space that grows with the batch (measured on an H200: 1568 MiB after one call of
        256 chunks of 4 MiB), so this bounds its memory; larger batches decode faster, because
        nvCOMP decodes one large chunk per multiprocessor, slowly.
    gpu_chunk_bytes
        Largest decoded chunk that nvCOMP decodes; larger chunks are decoded by libzstd in the
        reading threads and copied to the device. nvCOMP decodes a chunk on one multiprocessor,
        block after block: on an H200 a 2 GiB grid of 32 MiB chunks took 2.1 s through nvCOMP
        against 0.46 s through the CPU reader (16 cores).

    Examples
    --------
    >>> settings = GpuReadSettings.from_env(io_threads=4, pinned_bytes=256 * 2**20, fetch="pread")
    >>> settings.io_threads, settings.pinned_bytes // 2**20, settings.fetch
    (4, 256, 'pread')
    >>> GpuReadSettings.from_env(fetch="nvme")
    Traceback (most recent call last):
    ...
    ValueError: fetch must be one of auto, kvikio, pread; got 'nvme'
    >>> volume = read_zarr_to_gpu("volume.ome.zarr", settings=settings)  # doctest: +SKIP
    """

    io_threads: int
    pinned_bytes: int
    scratch_bytes: int
    fetch: Literal["auto", "kvikio", "pread"]
    batch_bytes: int = 0
    gpu_chunk_bytes: int = 16 * MIB

    def __post_init__(self) -> None:
        _positive_int("io_threads", self.io_threads)
        _positive_int("pinned_bytes", self.pinned_bytes)
        _positive_int("scratch_bytes", self.scratch_bytes)
        parse_fetch(self.fetch)
        _positive_int("gpu_chunk_bytes", self.gpu_chunk_bytes)
        if isinstance(self.batch_bytes, bool) or not isinstance(self.batch_bytes, int):
            raise ValueError(f"batch_bytes must be an integer, got {self.batch_bytes!r}")
        if self.batch_bytes < 0:
            raise ValueError(
                f"batch_bytes must be 0 (no limit) or positive, got {self.batch_bytes}"
            )

    @classmethod
    def from_env(cls, **overrides: Any) -> GpuReadSettings:
        """Defaults, then environment variables, then ``overrides`` (keyword per attribute)."""
        settings = cls(
            io_threads=default_threads(),
            pinned_bytes=_env_mib(PINNED_ENV, 1024),
            scratch_bytes=_env_mib(SCRATCH_ENV, 640),
            fetch=parse_fetch(os.environ.get(FETCH_ENV, "auto"), FETCH_ENV),
            batch_bytes=_env_mib(BATCH_ENV, 0, minimum=0),
            gpu_chunk_bytes=_env_mib(GPU_CHUNK_ENV, 16),
        )
        return replace(settings, **overrides)


# --- GPU availability and zarr's own GPU path -------------------------------------------------


def _require_gpu(what: str) -> None:
    reason = gpu_unavailable_reason()
    if reason is not None:
        raise GPUUnavailableError(
            f"{what} needs an NVIDIA GPU with cupy and nvCOMP: {reason}. Install the GPU extra "
            "(pip install 'linumpy[gpu-cu13]' or '[gpu-cu12]') on a machine with a CUDA driver"
        )


_context_lock = threading.Lock()
_context_depth = 0
_context_stack: ExitStack | None = None


@contextmanager
def gpu_zarr_context() -> Iterator[None]:
    """Make zarr return cupy arrays and run its ``zstd`` codec on the GPU (nvCOMP) inside the block.

    Arrays opened inside the block return ``cupy.ndarray`` slices and accept cupy arrays on
    write (encoded on the GPU); zarr fixes an array's codecs when it opens it, so open arrays
    inside. zarr's config is process-wide: the block applies ``zarr.config.enable_gpu()`` and
    :func:`linumpy.gpu.nvcomp_zstd.gpu_zstd_config` when the first such block is entered (by any
    thread) and restores the previous config when the last one exits, so blocks nest and
    overlap across threads safely.

    Raises
    ------
    GPUUnavailableError
        When cupy, nvCOMP or a CUDA device is missing.

    Examples
    --------
    >>> with gpu_zarr_context():  # doctest: +SKIP
    ...     volume = zarr.open_array("volume.zarr", mode="r")[:64]  # cupy.ndarray
    """
    from linumpy.gpu.nvcomp_zstd import gpu_zstd_config, register_nvcomp_zstd

    _require_gpu("gpu_zarr_context()")
    if not register_nvcomp_zstd():
        raise GPUUnavailableError("the nvCOMP zstd codec could not be registered with zarr")
    global _context_depth, _context_stack
    with _context_lock:
        if _context_depth == 0:
            stack = ExitStack()
            stack.enter_context(zarr.config.enable_gpu())
            stack.enter_context(zarr.config.set(gpu_zstd_config()))
            _context_stack = stack
        _context_depth += 1
    try:
        yield
    finally:
        with _context_lock:
            _context_depth -= 1
            if _context_depth == 0 and _context_stack is not None:
                _context_stack.close()
                _context_stack = None


def describe_gpu() -> dict[str, str]:
    """What the GPU read path would use here: device, CUDA versions, libraries, GPUDirect Storage.

    Returns
    -------
    dict
        Human-readable values keyed ``device``, ``driver``, ``runtime``, ``cupy``, ``nvcomp``,
        ``kvikio`` and ``gds``; an entry says "missing" or why it is unknown.

    Examples
    --------
    >>> sorted(describe_gpu())
    ['cupy', 'device', 'driver', 'gds', 'kvikio', 'nvcomp', 'runtime']

    On a machine without cupy:

    >>> describe_gpu()["device"]  # doctest: +SKIP
    "unavailable: cupy is not installed (No module named 'cupy')"
    """
    info = {"device": "none", "driver": "-", "runtime": "-", "cupy": "missing"}
    info |= {"nvcomp": "missing", "kvikio": "missing", "gds": "-"}
    reason = gpu_unavailable_reason()
    if reason is not None:
        info["device"] = f"unavailable: {reason}"
    try:
        import cupy

        info["cupy"] = cupy.__version__
        if reason is None:
            runtime = cupy.cuda.runtime
            device = runtime.getDevice()
            props = runtime.getDeviceProperties(device)
            free, total = runtime.memGetInfo()
            name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
            info["device"] = f"{device}: {name}, {_size(total)} ({_size(free)} free)"
            info["driver"] = _cuda_version(runtime.driverGetVersion())
            info["runtime"] = _cuda_version(runtime.runtimeGetVersion())
    except ImportError:
        pass
    try:
        from nvidia import nvcomp

        info["nvcomp"] = str(nvcomp.__version__)
    except ImportError:
        pass
    if reason is None:
        kvikio_reason = kvikio_unusable_reason()
        if kvikio_reason is None:
            import kvikio
            import kvikio.cufile_driver
            import kvikio.defaults

            info["kvikio"] = kvikio.__version__
            try:
                gds = bool(kvikio.cufile_driver.get("is_gds_available"))
            except Exception as exc:  # cuFile missing or too old to say
                gds = False
                info["kvikio"] += f" (cuFile: {exc})"
            compat = kvikio.defaults.is_compat_mode_preferred()
            info["gds"] = (
                "compat mode (POSIX reads by kvikio's thread pool)"
                if compat or not gds
                else "GPUDirect Storage live"
            )
        else:
            info["kvikio"] = kvikio_reason
    return info


def _cuda_version(version: int) -> str:
    return f"{version // 1000}.{version % 1000 // 10}"


# --- routing ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuReadRoute:
    """How :func:`read_zarr_to_gpu` will read an array.

    Attributes
    ----------
    path
        ``"fast"`` (batched reads, nvCOMP, scatter kernel), ``"zarr"`` (:func:`gpu_zarr_context`)
        or ``"unavailable"`` (no usable GPU: reading raises :class:`GPUUnavailableError`).
    reason
        Why: the fast path's obstacle, or what the GPU lacks.
    reader
        For the fast path, how files are read (``"kvikio"`` or ``"pread"``), else None.
    n_reads, n_missing
        Chunks the plan reads, and chunks known not to be stored.

    Examples
    --------
    For half the array of :func:`gpu_read_route`'s example, on a GPU where kvikio works:

    >>> route = gpu_read_route(array, region=(slice(0, 8),))  # doctest: +SKIP
    >>> route.path, route.reader, route.n_reads, route.n_missing  # doctest: +SKIP
    ('fast', 'kvikio', 2, 0)
    """

    path: Literal["fast", "zarr", "unavailable"]
    reason: str
    reader: str | None = None
    n_reads: int = 0
    n_missing: int = 0


def _fast_path_obstacle(plan: ReadPlan) -> str | None:
    """Why the fast path cannot produce this plan's output on the GPU, or None."""
    dtype = plan.dtype
    components = 2 if dtype.kind == "c" else 1
    if dtype.kind not in "biufc" or dtype.itemsize // components not in (1, 2, 4, 8):
        return f"dtype {dtype} has no cupy equivalent"
    if plan.chunk_nbytes >= 2**31:
        return f"chunks of {plan.chunk_nbytes} bytes exceed nvCOMP's zstd limit of 2 GiB"
    return None


def _choose_reader(fetch: str, threads: int) -> tuple[str, str]:
    """The file reader for ``fetch`` and why it was chosen."""
    if fetch == "pread":
        return "pread", "requested"
    reason = kvikio_unusable_reason()
    if reason is None:
        use_kvikio_threads(threads)
        return "kvikio", "kvikio reads files here"
    if fetch == "kvikio":
        raise GPUUnavailableError(f"{FETCH_ENV}/fetch='kvikio' was asked for, but {reason}")
    return "pread", reason


def _open(source: str | os.PathLike[str] | zarr.Array) -> zarr.Array:
    return source if isinstance(source, zarr.Array) else open_array(source)


def gpu_read_route(
    source: str | os.PathLike[str] | zarr.Array,
    *,
    region: slice | Sequence[slice] | None = None,
    settings: GpuReadSettings | None = None,
) -> GpuReadRoute:
    """Say which path :func:`read_zarr_to_gpu` takes for ``source[region]``, without reading it.

    Parameters
    ----------
    source
        A path (OME-Zarr image or zarr array) or a ``zarr.Array``.
    region
        The part to read, as for :func:`read_zarr_to_gpu`.
    settings
        As for :func:`read_zarr_to_gpu`.

    Returns
    -------
    GpuReadRoute
        The path, the reason and the plan's chunk counts.

    Examples
    --------
    >>> import tempfile, zarr
    >>> array = zarr.create_array(tempfile.mkdtemp() + "/a.zarr", shape=(16, 16), chunks=(8, 8),
    ...                           dtype="uint8")
    >>> array[...] = 1
    >>> gpu_read_route(array).n_reads, gpu_read_route(array, region=(slice(0, 8),)).n_reads
    (4, 2)
    >>> gpu_read_route(array, settings=GpuReadSettings.from_env(fetch="pread"))  # doctest: +SKIP
    GpuReadRoute(path='fast', reason='requested', reader='pread', n_reads=4, n_missing=0)

    On a machine without cupy:

    >>> gpu_read_route(array).reason  # doctest: +SKIP
    "cupy is not installed (No module named 'cupy'); with a GPU: the fast path"
    """
    array = _open(source)
    plan = None
    try:
        plan = plan_read(array, region)
        obstacle = _fast_path_obstacle(plan)
    except UnsupportedLayoutError as exc:
        obstacle = str(exc)
    counts = (len(plan.reads), len(plan.missing)) if plan is not None else (0, 0)
    reason = gpu_unavailable_reason()
    if reason is not None:
        would = "the fast path" if obstacle is None else f"zarr's GPU path ({obstacle})"
        return GpuReadRoute("unavailable", f"{reason}; with a GPU: {would}", None, *counts)
    if obstacle is not None:
        return GpuReadRoute("zarr", obstacle, None, *counts)
    settings = settings or GpuReadSettings.from_env()
    reader, why = _choose_reader(settings.fetch, settings.io_threads)
    return GpuReadRoute("fast", why, reader, *counts)


# --- batch planning (pure, CPU-testable) ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Segment:
    """Part of a batch scattered by one kernel launch.

    Attributes
    ----------
    start, stop
        The batch's reads ``reads[start:stop]`` scattered here.
    fills
        Entries (not stored) filled with the fill value here.
    copy_offset, copy_nbytes
        When ``copy_offset >= 0``, the reads were decoded into their own rows of the output:
        ``copy_nbytes`` bytes from that offset are first copied to the start of the device buffer
        and the scatter reads them there. -1 when the scatter reads the decoded slots directly.
    """

    start: int
    stop: int
    fills: np.ndarray
    copy_offset: int = -1
    copy_nbytes: int = 0


@dataclass(frozen=True, slots=True)
class Batch:
    """Chunks handled together: one host->device copy and one nvCOMP call.

    The batch's compressed chunks go to the start of the read's device buffer; that buffer also
    holds decoded chunks when they fit nowhere in the output, and the copies of chunks decoded in
    their own rows (the compressed bytes are no longer needed by then).

    Attributes
    ----------
    reads
        Indices (into the plan's entries) of the chunks decoded in this batch.
    staging_offsets
        Per read: offset in the staging buffer, or -1 for a chunk too large for it (read and
        decoded on the CPU).
    staging_nbytes
        Bytes of the staging buffer in use (and copied to the device buffer).
    in_output
        Whether the decoded slots lie in the output (rows not written yet, or the reads' own
        rows) rather than in the device buffer.
    slots
        Per read: byte offset of its decoded chunk in the output or the device buffer.
    segments
        The scatters, in order.
    device_nbytes
        Bytes of the device buffer the batch uses.
    """

    reads: np.ndarray
    staging_offsets: np.ndarray
    staging_nbytes: int
    in_output: bool
    slots: np.ndarray
    segments: tuple[Segment, ...]
    device_nbytes: int

    @property
    def fills(self) -> np.ndarray:
        """Entries of the batch that are not stored."""
        return np.concatenate([np.zeros(0, np.int64), *(s.fills for s in self.segments)])


@dataclass(slots=True)
class _Slab:
    """Entries sharing their last output row: a row of chunks."""

    reads: list[int] = field(default_factory=list)
    fills: list[int] = field(default_factory=list)
    staged: int = 0
    start: int = 0  # first output byte of its rows
    end: int = 0  # output byte past its rows


def plan_batches(
    row_start: np.ndarray,
    row_end: np.ndarray,
    sizes: np.ndarray,
    *,
    slot_nbytes: int,
    out_nbytes: int,
    out_misalign: int,
    staging_capacity: int,
    device_capacity: int,
    batch_capacity: int = 0,
) -> list[Batch]:
    """Group chunks into batches that fit the staging buffer and the device buffer.

    Chunks are taken in output order, a row of chunks (a slab) at a time. A batch's chunks are
    decoded where they cost no device memory when possible: into rows of the output that no batch
    has written yet (after the batch's rows); else into the device buffer after the compressed
    chunks; else, when each of its slabs' chunks fit in the slab's own rows, into those rows
    (copied to the device buffer one slab at a time before scattering). Slabs that fit none of
    these are split.

    Parameters
    ----------
    row_start, row_end
        Per entry, byte offsets in the output of the first row it writes and past its last row.
    sizes
        Per entry, compressed size, or -1 for an entry that is not stored.
    slot_nbytes
        Bytes of one decoded slot (a chunk's size, aligned).
    out_nbytes, out_misalign
        Size of the output and its address modulo the target alignment.
    staging_capacity, device_capacity
        Bytes available for a batch's compressed chunks, and in the device buffer.
    batch_capacity
        Most decoded bytes per batch (at least one chunk); 0 for no limit.

    Returns
    -------
    list of Batch
        In the order they must run.
    """
    device_capacity = max(device_capacity, slot_nbytes + align_up(staging_capacity))
    batch_capacity = max(batch_capacity, slot_nbytes) if batch_capacity else 2**62

    def tail_offset(end: int) -> int:
        return align_up(out_misalign + end, _TARGET_ALIGN) - out_misalign

    def in_tail(decoded: int, end: int) -> bool:
        return decoded <= out_nbytes - tail_offset(end)

    def room(entry: int) -> int:
        return align_up(int(sizes[entry])) if sizes[entry] <= staging_capacity else 0

    def own_rows(slab: _Slab) -> bool:
        decoded = len(slab.reads) * slot_nbytes
        aligned = (out_misalign + slab.start) % ALIGN == 0
        return aligned and decoded <= min(slab.end - slab.start, device_capacity)

    def feasible(slabs: list[_Slab]) -> bool:
        staged = sum(s.staged for s in slabs)
        decoded = sum(len(s.reads) for s in slabs) * slot_nbytes
        return (
            staged <= staging_capacity
            and decoded <= batch_capacity
            and (
                in_tail(decoded, slabs[-1].end)
                or staged + decoded <= device_capacity
                or all(own_rows(s) for s in slabs)
            )
        )

    def make(slabs: list[_Slab]) -> Batch:
        reads = [e for s in slabs for e in s.reads]
        fills = np.array([e for s in slabs for e in s.fills], dtype=np.int64)
        offsets, staged = [], 0
        for entry in reads:
            offsets.append(staged if room(entry) else -1)
            staged += room(entry)
        head = (np.array(reads, dtype=np.int64), np.array(offsets, dtype=np.int64), staged)
        n = len(reads)
        index = np.arange(n, dtype=np.int64) * slot_nbytes
        end = slabs[-1].end
        if in_tail(n * slot_nbytes, end):
            slots = tail_offset(end) + index
            return Batch(*head, True, slots, (Segment(0, n, fills),), staged)
        if staged + n * slot_nbytes <= device_capacity:
            slots = staged + index
            return Batch(*head, False, slots, (Segment(0, n, fills),), staged + n * slot_nbytes)
        slot_list, segments, first = [], [], 0
        for slab in slabs:
            k = len(slab.reads)
            slot_list.extend(slab.start + j * slot_nbytes for j in range(k))
            segment_fills = np.array(slab.fills, dtype=np.int64)
            segments.append(Segment(first, first + k, segment_fills, slab.start, k * slot_nbytes))
            first += k
        used = max(staged, max(s.copy_nbytes for s in segments))
        return Batch(*head, True, np.array(slot_list, dtype=np.int64), tuple(segments), used)

    def split(slab: _Slab) -> list[Batch]:
        """Batches of a slab too large for one: consecutive pieces, in the tail or the buffer."""
        pieces: list[_Slab] = [_Slab(start=slab.start, end=slab.end)]
        for entry in slab.reads:
            piece = pieces[-1]
            staged = piece.staged + room(entry)
            decoded = (len(piece.reads) + 1) * slot_nbytes
            fits = in_tail(decoded, slab.end) or staged + decoded <= device_capacity
            fits = fits and decoded <= batch_capacity
            if piece.reads and (staged > staging_capacity or not fits):
                piece = _Slab(start=slab.start, end=slab.end)
                pieces.append(piece)
            piece.reads.append(entry)
            piece.staged += room(entry)
        pieces[-1].fills = slab.fills
        return [make([piece]) for piece in pieces]

    slabs: list[_Slab] = []
    for entry in np.argsort(row_end, kind="stable").tolist():
        if not slabs or slabs[-1].end != row_end[entry]:
            slabs.append(_Slab(start=int(row_start[entry]), end=int(row_end[entry])))
        slab = slabs[-1]
        slab.start = min(slab.start, int(row_start[entry]))
        if sizes[entry] < 0:
            slab.fills.append(entry)
        else:
            slab.reads.append(entry)
            slab.staged += room(entry)

    batches: list[Batch] = []
    current: list[_Slab] = []
    for slab in slabs:
        if feasible([*current, slab]):
            current.append(slab)
            continue
        if current:
            batches.append(make(current))
            current = []
        if feasible([slab]):
            current = [slab]
        else:
            batches.extend(split(slab))
    if current:
        batches.append(make(current))
    return batches


# --- the scatter kernel -----------------------------------------------------------------------

_SCATTER_SOURCE = r"""
typedef unsigned long long u64;
typedef WORD_TYPE WORD;

__device__ __forceinline__ unsigned char swap_word(unsigned char x) { return x; }
__device__ __forceinline__ unsigned short swap_word(unsigned short x) {
    return (unsigned short)((x >> 8) | (x << 8));
}
__device__ __forceinline__ unsigned int swap_word(unsigned int x) {
    return __byte_perm(x, 0, 0x0123);
}
__device__ __forceinline__ u64 swap_word(u64 x) {
    return ((u64)__byte_perm((unsigned int)x, 0, 0x0123) << 32)
         | __byte_perm((unsigned int)(x >> 32), 0, 0x0123);
}

// One table row per chunk: source and destination addresses, element count, then per dimension
// the extent, the source stride and the destination stride (in words). Rows with source
// strides of 0 broadcast one value (the fill value of chunks that are not stored).
extern "C" __global__ void linumpy_scatter(const long long* __restrict__ table, const int first) {
    const long long* row = table + (long long)(first + blockIdx.y) * (3 + 3 * ND);
    const WORD* __restrict__ src = (const WORD*)row[0];
    WORD* __restrict__ dst = (WORD*)row[1];
    const unsigned int count = (unsigned int)row[2];
    unsigned int extent[ND];
    long long src_stride[ND];
    long long dst_stride[ND];
#pragma unroll
    for (int d = 0; d < ND; ++d) {
        extent[d] = (unsigned int)row[3 + d];
        src_stride[d] = row[3 + ND + d];
        dst_stride[d] = row[3 + 2 * ND + d];
    }
    const unsigned int step = gridDim.x * blockDim.x;
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += step) {
        unsigned int rest = i;
        long long s = 0, t = 0;
#pragma unroll
        for (int d = ND - 1; d > 0; --d) {
            const unsigned int c = rest % extent[d];
            rest /= extent[d];
            s += c * src_stride[d];
            t += c * dst_stride[d];
        }
        s += rest * src_stride[0];
        t += rest * dst_stride[0];
        const WORD w = src[s];
        dst[t] = SWAP ? swap_word(w) : w;
    }
}
"""

_WORD_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
_THREADS = 256
_MAX_GRID_Y = 65535


@functools.cache
def _scatter_kernel(ndim: int, word: int, swap: bool) -> cupy.RawKernel:
    import cupy

    defines = (
        f"#define ND {ndim}\n#define SWAP {int(swap)}\n#define WORD_TYPE {_WORD_TYPES[word]}\n"
    )
    return cupy.RawKernel(defines + _SCATTER_SOURCE, "linumpy_scatter")


@dataclass(frozen=True, slots=True)
class _Geometry:
    """Per-entry placement of chunk parts, as arrays in words, ready for scatter tables."""

    ndim: int  # dimensions of the kernel's index space (a complex axis added, at least 1)
    word: int  # bytes per word
    swap: bool  # byte-swap every word (stored byte order is not native)
    extent: np.ndarray  # (entries, ndim) words per dimension
    count: np.ndarray  # (entries,) words per entry
    chunk_offset: np.ndarray  # (entries,) word offset of the kept part inside a decoded chunk
    out_offset: np.ndarray  # (entries,) word offset of the part in the output
    chunk_strides: np.ndarray  # (ndim,) word strides of a decoded chunk
    out_strides: np.ndarray  # (ndim,) word strides of the output
    fill_strides: np.ndarray  # (ndim,) source strides of fill rows


def _strides(shape: Sequence[int], order: str) -> np.ndarray:
    strides = np.ones(len(shape), dtype=np.int64)
    dims = range(len(shape) - 2, -1, -1) if order == "C" else range(1, len(shape))
    for d in dims:
        prev = d + 1 if order == "C" else d - 1
        strides[d] = strides[prev] * shape[prev]
    return strides


def _geometry(plan: ReadPlan, entries: Sequence[ChunkRead]) -> _Geometry:
    stored = plan.stored_dtype
    components = 2 if stored.kind == "c" else 1
    word = stored.itemsize // components
    nd = len(plan.shape)
    start = np.array([[s.start for s in e.out_sel] for e in entries], dtype=np.int64)
    start = start.reshape(len(entries), nd)
    stop = np.array([[s.stop for s in e.out_sel] for e in entries], dtype=np.int64)
    extent = stop.reshape(len(entries), nd) - start
    chunk_start = np.array([[s.start for s in e.chunk_sel] for e in entries], dtype=np.int64)
    chunk_start = chunk_start.reshape(len(entries), nd)
    chunk_strides = _strides(plan.chunk_shape, plan.order) * components
    out_strides = _strides(plan.shape, "C") * components
    fill_strides = np.zeros(nd, dtype=np.int64)
    if components == 2:  # the real and imaginary words of an element
        extent = np.concatenate([extent, np.full((len(entries), 1), 2)], axis=1)
        chunk_strides = np.append(chunk_strides, 1)
        out_strides = np.append(out_strides, 1)
        fill_strides = np.append(fill_strides, 1)
    if extent.shape[1] == 0:  # a 0-d array: one element
        extent = np.ones((len(entries), 1), dtype=np.int64)
        chunk_strides = out_strides = fill_strides = np.zeros(1, dtype=np.int64)
    return _Geometry(
        ndim=extent.shape[1],
        word=word,
        swap=word > 1 and not stored.isnative,
        extent=extent,
        count=extent.prod(axis=1),
        chunk_offset=chunk_start @ chunk_strides[: chunk_start.shape[1]],
        out_offset=start @ out_strides[: start.shape[1]],
        chunk_strides=chunk_strides,
        out_strides=out_strides,
        fill_strides=fill_strides,
    )


def _scatter_table(
    geo: _Geometry,
    reads: np.ndarray,
    fills: np.ndarray,
    *,
    sources: np.ndarray,
    out_ptr: int,
    fill_ptr: int,
) -> np.ndarray:
    """Rows of the scatter kernel's table: ``reads`` (decoded at addresses ``sources``), fills."""
    rows = np.concatenate([reads, fills]).astype(np.int64)
    n, nd = len(rows), geo.ndim
    table = np.empty((n, 3 + 3 * nd), dtype=np.int64)
    table[: len(reads), 0] = sources + geo.chunk_offset[reads] * geo.word
    table[len(reads) :, 0] = fill_ptr
    table[:, 1] = out_ptr + geo.out_offset[rows] * geo.word
    table[:, 2] = geo.count[rows]
    table[:, 3 : 3 + nd] = geo.extent[rows]
    table[: len(reads), 3 + nd : 3 + 2 * nd] = geo.chunk_strides
    table[len(reads) :, 3 + nd : 3 + 2 * nd] = geo.fill_strides
    table[:, 3 + 2 * nd :] = geo.out_strides
    return table[geo.count[rows] > 0]


def _launch_scatter(geo: _Geometry, table: np.ndarray, stream: cupy.cuda.Stream) -> None:
    import cupy

    if len(table) == 0:
        return
    kernel = _scatter_kernel(geo.ndim, geo.word, geo.swap)
    per_block = _THREADS * 8
    grid_x = int(min(max(1, -(-int(table[:, 2].max()) // per_block)), 4096))
    with stream:
        device_table = cupy.asarray(table)
        for first in range(0, len(table), _MAX_GRID_Y):
            rows = min(_MAX_GRID_Y, len(table) - first)
            kernel((grid_x, rows), (_THREADS,), (device_table, np.int32(first)))


# --- the fast path ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuReadReport:
    """What the last :func:`read_zarr_to_gpu` call of this thread did.

    Attributes
    ----------
    source
        The array read.
    path
        ``"fast"`` or ``"zarr"`` (fallback through :func:`gpu_zarr_context`).
    reason
        Why that path (and reader) was taken.
    reader
        File reader of the fast path (``"kvikio"`` or ``"pread"``), else None.
    n_reads, n_fill, n_cpu_decoded, n_batches
        Chunks decoded, chunks filled with the fill value, chunks decoded on the CPU (valid
        layouts nvCOMP cannot decode), batches.
    compressed_bytes, output_bytes
        Compressed bytes read and bytes of the output.
    device_extra_bytes, pinned_bytes
        Device memory allocated beyond the output, and pinned host memory used.
    seconds
        Wall time of the call.
    phases
        Seconds spent in the fast path's steps: planning, sizing files, batching, allocating,
        the pipeline, and inside it reading and checking chunks (``fetch``), waiting for them
        (``fetch_wait``) and queueing GPU work (``gpu_calls``, which includes nvCOMP's wait for
        the frame headers).

    Examples
    --------
    After reading the volume of :func:`read_zarr_to_gpu`'s example:

    >>> volume = read_zarr_to_gpu(path)  # doctest: +SKIP
    >>> report = last_read_report()  # doctest: +SKIP
    >>> report.path, report.n_reads, report.n_fill, report.output_bytes  # doctest: +SKIP
    ('fast', 8, 0, 8192)
    """

    source: str
    path: Literal["fast", "zarr"]
    reason: str
    reader: str | None = None
    n_reads: int = 0
    n_fill: int = 0
    n_cpu_decoded: int = 0
    n_batches: int = 0
    compressed_bytes: int = 0
    output_bytes: int = 0
    device_extra_bytes: int = 0
    pinned_bytes: int = 0
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)


_reports = threading.local()


def last_read_report() -> GpuReadReport | None:
    """The report of this thread's last :func:`read_zarr_to_gpu` call, or None.

    Examples
    --------
    After reading half the volume of :func:`read_zarr_to_gpu`'s example:

    >>> volume = read_zarr_to_gpu(path, region=(slice(0, 8),))  # doctest: +SKIP
    >>> last_read_report().n_reads  # doctest: +SKIP
    4
    """
    return getattr(_reports, "last", None)


def _size(nbytes: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if nbytes < 1024 or unit == "TiB":
            return f"{nbytes:.0f} {unit}" if unit == "bytes" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    raise AssertionError("unreachable")


def _nvcomp_workspace(decoded_nbytes: int) -> int:
    """Device memory to expect nvCOMP to take for one batch (1568 MiB measured for 1 GiB)."""
    return max(64 * MIB, decoded_nbytes * 8 // 5)


def _check_free(
    needed: int, source: str, shape: tuple[int, ...], dtype: np.dtype, what: str
) -> None:
    """Raise DeviceMemoryError when ``needed`` bytes exceed what the device can still give."""
    import cupy

    free, total = cupy.cuda.runtime.memGetInfo()
    free += cupy.get_default_memory_pool().free_bytes()
    if needed > free:
        device = cupy.cuda.runtime.getDevice()
        raise DeviceMemoryError(
            f"{source}: reading a region of shape {shape} ({dtype}) needs {_size(needed)} of GPU "
            f"memory ({what}), but device {device} has {_size(free)} free of {_size(total)}. "
            "Read a part at a time with region=(slice(start, stop), ...)."
        )


@dataclass(slots=True)
class _HostBatch:
    """A batch's chunks in host staging, checked: what the GPU side needs to run it."""

    slot: int
    gpu: list[int] = field(default_factory=list)  # decoded slots nvCOMP fills
    gpu_offsets: list[int] = field(default_factory=list)
    gpu_sizes: list[int] = field(default_factory=list)
    cpu: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (slot, decoded bytes)
    checksums: list[tuple[int, int, str]] = field(default_factory=list)  # (slot, stored, key)
    seconds: float = 0.0  # time spent reading and checking
    read_seconds: float = 0.0  # of which reading the files
    check_seconds: float = 0.0  # of which the batched frame checks


class _FastRead:
    """One execution of a read plan on the GPU (see the module docstring)."""

    def __init__(self, plan: ReadPlan, settings: GpuReadSettings, reader: str) -> None:
        self.plan = plan
        self.settings = settings
        self.reader = reader
        self.entries: tuple[ChunkRead, ...] = plan.reads + plan.missing
        self.chunk_nbytes = plan.chunk_nbytes
        self.slot_nbytes = align_up(self.chunk_nbytes)
        self.phases: dict[str, float] = {}

    def _rows(self, out_nbytes: int) -> tuple[np.ndarray, np.ndarray]:
        """Per entry, output byte offsets of the first row it writes and past its last row."""
        shape, n = self.plan.shape, len(self.entries)
        if not shape:
            return np.zeros(n, dtype=np.int64), np.full(n, out_nbytes, dtype=np.int64)
        row_nbytes = out_nbytes // shape[0] if shape[0] else 0
        starts = np.fromiter((e.out_sel[0].start for e in self.entries), np.int64, n)
        stops = np.fromiter((e.out_sel[0].stop for e in self.entries), np.int64, n)
        return starts * row_nbytes, stops * row_nbytes

    def _fetch(
        self,
        batch: Batch,
        slot: int,
        staging: np.ndarray,
        sizes: np.ndarray,
        pool: ThreadPoolExecutor,
        copied: Any,
    ) -> _HostBatch:
        """Read and check a batch's chunks (runs on the producer thread)."""
        if copied is not None:
            copied.synchronize()  # the previous copy out of this staging buffer is done
        started = time.perf_counter()
        host = _HostBatch(slot)
        staged = np.flatnonzero(batch.staging_offsets >= 0)
        entries = [self.entries[batch.reads[j]] for j in staged]
        offsets = batch.staging_offsets[staged]
        nbytes = sizes[batch.reads[staged]]
        threads = self.settings.io_threads
        read_into(staging, entries, nbytes, offsets, reader=self.reader, pool=pool, threads=threads)
        host.read_seconds = time.perf_counter() - started
        verdicts = check_frames(staging, offsets, nbytes, self.chunk_nbytes)
        host.check_seconds = time.perf_counter() - started - host.read_seconds
        on_cpu: list[tuple[int, Any]] = []
        too_large = self.chunk_nbytes > self.settings.gpu_chunk_bytes
        for k, j in enumerate(staged):
            j = int(j)
            frame = staging[offsets[k] : offsets[k] + nbytes[k]]
            verdict = verdicts[k]
            if too_large:
                on_cpu.append((j, frame))
                continue
            if verdict == FRAME_NEEDS_CHECK:
                info = inspect_zstd_chunk(
                    frame, key=entries[k].key, expected_size=self.chunk_nbytes
                )
                if not info.gpu_decodable:
                    on_cpu.append((j, frame))
                    continue
                verdict = FRAME_GPU if info.checksum is None else FRAME_CHECKSUM
            host.gpu.append(j)
            host.gpu_offsets.append(int(offsets[k]))
            host.gpu_sizes.append(int(nbytes[k]))
            if verdict == FRAME_CHECKSUM:
                stored = int.from_bytes(frame[-4:].tobytes(), "little")
                host.checksums.append((j, stored, entries[k].key))
        for j in np.flatnonzero(batch.staging_offsets < 0):
            read = self.entries[batch.reads[j]]
            data = fetch_chunk(read)
            if data is None:
                raise ChunkDecodeError(read.key, "chunk file vanished while reading")
            on_cpu.append((int(j), data))

        def decode(item: tuple[int, Any]) -> tuple[int, np.ndarray]:
            j, data = item
            key = self.entries[batch.reads[j]].key
            return j, decode_zstd_cpu(data, key=key, expected_size=self.chunk_nbytes)

        host.cpu = list(pool.map(decode, on_cpu))
        host.seconds = time.perf_counter() - started
        return host

    def _pipeline(
        self,
        batches: list[Batch],
        sizes: np.ndarray,
        out: cupy.ndarray,
        device: _DeviceBuffers,
        staging: list[np.ndarray],
        pool: ThreadPoolExecutor,
        context: Any,
    ) -> tuple[list[tuple[Any, list[tuple[int, int, str]]]], int]:
        """Run every batch: fetch k+1 on the producer thread while the GPU works on batch k.

        Returns the pending checksum checks (device hashes, expected values) and the number of
        chunks decoded on the CPU.
        """
        import cupy
        from nvidia import nvcomp

        from linumpy.gpu._xxhash import xxh64_batch

        stream = context.stream
        runtime = cupy.cuda.runtime
        geo = _geometry(self.plan, self.entries)
        out_bytes = out.reshape(-1).view(np.uint8)
        copied: list[Any] = [None, None]  # per staging buffer: event of its last copy out
        checks: list[tuple[Any, list[tuple[int, int, str]]]] = []
        n_cpu = 0
        with ThreadPoolExecutor(1, thread_name_prefix="linumpy-gpu-fetch") as producer:

            def submit(k: int) -> Any:
                slot = k % 2
                return producer.submit(
                    self._fetch, batches[k], slot, staging[slot], sizes, pool, copied[slot]
                )

            pending = submit(0) if batches else None
            phases = dict.fromkeys(
                ("fetch", "fetch_read", "fetch_check", "fetch_wait", "gpu_calls"), 0.0
            )
            for k, batch in enumerate(batches):
                mark = time.perf_counter()
                host = pending.result()
                phases["fetch_wait"] += time.perf_counter() - mark
                phases["fetch"] += host.seconds
                phases["fetch_read"] += host.read_seconds
                phases["fetch_check"] += host.check_seconds
                mark = time.perf_counter()
                pending = submit(k + 1) if k + 1 < len(batches) else None
                n_cpu += len(host.cpu)
                base = out_bytes if batch.in_output else device.buffer
                with stream:
                    if batch.staging_nbytes:
                        runtime.memcpyAsync(
                            device.buffer.data.ptr,
                            staging[host.slot].ctypes.data,
                            batch.staging_nbytes,
                            runtime.memcpyHostToDevice,
                            stream.ptr,
                        )
                        copied[host.slot] = stream.record()
                    for j, data in host.cpu:
                        runtime.memcpyAsync(
                            base.data.ptr + int(batch.slots[j]),
                            data.ctypes.data,
                            data.nbytes,
                            runtime.memcpyHostToDevice,
                            stream.ptr,
                        )
                    if host.gpu:
                        context.codec.decode(
                            nvcomp.as_arrays(
                                device.buffer, host.gpu_offsets, host.gpu_sizes, stream.ptr
                            ),
                            out=nvcomp.as_arrays(
                                base,
                                [int(batch.slots[j]) for j in host.gpu],
                                [self.chunk_nbytes] * len(host.gpu),
                                stream.ptr,
                            ),
                        )
                    if host.checksums:
                        hashes = xxh64_batch(
                            base,
                            [int(batch.slots[j]) for j, _, _ in host.checksums],
                            [self.chunk_nbytes] * len(host.checksums),
                            stream=stream,
                        )
                        checks.append((hashes, host.checksums))
                    for segment in batch.segments:
                        sources = base.data.ptr + batch.slots[segment.start : segment.stop]
                        if segment.copy_offset >= 0:
                            runtime.memcpyAsync(
                                device.buffer.data.ptr,
                                out.data.ptr + segment.copy_offset,
                                segment.copy_nbytes,
                                runtime.memcpyDeviceToDevice,
                                stream.ptr,
                            )
                            sources = sources - out.data.ptr - segment.copy_offset
                            sources = sources + device.buffer.data.ptr
                        table = _scatter_table(
                            geo,
                            batch.reads[segment.start : segment.stop],
                            segment.fills,
                            sources=sources,
                            out_ptr=out.data.ptr,
                            fill_ptr=device.fill.data.ptr,
                        )
                        _launch_scatter(geo, table, stream)
                phases["gpu_calls"] += time.perf_counter() - mark
            self.phases.update(phases)
        return checks, n_cpu

    def run(self, out: cupy.ndarray | None) -> tuple[cupy.ndarray, GpuReadReport]:
        """Read the plan into ``out`` (allocated when None); return it with a report."""
        import cupy

        started = time.perf_counter()
        plan, settings = self.plan, self.settings
        dtype = plan.dtype.newbyteorder("=")
        out_nbytes = plan.nbytes
        allocate = out is None
        if not allocate and (
            not isinstance(out, cupy.ndarray)
            or out.shape != plan.shape
            or out.dtype != dtype
            or not out.flags.c_contiguous
            or out.device.id != cupy.cuda.runtime.getDevice()
        ):
            raise LinumpyError(
                f"out must be a C-contiguous cupy {dtype} array of shape {plan.shape} on the "
                f"current device, got {type(out).__name__} {getattr(out, 'dtype', '')} "
                f"{getattr(out, 'shape', '')}"
            )
        context = nvcomp_context()
        stream = context.stream
        threads = settings.io_threads
        staging_capacity = max(ALIGN, min(settings.pinned_bytes // 2, settings.scratch_bytes))
        memory_pool = cupy.get_default_memory_pool()
        pool_before = memory_pool.used_bytes()
        phases = self.phases
        with ThreadPoolExecutor(threads, thread_name_prefix="linumpy-gpu-read") as pool:
            mark = time.perf_counter()
            sizes = chunk_sizes(plan.reads)
            sizes = np.concatenate([sizes, np.full(len(plan.missing), -1, dtype=np.int64)])
            phases["sizes"] = time.perf_counter() - mark
            mark = time.perf_counter()
            batches = plan_batches(
                *self._rows(out_nbytes),
                sizes,
                slot_nbytes=self.slot_nbytes,
                out_nbytes=out_nbytes,
                out_misalign=0 if allocate else out.data.ptr % _TARGET_ALIGN,
                staging_capacity=staging_capacity,
                device_capacity=settings.scratch_bytes,
                batch_capacity=settings.batch_bytes,
            )
            phases["batches"] = time.perf_counter() - mark
            staging_nbytes = max(ALIGN, max((b.staging_nbytes for b in batches), default=0))
            extra = max(ALIGN, max((b.device_nbytes for b in batches), default=0))
            decoded = max((len(b.reads) for b in batches), default=0) * self.chunk_nbytes
            _check_free(
                extra + _nvcomp_workspace(decoded) + (out_nbytes if allocate else 0),
                plan.source,
                plan.shape,
                dtype,
                f"output {_size(out_nbytes)}, buffer {_size(extra)}",
            )
            mark = time.perf_counter()
            with stream:
                if allocate:
                    out = cupy.empty(plan.shape, dtype=dtype)
                fill = np.array([plan.fill_value], dtype=plan.stored_dtype).view(np.uint8)
                device = _DeviceBuffers(cupy.empty(extra, dtype=np.uint8), cupy.asarray(fill))
            with pinned_buffers(staging_nbytes) as staging:
                phases["allocate"] = time.perf_counter() - mark
                mark = time.perf_counter()
                try:
                    checks, n_cpu = self._pipeline(
                        batches, sizes, out, device, staging, pool, context
                    )
                    waited = time.perf_counter()
                    stream.synchronize()
                    phases["final_sync"] = time.perf_counter() - waited
                except BaseException:
                    _quiet_synchronize(stream)  # nothing may still use buffers that go back
                    raise
                phases["pipeline"] = time.perf_counter() - mark
        _verify_checksums(checks)
        device_extra = memory_pool.used_bytes() - pool_before - (out_nbytes if allocate else 0)
        report = GpuReadReport(
            source=plan.source,
            path="fast",
            reason="",
            reader=self.reader,
            n_reads=len(plan.reads),
            n_fill=int((sizes < 0).sum()),
            n_cpu_decoded=n_cpu,
            n_batches=len(batches),
            compressed_bytes=int(sizes[sizes > 0].sum()),
            output_bytes=out_nbytes,
            device_extra_bytes=max(0, int(device_extra)),
            pinned_bytes=2 * staging_nbytes,
            seconds=time.perf_counter() - started,
            phases={k: round(v, 6) for k, v in self.phases.items()},
        )
        return out, report


@dataclass(frozen=True, slots=True)
class _DeviceBuffers:
    buffer: Any  # cupy uint8: compressed chunks, decoded chunks that fit nowhere else, copies
    fill: Any  # cupy uint8: the fill value, in stored byte order


def _quiet_synchronize(stream: cupy.cuda.Stream) -> None:
    try:
        stream.synchronize()
    except Exception:  # the error being raised is the one to report
        logger.exception("synchronizing the GPU read stream after an error failed")


def _verify_checksums(checks: list[tuple[Any, list[tuple[int, int, str]]]]) -> None:
    """Compare XXH64 hashes of decoded chunks with the checksums their frames store."""
    for hashes, expected in checks:
        for digest, (_, stored, key) in zip(hashes.get(), expected, strict=True):
            computed = int(digest) & 0xFFFFFFFF
            if computed != stored:
                raise ChunkDecodeError(
                    key,
                    f"content checksum mismatch: the frame stores 0x{stored:08X}, the decoded "
                    f"bytes hash to 0x{computed:08X}",
                )


def _read_through_zarr(
    array: zarr.Array, region: slice | Sequence[slice] | None, out: cupy.ndarray | None
) -> cupy.ndarray:
    """Read with zarr inside :func:`gpu_zarr_context` (reopened there: codecs are fixed at open)."""
    selection = parse_region(region, array.shape, str(array.store_path))
    with gpu_zarr_context():
        reopened = zarr.open_array(store=array.store, path=array.path, mode="r")
        result = reopened[selection]
    if out is not None:
        out[...] = result
        return out
    return result


def read_zarr_to_gpu(
    source: str | os.PathLike[str] | zarr.Array,
    *,
    region: slice | Sequence[slice] | None = None,
    out: cupy.ndarray | None = None,
    settings: GpuReadSettings | None = None,
) -> cupy.ndarray:
    """Read a zarr array, or a region of it, into GPU memory.

    Parameters
    ----------
    source
        A path (OME-Zarr image, level 0, or zarr array) or an open ``zarr.Array``.
    region
        A tuple of slices (step 1); the whole array by default.
    out
        A C-contiguous cupy array of the region's shape and dtype to fill instead of allocating.
    settings
        Threads, pinned and scratch memory, file reader; :meth:`GpuReadSettings.from_env` by
        default.

    Returns
    -------
    cupy.ndarray
        The data, equal to zarr's CPU read of the same region (in native byte order: cupy has no
        big-endian arrays).

    Raises
    ------
    GPUUnavailableError
        When cupy, nvCOMP or a CUDA device is missing (the message says which).
    DeviceMemoryError
        When the output (or the read's scratch memory) exceeds the device's free memory; raised
        before anything is allocated.
    ChunkDecodeError
        When a chunk is corrupt or truncated (it names the chunk); nothing invalid reaches
        nvCOMP, so the next read in the process works.
    LinumpyError
        For a path that is not zarr, a region out of bounds, or an unsuitable ``out``.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from linumpy.io import save_omezarr
    >>> path = tempfile.mkdtemp() + "/volume.ome.zarr"
    >>> data = np.arange(4096, dtype=np.uint16).reshape(16, 16, 16)
    >>> save_omezarr(data, path, voxel_size=(1, 1, 1), chunks=(8, 8, 8))
    >>> volume = read_zarr_to_gpu(path, region=(slice(0, 4),))  # doctest: +SKIP
    >>> volume.shape, volume.dtype  # doctest: +SKIP
    ((4, 16, 16), dtype('uint16'))
    >>> np.array_equal(volume.get(), data[:4])  # doctest: +SKIP
    True

    Into an existing array:

    >>> import cupy  # doctest: +SKIP
    >>> out = cupy.empty((16, 16, 16), dtype=np.uint16)  # doctest: +SKIP
    >>> read_zarr_to_gpu(path, out=out) is out  # doctest: +SKIP
    True
    """
    _require_gpu("read_zarr_to_gpu()")
    array = _open(source)
    settings = settings or GpuReadSettings.from_env()
    started = time.perf_counter()
    name = str(array.store_path)
    if out is None:  # before planning: the plan of a huge region alone takes long
        shape = tuple(s.stop - s.start for s in parse_region(region, array.shape, name))
        dtype = np.dtype(array.dtype)
        _check_free(math.prod(shape) * dtype.itemsize, name, shape, dtype, "the output")
    try:
        plan = plan_read(array, region)
        obstacle = _fast_path_obstacle(plan)
    except UnsupportedLayoutError as exc:
        obstacle = str(exc)
    planned = time.perf_counter() - started
    if obstacle is not None:
        logger.info(
            "%s: fast GPU read not possible (%s); reading through zarr's GPU path", name, obstacle
        )
        result = _read_through_zarr(array, region, out)
        _reports.last = GpuReadReport(
            source=name,
            path="zarr",
            reason=obstacle,
            output_bytes=int(result.nbytes),
            seconds=time.perf_counter() - started,
        )
        return result
    reader, why = _choose_reader(settings.fetch, settings.io_threads)
    result, report = _FastRead(plan, settings, reader).run(out)
    _reports.last = replace(
        report,
        reason=why,
        seconds=time.perf_counter() - started,
        phases={"plan": round(planned, 6), **report.phases},
    )
    logger.debug("%s", _reports.last)
    return result
