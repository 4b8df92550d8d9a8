"""Transfers of the GPU codec's batches: chunks packed into one device buffer, host chunks
uploaded through pinned memory a piece at a time, device chunks downloaded for their checks.

:mod:`linumpy.gpu.codec_batches` decodes and encodes what this module has staged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import numpy as np

from linumpy.gpu.pinned_buffers import pinned_buffers, roomy

if TYPE_CHECKING:
    import cupy

__all__: list[str] = []

#: Host chunks (stored bytes under :class:`~linumpy.gpu.zarr_buffers.HostBytes`) reach the device
#: through two pinned buffers of this size, in turn: the copy of one piece into pinned memory
#: overlaps the upload of the other, and the pinned memory a call holds stays small (page-locking
#: is slow, so no read locks a buffer as large as a merged call).
PIECE_BYTES = 64 * 2**20
#: The copies into a piece run in parts of at least this many bytes on at most
#: :data:`COPY_THREADS` threads (numpy's copies release the GIL).
COPY_PART_BYTES = 8 * 2**20
COPY_THREADS = 8
#: Pinned buffers that hold a whole batch (device chunks downloaded for their checks) are
#: page-locked at the next power of two of the batch's bytes, up to this: merged calls vary in
#: size from read to read, and a buffer the cache drops is freed with ``cudaFreeHost``, which
#: waits for the whole device.
PINNED_ROOM = 2**30

#: Alignment of chunks packed in one buffer (nvCOMP asks 4 bytes of encoder inputs, the XXH64
#: kernel 8 of its inputs).
ALIGNMENT = 16


def layout(sizes: Sequence[int]) -> tuple[list[int], int]:
    """Aligned offsets of buffers of ``sizes`` packed one after another, and their total."""
    offsets = []
    position = 0
    for size in sizes:
        offsets.append(position)
        position += -(-size // ALIGNMENT) * ALIGNMENT
    return offsets, position


def is_on_device(array: Any) -> bool:
    """Whether ``array`` is in device memory (has ``__cuda_array_interface__``)."""
    return hasattr(array, "__cuda_array_interface__")


def borrow_pinned(pinned: ExitStack, nbytes: int) -> np.ndarray:
    """Page-locked host memory until ``pinned`` closes, from the cache the fast path uses too:
    page-locking a new buffer for every batch cost more than the batch's GPU work (sized with
    room: :data:`PINNED_ROOM`).
    """
    if nbytes == 0:
        return np.empty(0, dtype=np.uint8)
    (buffer,) = pinned.enter_context(pinned_buffers(roomy(nbytes, PINNED_ROOM), count=1))
    return buffer[:nbytes]


def memcpy_async(dst: int, src: int, nbytes: int, stream: cupy.cuda.Stream) -> None:
    """Queue a copy between any two addresses (unified addressing picks the direction)."""
    import cupy

    if nbytes:
        cupy.cuda.runtime.memcpyAsync(dst, src, nbytes, cupy.cuda.runtime.memcpyDefault, stream.ptr)


def device_pointer(array: Any) -> int:
    """The device address of a device array's first byte."""
    import cupy

    return int(cupy.asarray(array).data.ptr)


def stage_inputs(
    arrays: Sequence[Any],
    offsets: Sequence[int],
    total: int,
    stream: cupy.cuda.Stream,
    *,
    download: bool,
    pinned: ExitStack,
) -> tuple[np.ndarray, cupy.ndarray, list[int], bool]:
    """Queue the gathering of the device chunks into a new device buffer at ``offsets``.

    With ``download``, the buffer is then copied once into pinned host memory (borrowed until
    ``pinned`` closes), where the CPU checks the frames. Host chunks are left to
    :func:`upload_host_chunks`. Returns the staging and device buffers, the indices of the host
    chunks, and whether a download is queued.
    """
    import cupy

    with stream:
        device_in = cupy.empty(max(total, 1), dtype=np.uint8)
    host_chunks = []
    for i, (array, offset) in enumerate(zip(arrays, offsets, strict=True)):
        if is_on_device(array):
            memcpy_async(device_in.data.ptr + offset, device_pointer(array), array.nbytes, stream)
        else:
            host_chunks.append(i)
    pending = download and len(host_chunks) < len(arrays)
    staging = borrow_pinned(pinned, total if pending else 0)
    if pending:
        memcpy_async(staging.ctypes.data, device_in.data.ptr, total, stream)
    return staging, device_in, host_chunks, pending


def host_bytes(array: Any) -> np.ndarray:
    """A host chunk's bytes as a 1-D uint8 array."""
    return np.asarray(array).reshape(-1).view(np.uint8)


def runs_of(sizes: Sequence[int], limit: int) -> list[list[int]]:
    """Consecutive positions of ``sizes`` in runs of at most ``limit`` bytes (one, if larger)."""
    pieces: list[list[int]] = [[]]
    filled = 0
    for k, size in enumerate(sizes):
        if pieces[-1] and filled + size > limit:
            pieces.append([])
            filled = 0
        pieces[-1].append(k)
        filled += size
    return pieces if pieces[0] else []


async def upload_host_chunks(
    arrays: Sequence[Any],
    offsets: Sequence[int],
    host_chunks: Sequence[int],
    device_in: cupy.ndarray,
    stream: cupy.cuda.Stream,
    pinned: ExitStack,
) -> None:
    """Queue the upload of the host chunks into ``device_in`` at ``offsets``, a piece of at most
    :data:`PIECE_BYTES` at a time through two pinned buffers used in turn; a piece of chunks
    that lie side by side in ``device_in`` is uploaded with one copy.
    """
    sizes = [int(arrays[i].nbytes) for i in host_chunks]
    padded = [-(-size // ALIGNMENT) * ALIGNMENT for size in sizes]
    pieces = runs_of(padded, PIECE_BYTES)
    if not pieces:
        return
    largest = max(sum(padded[k] for k in piece) for piece in pieces)
    buffers = pinned.enter_context(
        pinned_buffers(max(largest, PIECE_BYTES), count=min(2, len(pieces)))
    )
    done: list[cupy.cuda.Event | None] = [None] * len(buffers)
    for n, piece in enumerate(pieces):
        slot = n % len(buffers)
        if done[slot] is not None:
            await asyncio.to_thread(done[slot].synchronize)  # its last upload has left it
        buffer = buffers[slot]
        first = host_chunks[piece[0]]
        side_by_side = host_chunks[piece[-1]] - first == len(piece) - 1
        if side_by_side:  # where they go in device_in, less the first one's offset
            places = [offsets[host_chunks[k]] - offsets[first] for k in piece]
        else:
            places = np.cumsum([0] + [padded[k] for k in piece[:-1]]).tolist()
        await copy_pieces([host_bytes(arrays[host_chunks[k]]) for k in piece], buffer, places)
        if side_by_side:
            span = places[-1] + sizes[piece[-1]]
            memcpy_async(device_in.data.ptr + offsets[first], buffer.ctypes.data, span, stream)
        else:
            for k, place in zip(piece, places, strict=True):
                destination = device_in.data.ptr + offsets[host_chunks[k]]
                memcpy_async(destination, buffer.ctypes.data + place, sizes[k], stream)
        done[slot] = stream.record()


async def copy_pieces(
    views: Sequence[np.ndarray], buffer: np.ndarray, places: Sequence[int]
) -> None:
    """Copy ``views`` into ``buffer`` at ``places``, in parts of :data:`COPY_PART_BYTES` or more
    on up to :data:`COPY_THREADS` threads."""

    def copy(part: Sequence[int]) -> None:
        for k in part:
            buffer[places[k] : places[k] + views[k].nbytes] = views[k]

    total = sum(view.nbytes for view in views)
    parts = runs_of(
        [view.nbytes for view in views], max(COPY_PART_BYTES, -(-total // COPY_THREADS))
    )
    if len(parts) <= 1:
        copy(range(len(views)))
    else:
        await asyncio.gather(*(asyncio.to_thread(copy, part) for part in parts))


async def copied(source: np.ndarray) -> np.ndarray:
    """A new host array with the bytes of ``source`` (1-D uint8), copied as by
    :func:`copy_pieces`."""
    out = np.empty(source.nbytes, dtype=np.uint8)
    step = max(COPY_PART_BYTES, -(-source.nbytes // COPY_THREADS))
    places = list(range(0, source.nbytes, step))
    await copy_pieces([source[p : p + step] for p in places], out, places)
    return out
