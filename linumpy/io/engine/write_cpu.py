"""The write engine's CPU back end: chunks of a numpy array encoded in threads by the array's
compressor. A shard's inner chunks are encoded by tasks of their own (a shard is not one thread's
work), and a task per shard writes the file.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from linumpy.io.engine.write_files import (
    FilePool,
    WriteReport,
    assemble_file,
    empty_rows,
    write_file,
)
from linumpy.io.engine.write_plan import WritePlan
from linumpy.settings import Settings

__all__: list[str] = []


def _encode_chunk_cpu(
    plan: WritePlan, block: np.ndarray, inner: tuple[int, ...], codec: Any
) -> np.ndarray | None:
    """The compressed bytes of one chunk of ``block`` (a file's data), or None when it is not stored
    (past the array's end, or equal to the fill value)."""
    layout = plan.layout
    chunk = layout.chunk_shape
    start = [k * c for k, c in zip(inner, chunk)]
    if any(s >= n for s, n in zip(start, block.shape)):
        return None
    piece = block[tuple(slice(s, s + c) for s, c in zip(start, chunk))]
    if piece.shape == chunk:
        values = np.ascontiguousarray(piece)
    else:
        values = np.full(chunk, layout.fill_value, dtype=layout.stored_dtype)
        values[tuple(slice(0, n) for n in piece.shape)] = piece
    if not layout.write_empty_chunks and bool(
        empty_rows(np, values.reshape(1, -1), layout.fill_value)[0]
    ):
        return None
    return np.frombuffer(codec.encode(values), dtype=np.uint8)


def _finish_cpu(
    plan: WritePlan, i: int, frames: list[Any], writeback: bool
) -> tuple[bool, int, int, int]:
    """Assemble and write file ``i`` from its frames (or the futures of its frames)."""
    frames = [f.result() if isinstance(f, Future) else f for f in frames]
    parts = assemble_file(plan, frames)
    written = sum(f is not None for f in frames)
    nbytes = write_file(plan.path(i), parts, writeback=writeback)
    return parts is not None, written, len(frames) - written, nbytes


def _whole_file_cpu(
    plan: WritePlan, i: int, data: np.ndarray, codec: Any, writeback: bool
) -> tuple:
    """Encode, assemble and write the one-chunk file ``i``, in a pool thread."""
    block = data[plan.data_box(plan.block_box(i))]
    frame = _encode_chunk_cpu(plan, block, (0,) * block.ndim, codec)
    return _finish_cpu(plan, i, [frame], writeback)


def write_cpu(plan: WritePlan, data: np.ndarray, config: Settings) -> WriteReport:
    """Write ``data`` (numpy, the plan's region) in ``config.io_threads`` threads (see the
    module) into existing directories (:func:`~linumpy.io.engine.write_files.make_directories`).
    """
    layout = plan.layout
    report = WriteReport("cpu")
    if data.dtype != layout.stored_dtype:
        data = data.astype(layout.stored_dtype)
    codec = layout.compressor.encoder(layout.level, layout.checksum)
    threads = config.io_threads
    if not layout.sharded:
        with FilePool(threads) as pool:
            for i in range(plan.n_blocks):
                pool.submit(_whole_file_cpu, plan, i, data, codec, config.durable)
        for outcome in pool.results:
            report.add(*outcome)
        return report
    inner = list(np.ndindex(*layout.chunks_per_block))
    # Frames of at most two shards (or 4 chunks per thread) wait in memory at once.
    window = max(2, -(-4 * threads // len(inner)))
    with ThreadPoolExecutor(threads) as encoders, FilePool(threads, window) as pool:
        for i in range(plan.n_blocks):
            block = data[plan.data_box(plan.block_box(i))]
            frames = [encoders.submit(_encode_chunk_cpu, plan, block, c, codec) for c in inner]
            pool.submit(_finish_cpu, plan, i, frames, config.durable)
    for outcome in pool.results:
        report.add(*outcome)
    return report
