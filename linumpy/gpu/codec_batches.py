"""Batches of zarr's codec calls on the GPU: validation, nvCOMP, checksums.

:class:`~linumpy.gpu.nvcomp_zstd.NvcompZstdCodec` hands its batches here. A decode gathers the
chunks into one device buffer (:mod:`linumpy.gpu.codec_transfers`), checks each frame on the CPU
where its bytes are, decodes with one nvCOMP call and verifies stored checksums with the XXH64
kernel; frames nvCOMP cannot decode go to libzstd. An encode packs the chunks, encodes them with
one nvCOMP call and checks every frame like a stored chunk before returning it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import weakref
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.buffer import gpu as gpu_buffer

from linumpy.errors import ChunkDecodeError
from linumpy.gpu import nvcomp
from linumpy.gpu._xxhash import xxh64_batch
from linumpy.gpu.availability import codec_stream, require_gpu
from linumpy.gpu.codec_transfers import (
    borrow_pinned,
    copied,
    host_bytes,
    is_on_device,
    layout,
    memcpy_async,
    stage_inputs,
    upload_host_chunks,
)
from linumpy.gpu.pinned_buffers import pinned_empty
from linumpy.io.engine.codecs import lookup

if TYPE_CHECKING:
    import cupy
    from zarr.abc.buffer import Buffer, BufferPrototype
    from zarr.dtype import ZDType

    from linumpy._compat import ArraySpec

__all__: list[str] = []

logger = logging.getLogger(__name__)

#: The compressor of :class:`~linumpy.gpu.nvcomp_zstd.NvcompZstdCodec`, the one zarr hands
#: these batches to.
zstd: Any = lookup("zstd")
CHECKSUM_BYTES = zstd.CHECKSUM_BYTES


async def _stream_done(stream: cupy.cuda.Stream) -> None:
    """Wait, off the event loop, for the work queued so far on ``stream``."""
    event = stream.record()
    await asyncio.to_thread(event.synchronize)


def _synchronize_on_error(stream: cupy.cuda.Stream) -> None:
    """Let queued copies finish before their buffers go back to the memory pools."""
    try:
        stream.synchronize()
    except Exception:  # the original error is the one to report
        logger.exception("synchronizing the nvCOMP stream after an error failed")


@functools.lru_cache(maxsize=256)
def _chunk_description(shape: tuple[int, ...], dtype: ZDType[Any, Any]) -> str:
    return f"chunk shape {shape}, dtype {dtype.to_native_dtype()}"


def chunk_key(index: int, count: int, spec: ArraySpec) -> str:
    """The name errors give a chunk of a codec batch (zarr does not tell a codec its key)."""
    return f"batch item {index} of {count} ({_chunk_description(spec.shape, spec.dtype)})"


def _expected_nbytes(spec: ArraySpec) -> int | None:
    """The decoded size of a chunk of a fixed-size data type, or None (e.g. variable strings)."""
    item_size = getattr(spec.dtype, "item_size", None)  # variable-size types have none
    if not isinstance(item_size, int):
        return None
    return math.prod(spec.shape) * item_size


def _is_gpu_prototype(prototype: BufferPrototype) -> bool:
    return issubclass(prototype.buffer, gpu_buffer.Buffer)


def _decodes_to_device(prototype: BufferPrototype) -> bool:
    """Whether decoded chunks belong on the device: zarr's byte buffers or its arrays are there
    (:class:`~linumpy.gpu.zarr_buffers.HostBytes` keeps stored bytes on the host, arrays not)."""
    return _is_gpu_prototype(prototype) or issubclass(prototype.nd_buffer, gpu_buffer.NDBuffer)


def _wrap(prototype: BufferPrototype, array: Any, *, device: bool) -> Buffer:
    """A 1-D uint8 array (host or device) as a buffer of ``prototype``, on the device or not."""
    import cupy

    if device:
        return prototype.buffer.from_array_like(cupy.asarray(array))
    if is_on_device(array):
        array = cupy.asnumpy(array)
    return prototype.buffer.from_array_like(array)


def current_device() -> int | None:
    """The calling thread's CuPy device, or None where there is none (the codec then raises)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDevice())
    except Exception:  # no cupy or no driver: the batch function raises GPUUnavailableError
        return None


# --- decode -----------------------------------------------------------------------------------


PREPARES_AT_ONCE = 2
"""Codec calls staged at once on one event loop (each holds two pinned pieces while it runs)."""

_prepare_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


@dataclass(slots=True)
class PreparedChunk:
    """A chunk checked and staged for the merged nvCOMP call.

    ``address`` is the device address of its compressed bytes (0 for a chunk that libzstd
    decodes, whose bytes are then in ``host``); ``keep`` holds the device buffer they are in.
    """

    spec: ArraySpec
    key: str
    info: Any  # the compressor's FrameInfo
    size: int
    address: int
    host: np.ndarray | None
    keep: Any


def _nvcomp_decodable(info: Any, size: int) -> bool:
    return (
        info.gpu_decodable
        and 0 < (info.content_size or 0) <= nvcomp.MAX_DECODE_BYTES
        and size <= nvcomp.MAX_DECODE_BYTES
    )


async def prepare_items(items: list[tuple[Buffer, ArraySpec, str]]) -> list[PreparedChunk]:
    """Check a codec call's chunks and put their bytes on the device, as the call arrives, so
    that a late merged call (:func:`decode_items`) starts nvCOMP at once."""
    require_gpu("the nvCOMP zstd codec")
    loop = asyncio.get_running_loop()
    slots = _prepare_slots.setdefault(loop, asyncio.Semaphore(PREPARES_AT_ONCE))
    async with slots:
        with ExitStack() as pinned, codec_stream() as stream:
            return await _prepare(stream, items, pinned)


async def _prepare(
    stream: cupy.cuda.Stream, items: list[tuple[Buffer, ArraySpec, str]], pinned: ExitStack
) -> list[PreparedChunk]:
    arrays = [chunk.as_array_like() for chunk, _, _ in items]
    sizes = [int(array.nbytes) for array in arrays]
    offsets, total = layout(sizes)
    try:
        staging, device_in, host_chunks, pending = stage_inputs(
            arrays, offsets, total, stream, download=True, pinned=pinned
        )
        await upload_host_chunks(arrays, offsets, host_chunks, device_in, stream, pinned)
        await _stream_done(stream)  # the bytes are on the device; the pinned buffers are free
    except BaseException:
        _synchronize_on_error(stream)
        raise
    on_host = set(host_chunks)
    prepared = []
    for i, ((_, spec, key), offset, size) in enumerate(zip(items, offsets, sizes, strict=True)):
        # Checked where the bytes are: host chunks in place, device chunks downloaded.
        source = host_bytes(arrays[i]) if i in on_host else staging[offset : offset + size]
        info = zstd.inspect_chunk(source, key=key, expected_size=_expected_nbytes(spec))
        if _nvcomp_decodable(info, size):
            prepared.append(
                PreparedChunk(spec, key, info, size, device_in.data.ptr + offset, None, device_in)
            )
        else:  # libzstd's; a copy, since the staging buffer goes back to the cache
            prepared.append(PreparedChunk(spec, key, info, size, 0, np.array(source), None))
    return prepared


async def _decode_prepared(
    stream: cupy.cuda.Stream, chunks: Sequence[PreparedChunk]
) -> list[Buffer]:
    import cupy

    on_gpu = [i for i, chunk in enumerate(chunks) if chunk.address]
    on_cpu = [i for i, chunk in enumerate(chunks) if not chunk.address]
    out_sizes = [chunks[i].info.content_size or 0 for i in on_gpu]
    out_offsets, out_total = layout(out_sizes)
    checked = [k for k, i in enumerate(on_gpu) if chunks[i].info.checksum is not None]
    to_device = [_decodes_to_device(chunks[i].spec.prototype) for i in on_gpu]
    try:
        with stream:
            device_out = cupy.empty(max(out_total, 1), dtype=np.uint8)
            statuses = nvcomp.decode(
                np.array([chunks[i].address for i in on_gpu], dtype=np.int64),
                np.array([chunks[i].size for i in on_gpu], dtype=np.int64),
                device_out.data.ptr + np.array(out_offsets, dtype=np.int64),
                np.array(out_sizes, dtype=np.int64),
                stream=stream,
            )
            hashes = pinned_empty(8 * len(checked)).view(np.uint64)
            if checked:
                device_hashes = xxh64_batch(
                    device_out,
                    [out_offsets[k] for k in checked],
                    [out_sizes[k] for k in checked],
                    stream=stream,
                )
                memcpy_async(hashes.ctypes.data, device_hashes.data.ptr, hashes.nbytes, stream)
            host_out = None
            if not all(to_device):
                host_out = pinned_empty(out_total)
                memcpy_async(host_out.ctypes.data, device_out.data.ptr, out_total, stream)
        # libzstd decodes the unusual chunks while the GPU works.
        cpu_decoded = await asyncio.gather(
            *(
                asyncio.to_thread(
                    zstd.decode,
                    chunks[i].host,
                    key=chunks[i].key,
                    expected_size=_expected_nbytes(chunks[i].spec),
                )
                for i in on_cpu
            )
        )
        await _stream_done(stream)
    except BaseException:
        _synchronize_on_error(stream)
        raise

    statuses.check([chunks[i].key for i in on_gpu])
    for k, digest in zip(checked, hashes, strict=True):
        stored = chunks[on_gpu[k]].info.checksum
        if (int(digest) & 0xFFFFFFFF) != stored:
            raise ChunkDecodeError(
                chunks[on_gpu[k]].key,
                f"content checksum mismatch: the frame stores 0x{stored:08X}, the decoded bytes "
                f"hash to 0x{int(digest) & 0xFFFFFFFF:08X}",
            )
    logger.debug("decoded %d chunks with nvCOMP, %d on the CPU", len(on_gpu), len(on_cpu))

    results: list[Buffer | None] = [None] * len(chunks)
    for k, i in enumerate(on_gpu):
        region = slice(out_offsets[k], out_offsets[k] + out_sizes[k])
        prototype = chunks[i].spec.prototype
        if to_device[k]:
            results[i] = prototype.buffer.from_array_like(device_out[region])
        else:
            results[i] = prototype.buffer.from_array_like(host_out[region])  # type: ignore[index]
    for i, decoded in zip(on_cpu, cpu_decoded, strict=True):
        prototype = chunks[i].spec.prototype
        results[i] = _wrap(prototype, decoded, device=_decodes_to_device(prototype))
    return results  # type: ignore[return-value]


# --- encode -----------------------------------------------------------------------------------


async def _encode_batch(
    stream: cupy.cuda.Stream,
    chunks: Sequence[Buffer],
    specs: Sequence[ArraySpec],
    keys: Sequence[str],
    *,
    level: int,
    checksum: bool,
    pinned: ExitStack,
) -> list[Buffer]:
    import cupy

    arrays = [chunk.as_array_like() for chunk in chunks]
    sizes = [int(array.nbytes) for array in arrays]
    # nvCOMP refuses empty inputs and takes at most 16 MB: libzstd encodes those.
    on_gpu = [i for i, size in enumerate(sizes) if 0 < size <= nvcomp.MAX_ENCODE_BYTES]
    on_cpu = sorted(set(range(len(chunks))) - set(on_gpu))
    gpu_sizes = [sizes[i] for i in on_gpu]
    in_offsets, in_total = layout(gpu_sizes)
    try:
        gpu_arrays = [arrays[i] for i in on_gpu]
        _, device_in, host_chunks, _ = stage_inputs(
            gpu_arrays, in_offsets, in_total, stream, download=False, pinned=pinned
        )
        await upload_host_chunks(gpu_arrays, in_offsets, host_chunks, device_in, stream, pinned)
        with stream:
            inputs = [device_in[o : o + n] for o, n in zip(in_offsets, gpu_sizes, strict=True)]
            capacities = [nvcomp.max_encoded_size(int(array.nbytes)) for array in inputs]
            out_offsets, out_total = layout(capacities)
            device_out = cupy.empty(max(out_total, 1), dtype=np.uint8)
            hashes = pinned_empty(8 * len(on_gpu)).view(np.uint64)
            encoded = nvcomp.encode(
                device_in.data.ptr + np.array(in_offsets, dtype=np.int64),
                np.array(gpu_sizes, dtype=np.int64),
                device_out.data.ptr + np.array(out_offsets, dtype=np.int64),
                stream=stream,
            )
            if checksum and on_gpu:
                device_hashes = xxh64_batch(device_in, in_offsets, gpu_sizes, stream=stream)
                memcpy_async(hashes.ctypes.data, device_hashes.data.ptr, hashes.nbytes, stream)
        await _stream_done(stream)
        encoded.check([keys[i] for i in on_gpu])
        frame_sizes = encoded.sizes().tolist()
        for k, (frame_size, capacity) in enumerate(zip(frame_sizes, capacities, strict=True)):
            if not 0 < frame_size <= capacity:
                raise RuntimeError(
                    f"nvCOMP reported {frame_size} compressed bytes for {keys[on_gpu[k]]}, "
                    f"capacity {capacity}"
                )
        # Frames back to the host, packed, with room for a checksum.
        extra = CHECKSUM_BYTES if checksum else 0
        packed_offsets, packed_total = layout([n + extra for n in frame_sizes])
        # Downloaded into pinned memory: a copy per frame into pageable memory waits for each.
        packed = borrow_pinned(pinned, packed_total)
        with stream:
            for k, frame_size in enumerate(frame_sizes):
                memcpy_async(
                    packed.ctypes.data + packed_offsets[k],
                    device_out.data.ptr + out_offsets[k],
                    frame_size,
                    stream,
                )
        await _stream_done(stream)
        if not all(_is_gpu_prototype(spec.prototype) for spec in specs):
            packed = await copied(packed)  # host frames are returned: the pinned buffer is lent
    except BaseException:
        _synchronize_on_error(stream)
        raise

    frames: list[np.ndarray | None] = [None] * len(chunks)
    for k, i in enumerate(on_gpu):
        frame = packed[packed_offsets[k] : packed_offsets[k] + frame_sizes[k] + extra]
        # Never store what the decoders would reject: check nvCOMP's frame like a stored chunk.
        info = zstd.inspect_chunk(frame[: frame_sizes[k]], key=keys[i], expected_size=sizes[i])
        if info.n_frames != 1 or info.n_skippable or info.checksum is not None:
            raise ChunkDecodeError(keys[i], f"nvCOMP wrote an unexpected frame layout: {info}")
        if checksum:
            zstd.set_checksum(frame, int(hashes[k]))
        frames[i] = frame
    cpu_codec = zstd.encoder(level, checksum)
    for i in on_cpu:
        host = cupy.asnumpy(arrays[i]) if is_on_device(arrays[i]) else np.asarray(arrays[i])
        encoded = await asyncio.to_thread(cpu_codec.encode, host)
        frames[i] = np.frombuffer(encoded, dtype=np.uint8)

    device_packed = None
    if any(_is_gpu_prototype(specs[i].prototype) for i in on_gpu):
        # One upload of every frame rather than one per chunk.
        with stream:
            device_packed = cupy.empty(max(packed_total, 1), dtype=np.uint8)
            memcpy_async(device_packed.data.ptr, packed.ctypes.data, packed_total, stream)
        await _stream_done(stream)
    for k, i in enumerate(on_gpu):
        if device_packed is not None and _is_gpu_prototype(specs[i].prototype):
            start = packed_offsets[k]
            frames[i] = device_packed[start : start + frame_sizes[k] + extra]
    return [
        _wrap(spec.prototype, frame, device=_is_gpu_prototype(spec.prototype))
        for spec, frame in zip(specs, frames, strict=True)
    ]


async def decode_items(chunks: list[PreparedChunk | tuple[Buffer, ArraySpec, str]]) -> list[Buffer]:
    """Decode chunks with one nvCOMP call (the codec's merged calls).

    Each item is a chunk prepared as its call arrived (:func:`prepare_items`) or a ``(chunk
    bytes, spec, name)`` item, checked and staged here, in the merged call.
    """
    require_gpu("the nvCOMP zstd codec")
    raw = [i for i, chunk in enumerate(chunks) if not isinstance(chunk, PreparedChunk)]
    ready = list(chunks)
    with codec_stream() as stream:
        if raw:
            with ExitStack() as pinned:
                prepared = await _prepare(stream, [chunks[i] for i in raw], pinned)  # type: ignore[misc]
            for i, chunk in zip(raw, prepared, strict=True):
                ready[i] = chunk
        return await _decode_prepared(stream, ready)  # type: ignore[arg-type]


def arrived_on_host(items: Sequence[tuple[Buffer, ArraySpec, str]]) -> bool:
    """Whether every chunk's bytes are in host memory (zarr's host byte buffers)."""
    return not any(is_on_device(chunk.as_array_like()) for chunk, _, _ in items)


async def encode_items(
    items: list[tuple[Buffer, ArraySpec, str]], *, level: int, checksum: bool
) -> list[Buffer]:
    """Encode ``(chunk bytes, spec, name)`` items into zstd frames in one batch."""
    require_gpu("the nvCOMP zstd codec")
    with ExitStack() as pinned, codec_stream() as stream:
        return await _encode_batch(
            stream,
            *(list(c) for c in zip(*items, strict=True)),
            level=level,
            checksum=checksum,
            pinned=pinned,
        )
