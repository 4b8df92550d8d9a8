"""The write engine's GPU back end: chunks of a cupy array encoded by nvCOMP, written by threads.

Per group of files (sized by ``settings.scratch_bytes``): one transposed copy gathers the chunks
in rows (:func:`~linumpy.io.engine.write_plan.gather_chunks`), rows equal to the fill value are
left out, one nvCOMP call encodes the rest (and the XXH64 kernel hashes them for the content
checksum), the frames come back to page-locked memory, and the file threads check every frame like
a stored chunk, patch its checksum in, and assemble and write each file. A group's GPU work
overlaps the file writes of the group before (two host buffers in turn).
"""

from __future__ import annotations

import math
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from linumpy.errors import ChunkDecodeError
from linumpy.io.engine.codecs.protocol import FRAME_GPU
from linumpy.io.engine.fetch import align_up
from linumpy.io.engine.write_files import (
    FilePool,
    WriteReport,
    assemble_file,
    empty_rows,
    write_file,
)
from linumpy.io.engine.write_plan import WritePlan, gather_chunks, group_boxes, group_rows

if TYPE_CHECKING:
    import cupy

    from linumpy.settings import Settings

__all__: list[str] = []

_ALIGN = 8  # nvCOMP wants 4-byte aligned inputs, the XXH64 kernel 8


def gpu_encode_unusable_reason(plan: WritePlan) -> str | None:
    """Why the GPU cannot encode this plan's chunks (then the CPU does), or None."""
    from linumpy.gpu import nvcomp
    from linumpy.gpu.availability import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason is not None:
        return reason
    if not plan.layout.compressor.NVCOMP_ENCODE:
        return f"nvCOMP does not write {plan.layout.compressor.NAME}"
    if not 0 < plan.layout.chunk_nbytes <= nvcomp.MAX_ENCODE_BYTES:
        return f"chunks of {plan.layout.chunk_nbytes} bytes: nvCOMP encodes 1 B to 16 MiB"
    return None


def _group_budget(plan: WritePlan, scratch_bytes: int) -> int:
    """Blocks per group: the gathered rows and the encoder's output fit ``scratch_bytes``.

    The padded box and an aligned copy of the rows live only while gathering, before the output
    is allocated, so they are not counted: each group is one nvCOMP call, whose cost hardly
    depends on its size (docs/gpu_guide.md). nvCOMP's own work space comes on top.
    """
    from linumpy.gpu import nvcomp

    layout = plan.layout
    per_block = math.prod(layout.chunks_per_block)
    row = align_up(layout.chunk_nbytes, _ALIGN)
    capacity = align_up(nvcomp.max_encoded_size(layout.chunk_nbytes), _ALIGN)
    block_bytes = per_block * (row + capacity)
    return max(1, scratch_bytes // max(block_bytes, 1))


def _finish_file(
    plan: WritePlan,
    i: int,
    frames: list[Any],
    hashes: dict[int, int],
    n_empty: int,
    writeback: bool = False,
) -> tuple[bool, int, int, int]:
    """In a file thread: check every frame, add its checksum, assemble and write file ``i``."""
    layout = plan.layout
    path = plan.path(i)
    finished: list[Any] = [None] * len(frames)
    for j, frame in enumerate(frames):
        if frame is None:
            continue
        key = f"{path} [inner chunk {j}]" if layout.sharded else path
        compressor = layout.compressor
        body = frame[: -compressor.CHECKSUM_BYTES] if layout.checksum else frame
        info = compressor.inspect_chunk(body, key=key, expected_size=layout.chunk_nbytes)
        if info.verdict != FRAME_GPU:  # one frame, size declared, no checksum yet
            raise ChunkDecodeError(key, f"nvCOMP wrote an unexpected frame layout: {info}")
        if layout.checksum:
            compressor.set_checksum(frame, hashes[j])
        finished[j] = frame
    parts = assemble_file(plan, finished)
    nbytes = write_file(path, parts, writeback=writeback)
    written = sum(f is not None for f in finished)
    return parts is not None, written, n_empty, nbytes


def _byte_rows(rows: cupy.ndarray, nbytes: int) -> tuple[cupy.ndarray, int]:
    """The gathered chunks as uint8 rows whose starts are 8-byte aligned, and the row stride."""
    import cupy

    flat = rows.view(np.uint8).reshape(rows.shape[0], nbytes)
    stride = align_up(nbytes, _ALIGN)
    # The gather may return a view of the caller's array, which may start anywhere.
    if stride == nbytes and flat.flags.c_contiguous and flat.data.ptr % _ALIGN == 0:
        return flat, stride
    padded = cupy.empty((rows.shape[0], stride), dtype=np.uint8)
    padded[:, :nbytes] = flat
    return padded, stride


def write_gpu(plan: WritePlan, data: cupy.ndarray, config: Settings) -> WriteReport:
    """Write ``data`` (cupy, the plan's region) with nvCOMP encoding, on the current device and
    stream (see the module). ChunkDecodeError for a failed chunk or a frame that does not check
    out; earlier groups' files may be written by then (the caller's staging discards them)."""
    import cupy

    from linumpy.gpu import nvcomp
    from linumpy.gpu._xxhash import xxh64_batch
    from linumpy.gpu.pinned_buffers import PinnedLease

    layout = plan.layout
    report = WriteReport("gpu")
    phases = dict.fromkeys(("gather", "encode", "download"), 0.0)
    if data.dtype != layout.stored_dtype:
        data = data.astype(layout.stored_dtype)
    stream = cupy.cuda.get_current_stream()
    n_inner = math.prod(layout.chunks_per_block)
    nbytes = layout.chunk_nbytes
    capacity = align_up(nvcomp.max_encoded_size(nbytes), _ALIGN)
    lease = PinnedLease()
    in_flight: list[list[Future[Any]]] = [[], []]  # per host buffer: the files it feeds
    try:
        with FilePool(config.io_threads, window=1 << 30) as pool:
            for g, (start, stop) in enumerate(
                group_boxes(plan, _group_budget(plan, config.scratch_bytes))
            ):
                t0 = time.perf_counter()
                box, files, row_file, row_inner = group_rows(plan, start, stop)
                rows = gather_chunks(
                    cupy, data[plan.data_box(box)], layout.chunk_shape, layout.fill_value
                )
                if layout.write_empty_chunks:
                    keep = np.arange(rows.shape[0])
                else:
                    keep = np.flatnonzero(~cupy.asnumpy(empty_rows(cupy, rows, layout.fill_value)))
                byte_rows, stride = _byte_rows(rows, nbytes)
                del rows
                t1 = time.perf_counter()
                k = len(keep)
                out = cupy.empty(max(k * capacity, 1), dtype=np.uint8)
                base = int(byte_rows.data.ptr)
                pending = nvcomp.encode(
                    base + keep.astype(np.int64) * stride,
                    np.full(k, nbytes, dtype=np.int64),
                    int(out.data.ptr) + np.arange(k, dtype=np.int64) * capacity,
                    stream=stream,
                )
                device_hashes = None
                if layout.checksum and k:
                    device_hashes = xxh64_batch(
                        byte_rows.reshape(-1), (keep * stride).tolist(), [nbytes] * k, stream=stream
                    )
                stream.synchronize()
                keys = [plan.path(int(row_file[r])) for r in keep.tolist()]
                pending.check(keys)
                sizes = pending.sizes().astype(np.int64)
                bad = np.flatnonzero((sizes <= 0) | (sizes > capacity))
                if bad.size:
                    r = int(bad[0])
                    raise ChunkDecodeError(
                        keys[r], f"nvCOMP reported {int(sizes[r])} bytes, room for {capacity}"
                    )
                hashes = cupy.asnumpy(device_hashes) if device_hashes is not None else None
                del byte_rows
                t2 = time.perf_counter()
                # The host buffer of group g - 2 is reused: its files must be written first.
                slot = g % 2
                for future in in_flight[slot]:
                    future.result()
                extra = layout.compressor.CHECKSUM_BYTES if layout.checksum else 0
                offsets = np.zeros(k + 1, dtype=np.int64)
                np.cumsum([align_up(int(s) + extra, _ALIGN) for s in sizes], out=offsets[1:])
                room = k * align_up(capacity + extra, _ALIGN)  # the most k frames can take
                host = lease.get("frames", slot, int(offsets[-1]), room)
                for r in range(k):
                    cupy.cuda.runtime.memcpyAsync(
                        host.ctypes.data + int(offsets[r]),
                        int(out.data.ptr) + r * capacity,
                        int(sizes[r]),
                        cupy.cuda.runtime.memcpyDeviceToHost,
                        stream.ptr,
                    )
                stream.synchronize()
                del out
                phases["gather"] += t1 - t0
                phases["encode"] += t2 - t1
                phases["download"] += time.perf_counter() - t2
                per_file: dict[int, list[Any]] = {int(f): [None] * n_inner for f in files}
                file_hashes: dict[int, dict[int, int]] = {int(f): {} for f in files}
                for r, row in enumerate(keep.tolist()):
                    f, j = int(row_file[row]), int(row_inner[row])
                    per_file[f][j] = host[offsets[r] : offsets[r] + sizes[r] + extra]
                    if hashes is not None:
                        file_hashes[f][j] = int(hashes[r])
                in_flight[slot] = [
                    pool.submit(
                        _finish_file,
                        plan,
                        f,
                        frames,
                        file_hashes[f],
                        n_inner - sum(x is not None for x in frames),
                        config.durable,
                    )
                    for f, frames in per_file.items()
                ]
    except BaseException:
        stream.synchronize()
        raise
    finally:
        lease.close()
    for outcome in pool.results:
        report.add(*outcome)
    report.phases = phases
    return report


class _GpuEncoder:
    """nvCOMP's encoder as the write engine asks it (its ``DeviceEncoder``)."""

    unusable_reason = staticmethod(gpu_encode_unusable_reason)
    write = staticmethod(write_gpu)


#: The write engine's encoder of cupy data, looked up by
#: :func:`linumpy.io.block_write.device_encoder`.
GPU_ENCODER = _GpuEncoder()
