"""zarr's ``zstd`` codec, decoded and encoded on the GPU with nvCOMP.

:class:`NvcompZstdCodec` is a drop-in implementation of zarr's ``zstd`` codec: it writes the same
JSON metadata and standard zstd frames, so arrays stay readable by every zarr implementation. Inside
zarr's codec pipeline it decodes a whole batch of chunks with one batched nvCOMP call, which is
where zarr's own codec (libzstd on the CPU, one chunk at a time, then a copy to the GPU) is slow.
It follows the API of zarr-python's unmerged GPU zstd codec (zarr-python PR #2863).

Use it by registering it and routing zarr's ``zstd`` through it while opening arrays::

    import zarr
    from linumpy.gpu.nvcomp_zstd import gpu_zstd_config, register_nvcomp_zstd

    if register_nvcomp_zstd():
        with zarr.config.enable_gpu(), zarr.config.set(gpu_zstd_config()):
            volume = zarr.open_array("volume.zarr")[...]  # a cupy array, decoded by nvCOMP

nvCOMP is not handed anything it could get wrong (the GPU guide's "Checksums and corrupt data"
section says why): every chunk is
first walked on the CPU by :func:`linumpy.io.zstd_frames.inspect_zstd_chunk`. Malformed chunks
raise :class:`~linumpy.errors.ChunkDecodeError`; valid chunks that nvCOMP cannot decode (several
frames, skippable frames, no declared content size) are decoded by libzstd on the CPU; stored
content checksums, which nvCOMP ignores, are verified on the GPU with an XXH64 kernel.

Importing this module imports neither nvCOMP nor kvikio and touches no device (zarr itself imports
cupy when it is installed, which creates no CUDA context); that happens on the first decode or
encode.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import os
import threading
import time
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from numcodecs import Zstd
from zarr.abc.codec import BytesBytesCodec
from zarr.codecs.zstd import parse_checksum, parse_zstd_level
from zarr.core.buffer import gpu as gpu_buffer
from zarr.core.common import parse_named_configuration
from zarr.core.dtype.common import HasItemSize
from zarr.registry import fully_qualified_name, register_codec

from linumpy.errors import ChunkDecodeError, GPUUnavailableError
from linumpy.gpu._coalesce import CallMerger
from linumpy.gpu._fetch import pinned_buffers
from linumpy.gpu._xxhash import xxh64_batch
from linumpy.io.zstd_frames import decode_zstd_cpu, inspect_zstd_chunk

if TYPE_CHECKING:
    from typing import Self

    import cupy
    from nvidia import nvcomp
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, BufferPrototype
    from zarr.core.common import JSON
    from zarr.core.dtype.wrapper import ZDType

__all__ = [
    "BATCH_SIZE_ENV",
    "CONCURRENCY_ENV",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CONCURRENCY",
    "NvcompContext",
    "NvcompZstdCodec",
    "gpu_unavailable_reason",
    "gpu_zstd_config",
    "nvcomp_context",
    "register_nvcomp_zstd",
]

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 1024
"""Chunks per codec call under :func:`gpu_zstd_config` (zarr's own default is 1)."""

BATCH_SIZE_ENV = "LINUMPY_NVCOMP_BATCH_SIZE"
"""Environment variable that overrides :data:`DEFAULT_BATCH_SIZE`."""

DEFAULT_CONCURRENCY = 32
"""zarr's ``async.concurrency`` under :func:`gpu_zstd_config` (zarr's own default is 10)."""

CONCURRENCY_ENV = "LINUMPY_NVCOMP_CONCURRENCY"
"""Environment variable that overrides :data:`DEFAULT_CONCURRENCY`."""

# nvCOMP's required alignment for compressed and decompressed buffers (and a multiple of the
# 8 bytes the XXH64 kernel needs).
_ALIGNMENT = 16
_CHECKSUM_FLAG = 0x04  # Content_Checksum_flag: bit 2 of a zstd frame header descriptor
_DESCRIPTOR_OFFSET = 4  # the descriptor byte follows the 4-byte magic number
_CHECKSUM_BYTES = 4
# nvCOMP's zstd.h: the compressor takes chunks up to 16 MB, the decompressor up to 2 GiB - 1.
_MAX_GPU_ENCODE_BYTES = 1 << 24
_MAX_GPU_DECODE_BYTES = (1 << 31) - 1


@dataclass(frozen=True)
class NvcompZstdCodec(BytesBytesCodec):
    """zstd compression on the GPU with nvCOMP, as zarr's ``zstd`` codec.

    Metadata, parameters and the stored bytes are those of :class:`zarr.codecs.ZstdCodec`.
    ``is_fixed_size`` is False: compressed sizes depend on the data, and True would let zarr
    accept this codec as a shard-index codec.

    Parameters
    ----------
    level
        The zstd level written to the metadata (at most 22). nvCOMP ignores it when encoding: its
        frames have about the compression ratio of libzstd at level 3, whatever the level.
    checksum
        Whether encoded frames carry zstd's content checksum. Decoding verifies any checksum a
        frame carries, whatever this flag says.

    Examples
    --------
    The metadata is that of zarr's ``zstd`` codec:

    >>> codec = NvcompZstdCodec(level=3, checksum=True)
    >>> codec.to_dict()
    {'name': 'zstd', 'configuration': {'level': 3, 'checksum': True}}
    >>> NvcompZstdCodec.from_dict(codec.to_dict()) == codec
    True

    Writing a cupy array, encoded on the GPU:

    >>> import zarr
    >>> from linumpy.gpu.zarr_io import gpu_zarr_context
    >>> import cupy  # doctest: +SKIP
    >>> with gpu_zarr_context():  # doctest: +SKIP
    ...     array = zarr.create_array("volume.zarr", shape=(64, 64), chunks=(32, 32),
    ...                               dtype="uint16", compressors=codec)
    ...     array[...] = cupy.ones((64, 64), dtype="uint16")
    """

    is_fixed_size = False

    level: int = 0
    checksum: bool = False

    def __init__(self, *, level: int = 0, checksum: bool = False) -> None:
        object.__setattr__(self, "level", parse_zstd_level(level))
        object.__setattr__(self, "checksum", parse_checksum(checksum))

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Self:
        """Build the codec from zarr's JSON form of the ``zstd`` codec."""
        _, configuration = parse_named_configuration(data, "zstd")
        return cls(**configuration)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, JSON]:
        """The JSON form of zarr's ``zstd`` codec with this level and checksum flag."""
        return {"name": "zstd", "configuration": {"level": self.level, "checksum": self.checksum}}

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        raise NotImplementedError

    async def decode(
        self, chunks_and_specs: Iterable[tuple[Buffer | None, ArraySpec]]
    ) -> Iterable[Buffer | None]:
        """Decode a batch of zstd chunks; ``None`` entries stay ``None``.

        Batches decoded concurrently on one event loop (the shards of a sharded array) share one
        nvCOMP call.

        Raises
        ------
        ChunkDecodeError
            For a malformed chunk, a declared size other than the chunk's, or a checksum mismatch.
            zarr does not tell a codec the chunk's key: the error names the chunk by its place in
            the batch, its shape and its data type.
        """
        items = list(chunks_and_specs)
        present = [i for i, (chunk, _) in enumerate(items) if chunk is not None]
        results: list[Buffer | None] = [None] * len(items)
        if present:
            decoded = await _DECODES(_named(items, present), key=_current_device())
            for i, buffer in zip(present, decoded, strict=True):
                results[i] = buffer
        return results

    async def encode(
        self, chunks_and_specs: Iterable[tuple[Buffer | None, ArraySpec]]
    ) -> Iterable[Buffer | None]:
        """Encode a batch of chunks into standard zstd frames; ``None`` entries stay ``None``."""
        items = list(chunks_and_specs)
        present = [i for i, (chunk, _) in enumerate(items) if chunk is not None]
        results: list[Buffer | None] = [None] * len(items)
        if present:
            encoded = await _encoder(self.level, self.checksum)(
                _named(items, present), key=_current_device()
            )
            for i, buffer in zip(present, encoded, strict=True):
                results[i] = buffer
        return results

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        (decoded,) = await self.decode([(chunk_bytes, chunk_spec)])
        return cast("Buffer", decoded)

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer | None:
        (encoded,) = await self.encode([(chunk_bytes, chunk_spec)])
        return encoded


def register_nvcomp_zstd() -> bool:
    """Register :class:`NvcompZstdCodec` with zarr as an implementation of ``zstd``.

    Registration alone changes nothing: zarr uses the class only where its config names it (see
    :func:`gpu_zstd_config`). Calling this again is harmless.

    Returns
    -------
    bool
        True when registered; False, without raising, when cupy, nvCOMP (``nvidia.nvcomp``) or a
        CUDA device is missing (the reason is logged at debug level).

    Examples
    --------
    >>> register_nvcomp_zstd() == (gpu_unavailable_reason() is None)
    True
    >>> import zarr
    >>> if register_nvcomp_zstd():  # doctest: +SKIP
    ...     with zarr.config.enable_gpu(), zarr.config.set(gpu_zstd_config()):
    ...         volume = zarr.open_array("volume.zarr", mode="r")[...]  # decoded by nvCOMP
    """
    reason = gpu_unavailable_reason()
    if reason is not None:
        logger.debug("nvCOMP zstd codec not registered: %s", reason)
        return False
    register_codec("zstd", NvcompZstdCodec)
    return True


def gpu_zstd_config(
    *, batch_size: int | None = None, concurrency: int | None = None
) -> dict[str, str | int]:
    """The zarr config overrides that route the ``zstd`` codec through nvCOMP.

    Apply them with ``zarr.config.set(gpu_zstd_config())`` (dotted keys: a nested
    ``{"codecs": {...}}`` would replace zarr's whole codec table) after
    :func:`register_nvcomp_zstd` returned True, and open arrays inside that context: zarr fixes an
    array's codecs when it opens it. Add ``zarr.config.enable_gpu()`` to get cupy arrays.

    Parameters
    ----------
    batch_size
        Chunks handed to one codec call (one nvCOMP batch). Default: the environment variable
        ``LINUMPY_NVCOMP_BATCH_SIZE``, else :data:`DEFAULT_BATCH_SIZE`.
    concurrency
        zarr's ``async.concurrency``: how many shards (or batches) zarr reads and decodes at once.
        The inner chunks of shards decoded at once share nvCOMP calls, so sharded arrays read
        faster with more (on an H200, a 1 GiB array of 16 shards: 3.4 GB/s at zarr's default of
        10, 5.1 at 32, 5.2 at 64); each shard in flight holds its decoded bytes in device
        memory. Default: the environment variable ``LINUMPY_NVCOMP_CONCURRENCY``, else
        :data:`DEFAULT_CONCURRENCY`.

    Returns
    -------
    dict
        ``{"codecs.zstd": ..., "codec_pipeline.batch_size": ..., "async.concurrency": ...}``.

    Raises
    ------
    ValueError
        When the batch size or the concurrency is not a positive integer.

    Examples
    --------
    >>> import zarr
    >>> gpu_zstd_config(batch_size=256, concurrency=16)  # doctest: +NORMALIZE_WHITESPACE
    {'codecs.zstd': 'linumpy.gpu.nvcomp_zstd.NvcompZstdCodec', 'codec_pipeline.batch_size': 256,
     'async.concurrency': 16}
    >>> with zarr.config.set(gpu_zstd_config(batch_size=256)):
    ...     zarr.config.get("codec_pipeline.batch_size")
    256
    """
    if batch_size is None:
        batch_size = int(os.environ.get(BATCH_SIZE_ENV, DEFAULT_BATCH_SIZE))
    if concurrency is None:
        concurrency = int(os.environ.get(CONCURRENCY_ENV, DEFAULT_CONCURRENCY))
    return {
        "codecs.zstd": fully_qualified_name(NvcompZstdCodec),
        "codec_pipeline.batch_size": _parse_positive("batch_size", batch_size),
        "async.concurrency": _parse_positive("concurrency", concurrency),
    }


def _parse_positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def gpu_unavailable_reason() -> str | None:
    """Why the codec cannot run here (cupy, nvCOMP or a CUDA device missing), or None.

    Examples
    --------
    >>> reason = gpu_unavailable_reason()
    >>> reason is None or isinstance(reason, str)
    True

    On a machine without cupy:

    >>> gpu_unavailable_reason()  # doctest: +SKIP
    "cupy is not installed (No module named 'cupy')"
    """
    try:
        import cupy
    except ImportError as exc:
        return f"cupy is not installed ({exc})"
    try:
        import nvidia.nvcomp  # noqa: F401
    except ImportError as exc:
        return f"nvidia-nvcomp is not installed ({exc})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as exc:  # cupy raises several CUDA error types when no driver is present
        return f"no usable CUDA device ({exc})"
    return None


# --- helpers shared by decode and encode ------------------------------------------------------


@dataclass(slots=True)
class NvcompContext:
    """What one thread uses on one device: a CuPy stream and the nvCOMP codec bound to it.

    Made by :func:`nvcomp_context`, not directly.

    Examples
    --------
    >>> context = nvcomp_context()  # doctest: +SKIP
    >>> isinstance(context, NvcompContext), context.device_id  # doctest: +SKIP
    (True, 0)
    >>> context.stream.synchronize()  # wait for the nvCOMP work queued so far  # doctest: +SKIP
    """

    device_id: int
    stream: cupy.cuda.Stream
    codec: nvcomp.Codec
    max_compressed_sizes: dict[int, int] = field(default_factory=dict)


_thread_state = threading.local()


def nvcomp_context() -> NvcompContext:
    """The calling thread's stream and nvCOMP codec on its current CuPy device (made once).

    Raises
    ------
    GPUUnavailableError
        When cupy, nvCOMP or a CUDA device is missing.

    Examples
    --------
    >>> context = nvcomp_context()  # doctest: +SKIP
    >>> context is nvcomp_context()  # the same stream and codec on each call  # doctest: +SKIP
    True

    On a machine without cupy:

    >>> nvcomp_context()  # doctest: +SKIP
    Traceback (most recent call last):
    ...
    linumpy.errors.GPUUnavailableError: the nvCOMP zstd codec cannot run here: cupy is not ...
    """
    reason = None if getattr(_thread_state, "contexts", None) else gpu_unavailable_reason()
    if reason is not None:
        raise GPUUnavailableError(f"the nvCOMP zstd codec cannot run here: {reason}")
    import cupy
    from nvidia import nvcomp

    device_id = cupy.cuda.runtime.getDevice()
    contexts: dict[int, NvcompContext] = _thread_state.__dict__.setdefault("contexts", {})
    context = contexts.get(device_id)
    if context is None:
        with cupy.cuda.Device(device_id):
            # A blocking stream waits for earlier work on the legacy default stream, where zarr
            # and cupy copy chunk bytes to the device and scatter decoded chunks; that also keeps
            # memory freed after such work from being reused here too early.
            stream = cupy.cuda.Stream(non_blocking=False)
            codec = nvcomp.Codec(
                algorithm="Zstd",
                bitstream_kind=nvcomp.BitstreamKind.RAW,
                device_id=device_id,
                cuda_stream=stream.ptr,
            )
        context = contexts[device_id] = NvcompContext(device_id, stream, codec)
    return context


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


def _chunk_key(index: int, count: int, spec: ArraySpec) -> str:
    return f"batch item {index} of {count} ({_chunk_description(spec.shape, spec.dtype)})"


def _named(
    items: Sequence[tuple[Buffer | None, ArraySpec]], present: Sequence[int]
) -> list[tuple[Buffer, ArraySpec, str]]:
    """The present chunks of a batch with their specs and the names errors give them."""
    return [
        (cast("Buffer", items[i][0]), items[i][1], _chunk_key(i, len(items), items[i][1]))
        for i in present
    ]


def _expected_nbytes(spec: ArraySpec) -> int | None:
    """The decoded size of a chunk of a fixed-size data type, or None (e.g. variable strings)."""
    if not isinstance(spec.dtype, HasItemSize):
        return None
    return math.prod(spec.shape) * spec.dtype.item_size


def _layout(sizes: Sequence[int]) -> tuple[list[int], int]:
    """Aligned offsets of buffers of ``sizes`` packed one after another, and their total."""
    offsets = []
    position = 0
    for size in sizes:
        offsets.append(position)
        position += -(-size // _ALIGNMENT) * _ALIGNMENT
    return offsets, position


def _is_on_device(array: Any) -> bool:
    return hasattr(array, "__cuda_array_interface__")


def _is_gpu_prototype(prototype: BufferPrototype) -> bool:
    return issubclass(prototype.buffer, gpu_buffer.Buffer)


def _pinned_empty(nbytes: int) -> np.ndarray:
    """An uninitialised 1-D uint8 array in page-locked host memory (CuPy's pinned pool)."""
    import cupy

    memory = cupy.cuda.alloc_pinned_memory(max(nbytes, 1))
    return np.frombuffer(memory, dtype=np.uint8, count=nbytes)


def _borrow_pinned(pinned: ExitStack, nbytes: int) -> np.ndarray:
    """Page-locked host memory until ``pinned`` closes, from the cache the fast path uses too:
    page-locking a new buffer for every batch cost more than the batch's GPU work."""
    if nbytes == 0:
        return np.empty(0, dtype=np.uint8)
    (buffer,) = pinned.enter_context(pinned_buffers(nbytes, count=1))
    return buffer[:nbytes]


def _memcpy_async(dst: int, src: int, nbytes: int, stream: cupy.cuda.Stream) -> None:
    """Queue a copy between any two addresses (unified addressing picks the direction)."""
    import cupy

    if nbytes:
        cupy.cuda.runtime.memcpyAsync(dst, src, nbytes, cupy.cuda.runtime.memcpyDefault, stream.ptr)


def _device_pointer(array: Any) -> int:
    import cupy

    return int(cupy.asarray(array).data.ptr)


def _wrap(prototype: BufferPrototype, array: Any) -> Buffer:
    """A 1-D uint8 array (host or device) as a buffer of ``prototype``, moved if it must be."""
    import cupy

    if _is_gpu_prototype(prototype):
        return prototype.buffer.from_array_like(cupy.asarray(array))
    if _is_on_device(array):
        array = cupy.asnumpy(array)
    return prototype.buffer.from_array_like(array)


def _stage_inputs(
    arrays: Sequence[Any],
    offsets: Sequence[int],
    total: int,
    stream: cupy.cuda.Stream,
    *,
    download: bool,
    pinned: ExitStack,
) -> tuple[np.ndarray, cupy.ndarray, list[int], bool]:
    """Queue the gathering of every chunk into one device buffer at ``offsets``.

    Device chunks are copied on the device into ``device_in``; with ``download`` the whole buffer
    is then copied once into the pinned host buffer ``staging`` (borrowed until ``pinned`` closes;
    the CPU checks frames there).
    Host chunks are copied into ``staging`` and uploaded by :func:`_upload_host_chunks`, once any
    download is done.

    Returns
    -------
    staging, device_in, host_chunks, pending
        The two buffers, the indices of the host chunks, and whether a download is queued.
    """
    import cupy

    with stream:
        device_in = cupy.empty(max(total, 1), dtype=np.uint8)
    host_chunks = []
    for i, (array, offset) in enumerate(zip(arrays, offsets, strict=True)):
        if _is_on_device(array):
            _memcpy_async(device_in.data.ptr + offset, _device_pointer(array), array.nbytes, stream)
        else:
            host_chunks.append(i)
    pending = download and len(host_chunks) < len(arrays)
    staging = _borrow_pinned(pinned, total if pending or host_chunks else 0)
    if pending:
        _memcpy_async(staging.ctypes.data, device_in.data.ptr, total, stream)
    return staging, device_in, host_chunks, pending


def _upload_host_chunks(
    arrays: Sequence[Any],
    offsets: Sequence[int],
    host_chunks: Sequence[int],
    staging: np.ndarray,
    device_in: cupy.ndarray,
    stream: cupy.cuda.Stream,
) -> None:
    """Copy the host chunks into ``staging`` and queue their upload into ``device_in``."""
    for i in host_chunks:
        staging[offsets[i] : offsets[i] + arrays[i].nbytes] = np.asarray(arrays[i]).view(np.uint8)
    if len(host_chunks) == len(arrays):
        _memcpy_async(device_in.data.ptr, staging.ctypes.data, staging.nbytes, stream)
        return
    for i in host_chunks:
        _memcpy_async(
            device_in.data.ptr + offsets[i],
            staging.ctypes.data + offsets[i],
            arrays[i].nbytes,
            stream,
        )


def _set_checksum(frame: np.ndarray, checksum: int) -> None:
    """Make the single zstd frame ``frame[:-4]`` carry ``checksum`` in its last four bytes.

    ``frame`` is a 1-D uint8 array: a frame without a checksum followed by four spare bytes. The
    frame header descriptor gains the Content_Checksum_flag and the checksum (the low 32 bits of
    XXH64 of the content) is stored little-endian after the last block (RFC 8878, section 3.1.1).
    """
    frame[_DESCRIPTOR_OFFSET] |= _CHECKSUM_FLAG
    frame[-_CHECKSUM_BYTES:] = np.frombuffer(
        (checksum & 0xFFFFFFFF).to_bytes(_CHECKSUM_BYTES, "little"), dtype=np.uint8
    )


def _current_device() -> int | None:
    """The calling thread's CuPy device, or None where there is none (the codec then raises)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDevice())
    except Exception:  # no cupy or no driver: the batch function raises GPUUnavailableError
        return None


# --- decode -----------------------------------------------------------------------------------


async def _decode_batch(
    chunks: Sequence[Buffer], specs: Sequence[ArraySpec], keys: Sequence[str], pinned: ExitStack
) -> list[Buffer]:
    context = nvcomp_context()
    stream = context.stream
    import cupy
    from nvidia import nvcomp

    started = time.perf_counter()
    arrays = [chunk.as_array_like() for chunk in chunks]
    sizes = [int(array.nbytes) for array in arrays]
    in_offsets, in_total = _layout(sizes)
    try:
        staging, device_in, host_chunks, pending = _stage_inputs(
            arrays, in_offsets, in_total, stream, download=True, pinned=pinned
        )
        if pending:
            await _stream_done(stream)
        with stream:
            _upload_host_chunks(arrays, in_offsets, host_chunks, staging, device_in, stream)
        staged = time.perf_counter()
        # Validate everything before nvCOMP sees anything.
        infos = [
            inspect_zstd_chunk(
                staging[offset : offset + size], key=key, expected_size=_expected_nbytes(spec)
            )
            for offset, size, key, spec in zip(in_offsets, sizes, keys, specs, strict=True)
        ]
    except BaseException:
        _synchronize_on_error(stream)
        raise
    validated = time.perf_counter()

    on_gpu = [
        i
        for i, info in enumerate(infos)
        if info.gpu_decodable
        and 0 < (info.content_size or 0) <= _MAX_GPU_DECODE_BYTES
        and sizes[i] <= _MAX_GPU_DECODE_BYTES
    ]
    on_cpu = sorted(set(range(len(chunks))) - set(on_gpu))
    out_sizes = [infos[i].content_size or 0 for i in on_gpu]
    out_offsets, out_total = _layout(out_sizes)
    checked = [k for k, i in enumerate(on_gpu) if infos[i].checksum is not None]
    to_device = [_is_gpu_prototype(specs[i].prototype) for i in on_gpu]
    try:
        with stream:
            device_out = cupy.empty(max(out_total, 1), dtype=np.uint8)
            if on_gpu:
                sources = nvcomp.as_arrays(
                    device_in,
                    [in_offsets[i] for i in on_gpu],
                    [sizes[i] for i in on_gpu],
                    stream.ptr,
                )
                targets = nvcomp.as_arrays(device_out, out_offsets, out_sizes, stream.ptr)
                context.codec.decode(sources, out=targets)
            hashes = _pinned_empty(8 * len(checked)).view(np.uint64)
            if checked:
                device_hashes = xxh64_batch(
                    device_out,
                    [out_offsets[k] for k in checked],
                    [out_sizes[k] for k in checked],
                    stream=stream,
                )
                _memcpy_async(hashes.ctypes.data, device_hashes.data.ptr, hashes.nbytes, stream)
            host_out = None
            if not all(to_device):
                host_out = _pinned_empty(out_total)
                _memcpy_async(host_out.ctypes.data, device_out.data.ptr, out_total, stream)
        # libzstd decodes the unusual chunks while the GPU works.
        cpu_decoded = await asyncio.gather(
            *(
                asyncio.to_thread(
                    decode_zstd_cpu,
                    staging[in_offsets[i] : in_offsets[i] + sizes[i]],
                    key=keys[i],
                    expected_size=_expected_nbytes(specs[i]),
                )
                for i in on_cpu
            )
        )
        await _stream_done(stream)
    except BaseException:
        _synchronize_on_error(stream)
        raise

    for k, digest in zip(checked, hashes, strict=True):
        stored = infos[on_gpu[k]].checksum
        if (int(digest) & 0xFFFFFFFF) != stored:
            raise ChunkDecodeError(
                keys[on_gpu[k]],
                f"content checksum mismatch: the frame stores 0x{stored:08X}, the decoded bytes "
                f"hash to 0x{int(digest) & 0xFFFFFFFF:08X}",
            )
    logger.debug(
        "decoded %d chunks with nvCOMP, %d on the CPU; ms: staging %.1f, checks %.1f, decode %.1f",
        len(on_gpu),
        len(on_cpu),
        1e3 * (staged - started),
        1e3 * (validated - staged),
        1e3 * (time.perf_counter() - validated),
    )

    results: list[Buffer | None] = [None] * len(chunks)
    for k, i in enumerate(on_gpu):
        region = slice(out_offsets[k], out_offsets[k] + out_sizes[k])
        prototype = specs[i].prototype
        if to_device[k]:
            results[i] = prototype.buffer.from_array_like(device_out[region])
        else:
            results[i] = prototype.buffer.from_array_like(host_out[region])  # type: ignore[index]
    for i, decoded in zip(on_cpu, cpu_decoded, strict=True):
        results[i] = _wrap(specs[i].prototype, decoded)
    return results  # type: ignore[return-value]


# --- encode -----------------------------------------------------------------------------------


def _max_compressed_size(context: NvcompContext, array: cupy.ndarray) -> int:
    from nvidia import nvcomp

    size = int(array.nbytes)
    known = context.max_compressed_sizes.get(size)
    if known is None:
        known = int(context.codec.get_max_comp_buffer_size(nvcomp.as_array(array)))
        context.max_compressed_sizes[size] = known
    return known


async def _encode_batch(
    chunks: Sequence[Buffer],
    specs: Sequence[ArraySpec],
    keys: Sequence[str],
    *,
    level: int,
    checksum: bool,
    pinned: ExitStack,
) -> list[Buffer]:
    context = nvcomp_context()
    stream = context.stream
    import cupy
    from nvidia import nvcomp

    arrays = [chunk.as_array_like() for chunk in chunks]
    sizes = [int(array.nbytes) for array in arrays]
    # nvCOMP refuses empty inputs and takes at most 16 MB: libzstd encodes those.
    on_gpu = [i for i, size in enumerate(sizes) if 0 < size <= _MAX_GPU_ENCODE_BYTES]
    on_cpu = sorted(set(range(len(chunks))) - set(on_gpu))
    gpu_sizes = [sizes[i] for i in on_gpu]
    in_offsets, in_total = _layout(gpu_sizes)
    try:
        with stream:
            gpu_arrays = [arrays[i] for i in on_gpu]
            staging, device_in, host_chunks, _ = _stage_inputs(
                gpu_arrays, in_offsets, in_total, stream, download=False, pinned=pinned
            )
            _upload_host_chunks(gpu_arrays, in_offsets, host_chunks, staging, device_in, stream)
            inputs = [device_in[o : o + n] for o, n in zip(in_offsets, gpu_sizes, strict=True)]
            capacities = [_max_compressed_size(context, array) for array in inputs]
            out_offsets, out_total = _layout(capacities)
            device_out = cupy.empty(max(out_total, 1), dtype=np.uint8)
            hashes = _pinned_empty(8 * len(on_gpu)).view(np.uint64)
            if on_gpu:
                sources = nvcomp.as_arrays(device_in, in_offsets, gpu_sizes, stream.ptr)
                targets = nvcomp.as_arrays(device_out, out_offsets, capacities, stream.ptr)
                compressed = context.codec.encode(sources, out=targets)
                if checksum:
                    device_hashes = xxh64_batch(device_in, in_offsets, gpu_sizes, stream=stream)
                    _memcpy_async(hashes.ctypes.data, device_hashes.data.ptr, hashes.nbytes, stream)
        await _stream_done(stream)
        frame_sizes = [int(n) for n in compressed.buffer_sizes] if on_gpu else []
        for k, (frame_size, capacity) in enumerate(zip(frame_sizes, capacities, strict=True)):
            if not 0 < frame_size <= capacity:
                raise RuntimeError(
                    f"nvCOMP reported {frame_size} compressed bytes for {keys[on_gpu[k]]}, "
                    f"capacity {capacity}"
                )
        # Frames back to the host, packed, with room for a checksum.
        extra = _CHECKSUM_BYTES if checksum else 0
        packed_offsets, packed_total = _layout([n + extra for n in frame_sizes])
        if all(_is_gpu_prototype(spec.prototype) for spec in specs):
            packed = _borrow_pinned(pinned, packed_total)  # uploaded again below
        else:
            packed = np.empty(packed_total, dtype=np.uint8)  # host frames are returned: not lent

        with stream:
            for k, frame_size in enumerate(frame_sizes):
                _memcpy_async(
                    packed.ctypes.data + packed_offsets[k],
                    device_out.data.ptr + out_offsets[k],
                    frame_size,
                    stream,
                )
        await _stream_done(stream)
    except BaseException:
        _synchronize_on_error(stream)
        raise

    frames: list[np.ndarray | None] = [None] * len(chunks)
    for k, i in enumerate(on_gpu):
        frame = packed[packed_offsets[k] : packed_offsets[k] + frame_sizes[k] + extra]
        # Never store what the decoders would reject: check nvCOMP's frame like a stored chunk.
        info = inspect_zstd_chunk(frame[: frame_sizes[k]], key=keys[i], expected_size=sizes[i])
        if info.n_frames != 1 or info.n_skippable or info.checksum is not None:
            raise ChunkDecodeError(keys[i], f"nvCOMP wrote an unexpected frame layout: {info}")
        if checksum:
            _set_checksum(frame, int(hashes[k]))
        frames[i] = frame
    cpu_codec = Zstd(level=level, checksum=checksum)
    for i in on_cpu:
        host = cupy.asnumpy(arrays[i]) if _is_on_device(arrays[i]) else np.asarray(arrays[i])
        encoded = await asyncio.to_thread(cpu_codec.encode, host)
        frames[i] = np.frombuffer(encoded, dtype=np.uint8)

    device_packed = None
    if any(_is_gpu_prototype(specs[i].prototype) for i in on_gpu):
        # One upload of every frame rather than one per chunk.
        with stream:
            device_packed = cupy.empty(max(packed_total, 1), dtype=np.uint8)
            _memcpy_async(device_packed.data.ptr, packed.ctypes.data, packed_total, stream)
        await _stream_done(stream)
    for k, i in enumerate(on_gpu):
        if device_packed is not None and _is_gpu_prototype(specs[i].prototype):
            start = packed_offsets[k]
            frames[i] = device_packed[start : start + frame_sizes[k] + extra]
    return [_wrap(spec.prototype, frame) for spec, frame in zip(specs, frames, strict=True)]


async def _decode_items(items: list[tuple[Buffer, ArraySpec, str]]) -> list[Buffer]:
    with ExitStack() as pinned:
        return await _decode_batch(*(list(c) for c in zip(*items, strict=True)), pinned=pinned)


async def _encode_items(
    items: list[tuple[Buffer, ArraySpec, str]], *, level: int, checksum: bool
) -> list[Buffer]:
    with ExitStack() as pinned:
        return await _encode_batch(
            *(list(c) for c in zip(*items, strict=True)),
            level=level,
            checksum=checksum,
            pinned=pinned,
        )


_DECODES: CallMerger[tuple[Buffer, ArraySpec, str], Buffer] = CallMerger(_decode_items)


@functools.cache
def _encoder(level: int, checksum: bool) -> CallMerger[tuple[Buffer, ArraySpec, str], Buffer]:
    return CallMerger(functools.partial(_encode_items, level=level, checksum=checksum))
