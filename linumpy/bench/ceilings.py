"""Ceilings: what the machine and the decoders reach with nothing else in the way (file read,
CPU decode, host->device copy, GPU decode), measured on the same stored files as the rows they
judge, in GB/s of decompressed volume so that a row's fraction of a ceiling is a plain ratio."""

from __future__ import annotations

from typing import Any

import numcodecs
import numpy as np

from linumpy.bench.files import ALIGN, StoredFiles, in_threads, read_files
from linumpy.bench.timing import Row, Timer


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
    """Time ``threads`` threads ``os.preadv`` every stored file whole into ``buffer``."""
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
    """Time numcodecs decoding every frame in ``buffer`` (files read, frames located)."""
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
    """Time the pinned host->device copy of the stored bytes in ``pinned`` (read by
    :func:`file_read_ceiling`, frames located) and nvCOMP's decode of all frames in one call."""
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
