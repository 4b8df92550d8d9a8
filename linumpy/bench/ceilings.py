"""Ceilings: what the machine and the decoders reach with nothing else in the way.

Each is measured on the same stored files as the rows it judges, in the same run, and given in
GB/s of decompressed volume (the time to move or decode the whole volume's stored bytes), so a
row's fraction of a ceiling is a plain ratio. Their notes give GB/s of compressed bytes.

- file read: N threads ``os.preadv`` the whole chunk or shard files into one buffer (pinned
  memory when a GPU is used);
- CPU decode: numcodecs zstd decodes the frames already in memory, N threads;
- host->device copy: the stored bytes, from pinned memory, in one copy;
- GPU decode: nvCOMP decodes all frames, already on the device, in ONE call.

cupy, nvCOMP and kvikio are imported inside the GPU functions only.
"""

from __future__ import annotations

from typing import Any

import numcodecs
import numpy as np

from linumpy.bench.files import ALIGN, StoredFiles, in_threads, read_files
from linumpy.bench.timing import Row, Timer

__all__ = ["cpu_decode_ceiling", "file_read_ceiling", "gpu_ceilings", "host_buffer"]


def host_buffer(nbytes: int, *, pinned: bool) -> np.ndarray:
    """A uint8 host buffer of ``nbytes``, page-locked (through cupy) when ``pinned``.

    Examples
    --------
    >>> from linumpy.bench import host_buffer
    >>> host_buffer(4096, pinned=False).nbytes
    4096
    """
    if not pinned:
        return np.empty(nbytes, np.uint8)
    import cupy

    return np.frombuffer(cupy.cuda.alloc_pinned_memory(nbytes), np.uint8, nbytes)


def _compressed_note(row: Row, files: StoredFiles) -> None:
    if row.runs:
        row.note = f"{files.stored_bytes / 1e9 / row.seconds:.1f} GB/s of compressed bytes"


def file_read_ceiling(
    timer: Timer,
    layout: str,
    files: StoredFiles,
    buffer: np.ndarray,
    *,
    nbytes: int,
    threads: int,
    pinned: bool = False,
) -> Row:
    """Time reading every stored file whole into ``buffer`` (page-locked when ``pinned``).

    Examples
    --------
    >>> import numpy as np, tempfile, zarr
    >>> from linumpy.bench import Timer, file_read_ceiling, stored_files
    >>> path = tempfile.mkdtemp() + "/a.zarr"
    >>> array = zarr.create_array(path, shape=(64, 64), chunks=(16, 16), dtype="u2")
    >>> array[...] = 3
    >>> files = stored_files(array)
    >>> buffer = np.empty(files.nbytes, np.uint8)
    >>> timer = Timer(warmup=0, repeats=1)
    >>> file_read_ceiling(timer, "16^2", files, buffer, nbytes=array.nbytes, threads=2).op
    'file-read'
    """
    where = "pinned memory" if pinned else "host memory"
    row = timer.measure(
        layout,
        f"ceiling: {threads}-thread os.preadv of the files into {where}",
        "ceiling",
        "file-read",
        lambda: read_files(files, buffer, threads=threads),
        nbytes=nbytes,
    )
    _compressed_note(row, files)
    return row


def cpu_decode_ceiling(
    timer: Timer, layout: str, files: StoredFiles, buffer: np.ndarray, *, threads: int
) -> Row:
    """Time numcodecs decoding every frame in ``buffer`` (files read, frames located), N threads.

    Examples
    --------
    >>> import numpy as np, tempfile, zarr
    >>> from linumpy.bench import Timer, cpu_decode_ceiling, read_files, stored_files
    >>> path = tempfile.mkdtemp() + "/a.zarr"
    >>> array = zarr.create_array(path, shape=(64, 64), chunks=(16, 16), dtype="u2")
    >>> array[...] = 3
    >>> files = stored_files(array)
    >>> buffer = np.empty(files.nbytes, np.uint8)
    >>> read_files(files, buffer, threads=2)
    >>> row = cpu_decode_ceiling(Timer(warmup=0, repeats=1), "16^2", files, buffer, threads=2)
    >>> row.op, row.runs
    ('decode-cpu', 1)
    """
    codec = numcodecs.Zstd()
    size = files.frame_nbytes
    n = len(files.frame_sizes)
    out = np.empty(max(n * size, 1), np.uint8)
    view = memoryview(buffer)

    def task(run: np.ndarray) -> None:
        for i in run:
            start, length = int(files.frame_offsets[i]), int(files.frame_sizes[i])
            codec.decode(view[start : start + length], out=out[i * size : (i + 1) * size])

    return timer.measure(
        layout,
        f"ceiling: numcodecs zstd decode of the frames in memory, {threads} threads",
        "ceiling",
        "decode-cpu",
        lambda: in_threads(task, n, threads),
        nbytes=n * size,
        note=f"{n} frames of {size / 2**10:.0f} KiB",
    )


def _packed_frames(files: StoredFiles, buffer: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """The frames copied into one host array at aligned offsets (nvCOMP wants 16 bytes)."""
    sizes = files.frame_sizes.astype(np.int64)
    aligned = -(-sizes // ALIGN) * ALIGN
    offsets = np.concatenate([[0], np.cumsum(aligned)]).astype(np.int64)
    packed = np.empty(max(int(offsets[-1]), 1), np.uint8)
    for src, dst, n in zip(files.frame_offsets, offsets, sizes, strict=False):
        packed[dst : dst + n] = buffer[src : src + n]
    return packed, [int(o) for o in offsets[:-1]]


def gpu_ceilings(
    timer: Timer, layout: str, files: StoredFiles, pinned: np.ndarray, *, nbytes: int
) -> list[Row]:
    """Time the pinned host->device copy of the stored bytes and nvCOMP's one-call decode.

    The decode goes through :mod:`linumpy.gpu.nvcomp` (nvCOMP's C API), as the engine does.

    ``pinned`` holds the stored files, read by :func:`file_read_ceiling`, frames located.

    Examples
    --------
    >>> rows = gpu_ceilings(timer, "64^3", files, pinned, nbytes=2**30)  # doctest: +SKIP
    >>> [row.op for row in rows]  # doctest: +SKIP
    ['copy', 'decode-gpu']
    """
    import cupy

    device = cupy.empty(pinned.nbytes, dtype=np.uint8)
    copy = timer.measure(
        layout,
        "ceiling: pinned host->device copy of the stored bytes, one copy",
        "ceiling",
        "copy",
        lambda: device.set(pinned),
        nbytes=nbytes,
    )
    _compressed_note(copy, files)
    device = None  # the copy's target is not needed any more

    from linumpy.gpu import nvcomp
    from linumpy.io.engine.codecs import DEFAULT
    from linumpy.io.engine.codecs.protocol import FRAME_NEEDS_CHECK

    packed, offsets = _packed_frames(files, pinned)
    n, size = len(offsets), files.frame_nbytes
    # nvCOMP checks little: hand it only frames that pass the engine's check (not timed); the
    # benchmark's arrays are written with the writers' default compressor.
    verdicts = DEFAULT.check_frames(packed, np.asarray(offsets), files.frame_sizes, size)
    if (verdicts == FRAME_NEEDS_CHECK).any():
        timer.skip(
            layout,
            "ceiling: nvCOMP decode of all frames on the device, one call",
            "ceiling",
            "decode-gpu",
            f"skipped: {int((verdicts == FRAME_NEEDS_CHECK).sum())} frames nvCOMP cannot take",
        )
        return [copy]
    stream = cupy.cuda.Stream(non_blocking=False)
    with stream:
        frames = cupy.asarray(packed)
        decoded = cupy.empty(max(n * size, 1), dtype=np.uint8)
    stream.synchronize()
    sources = frames.data.ptr + np.asarray(offsets, dtype=np.int64)
    frame_sizes = files.frame_sizes.astype(np.int64)
    targets = decoded.data.ptr + np.arange(n, dtype=np.int64) * size
    capacities = np.full(n, size, dtype=np.int64)

    def decode() -> Any:
        pending = nvcomp.decode(sources, frame_sizes, targets, capacities, stream=stream)
        stream.synchronize()
        pending.check()

    free_before = cupy.cuda.runtime.memGetInfo()[0]
    decode()
    workspace = (free_before - cupy.cuda.runtime.memGetInfo()[0]) / 2**20
    row = timer.measure(
        layout,
        "ceiling: nvCOMP decode of all frames on the device, one call",
        "ceiling",
        "decode-gpu",
        decode,
        nbytes=n * size,
        note=f"{n} frames of {size / 2**10:.0f} KiB; nvCOMP holds {workspace:.0f} MiB after one",
    )
    return [copy, row]
