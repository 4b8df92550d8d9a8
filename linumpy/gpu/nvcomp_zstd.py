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

Every chunk is first walked on the CPU by the zstd compressor's ``inspect_chunk``: malformed
chunks raise :class:`~linumpy.errors.ChunkDecodeError`, valid chunks nvCOMP cannot decode go to
libzstd, and stored content checksums, which nvCOMP ignores, are verified on the GPU.

Importing this module imports neither nvCOMP nor kvikio and touches no device.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from zarr.abc.codec import BytesBytesCodec
from zarr.codecs import Crc32cCodec
from zarr.registry import fully_qualified_name, register_codec

from linumpy.errors import SettingsError
from linumpy.gpu._coalesce import CallMerger
from linumpy.gpu.availability import gpu_unavailable_reason
from linumpy.gpu.codec_batches import (
    PreparedChunk,
    arrived_on_host,
    chunk_key,
    current_device,
    decode_items,
    encode_items,
    prepare_items,
)
from linumpy.io.engine.crc import crc32c

if TYPE_CHECKING:
    from typing import Self

    from zarr.abc.buffer import Buffer
    from zarr.types import JSON

    from linumpy._compat import ArraySpec

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CONCURRENCY",
    "DeviceCrc32cCodec",
    "NvcompZstdCodec",
    "gpu_unavailable_reason",
    "gpu_zstd_config",
    "register_nvcomp_zstd",
]

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 1024
"""Chunks per codec call under :func:`gpu_zstd_config` (zarr's own default is 1)."""

DEFAULT_CONCURRENCY = 32
"""zarr's ``async.concurrency`` under :func:`gpu_zstd_config` (zarr's own default is 10)."""


def parse_zstd_level(data: object) -> int:
    """A zstd compression level: an int of at most 22 (negative levels are zstd's fast modes)."""
    if isinstance(data, bool) or not isinstance(data, int):
        raise TypeError(f"zstd level must be an int, got {type(data).__name__}")
    if data > 22:
        raise ValueError(f"zstd level must be at most 22, got {data}")
    return data


def parse_checksum(data: object) -> bool:
    """Whether zstd frames carry their content checksum: a bool."""
    if not isinstance(data, bool):
        raise TypeError(f"zstd checksum must be a bool, got {type(data).__name__}")
    return data


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
        name, configuration = data.get("name"), data.get("configuration", {})
        if name != "zstd" or not isinstance(configuration, dict):
            raise ValueError(f"expected the zstd codec's JSON, got {data!r}")
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
            named = _named(items, present)
            # Host bytes (gpu_zarr_context) are checked and staged as their call arrives, so a
            # late merged call starts nvCOMP at once; device bytes (enable_gpu()) are gathered
            # in the merged call, one download for all (docs/gpu_guide.md).
            batch = await prepare_items(named) if arrived_on_host(named) else named
            decoded = await _DECODES(batch, key=current_device())
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
                _named(items, present), key=current_device()
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


class DeviceCrc32cCodec(Crc32cCodec):
    """zarr's ``crc32c`` codec, whose buffers are made from bytes under GPU buffer prototypes.

    The index of a shard ends with a crc32c; under ``zarr.config.enable_gpu()`` zarr's own codec
    hands the checked index back with ``from_array_like`` of a host array, which zarr's GPU
    buffer copies with a "falling back to slow copy based path" warning on every shard read (and
    write). This one checks and appends the same checksum and builds its buffers with
    ``from_bytes``: the same few bytes reach the device, without the warning.
    :func:`gpu_zstd_config` routes ``crc32c`` through it.

    Examples
    --------
    >>> DeviceCrc32cCodec().to_dict()
    {'name': 'crc32c'}
    """

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        data = chunk_bytes.as_numpy_array()
        inner, stored = data[:-4].tobytes(), data[-4:].tobytes()
        computed = crc32c(inner).to_bytes(4, "little")
        if computed != stored:
            raise ValueError(
                f"Stored and computed checksum do not match. Stored: {stored!r}. "
                f"Computed: {computed!r}."
            )
        return chunk_spec.prototype.buffer.from_bytes(inner)

    def _encode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer | None:
        data = chunk_bytes.as_numpy_array().tobytes()
        checksum = crc32c(data).to_bytes(4, "little")
        return chunk_spec.prototype.buffer.from_bytes(data + checksum)


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
    register_codec("crc32c", DeviceCrc32cCodec)
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
        Chunks handed to one codec call (one nvCOMP batch). Default:
        :data:`DEFAULT_BATCH_SIZE`.
    concurrency
        zarr's ``async.concurrency``: how many shards (or batches) zarr reads and decodes at once.
        The inner chunks of shards decoded at once share nvCOMP calls, so sharded arrays read
        faster with more than zarr's default of 10 (docs/gpu_guide.md, "Measurements behind the
        GPU defaults", row "zarr's concurrency"); each shard in flight holds its decoded bytes in
        device memory. Default: :data:`DEFAULT_CONCURRENCY`.

    Returns
    -------
    dict
        ``{"codecs.zstd": ..., "codecs.crc32c": ..., "codec_pipeline.batch_size": ...,
        "async.concurrency": ...}``.

    Raises
    ------
    SettingsError
        When the batch size or the concurrency is not a positive integer (a ``ValueError``).

    Examples
    --------
    >>> import zarr
    >>> gpu_zstd_config(batch_size=256, concurrency=16)  # doctest: +NORMALIZE_WHITESPACE
    {'codecs.zstd': 'linumpy.gpu.nvcomp_zstd.NvcompZstdCodec',
     'codecs.crc32c': 'linumpy.gpu.nvcomp_zstd.DeviceCrc32cCodec',
     'codec_pipeline.batch_size': 256, 'async.concurrency': 16}
    >>> with zarr.config.set(gpu_zstd_config(batch_size=256)):
    ...     zarr.config.get("codec_pipeline.batch_size")
    256
    """
    chosen = {"batch_size": batch_size, "concurrency": concurrency}
    for name, value in chosen.items():
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise SettingsError(f"{name} must be a positive integer, got {value!r}")
    return {
        "codecs.zstd": fully_qualified_name(NvcompZstdCodec),
        "codecs.crc32c": fully_qualified_name(DeviceCrc32cCodec),
        "codec_pipeline.batch_size": batch_size or DEFAULT_BATCH_SIZE,
        "async.concurrency": concurrency or DEFAULT_CONCURRENCY,
    }


def _named(
    items: Sequence[tuple[Buffer | None, ArraySpec]], present: Sequence[int]
) -> list[tuple[Buffer, ArraySpec, str]]:
    """The present chunks of a batch with their specs and the names errors give them."""
    return [
        (cast("Buffer", items[i][0]), items[i][1], chunk_key(i, len(items), items[i][1]))
        for i in present
    ]


# Two merged decodes at once: shards that zarr hands over while a call runs start their own call
# instead of waiting for it (docs/gpu_guide.md, "Measurements behind the GPU defaults": merged
# codec calls).
_DECODES: CallMerger[PreparedChunk | tuple[Buffer, ArraySpec, str], Buffer] = CallMerger(
    decode_items, max_in_flight=2
)


@functools.cache
def _encoder(level: int, checksum: bool) -> CallMerger[tuple[Buffer, ArraySpec, str], Buffer]:
    return CallMerger(functools.partial(encode_items, level=level, checksum=checksum))
