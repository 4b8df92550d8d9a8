"""The codec chains the engine reads and writes, recognised in one place for both planners.

A chunk is stored through ``bytes`` (its byte order), one compressor, and optionally zarr's
``crc32c`` codec (:mod:`linumpy.io.engine.crc`), or, in zarr v2, through a compressor alone.
:func:`parse_codecs` and :func:`parse_v2` turn zarr's metadata into a :class:`CodecChain`, or
raise :class:`~linumpy.errors.UnsupportedLayoutError` so that callers fall back to zarr itself.

The compressors are packages of one shape (:mod:`~linumpy.io.engine.codecs.zstd` is the one
today: recognition, frame checks, CPU decode and encode, the GPU's hooks), registered in
:data:`COMPRESSORS`; a read plan carries its chain's compressor, which the run loop and the CPU
back end call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

from zarr.codecs import BytesCodec, Crc32cCodec

from linumpy.errors import UnsupportedLayoutError
from linumpy.io.engine.codecs import zstd

__all__: list[str] = []

#: The compressors the engine reads and writes: one package each, asked in turn.
COMPRESSORS: tuple[ModuleType, ...] = (zstd,)


@dataclass(frozen=True, slots=True)
class CodecChain:
    """A recognised codec chain.

    Attributes
    ----------
    codecs
        The chain as zarr holds it (empty for zarr v2).
    compressor
        The compressor's package (:mod:`~linumpy.io.engine.codecs.zstd`).
    endian
        The ``bytes`` codec's byte order (None for single-byte types and zarr v2).
    crc32c
        Whether each chunk ends with the crc32c of its compressed bytes.
    level, checksum
        The compressor's level and whether its frames carry content checksums.

    Examples
    --------
    >>> from zarr.codecs import ZstdCodec
    >>> chain = parse_codecs([BytesCodec(), ZstdCodec(level=3), Crc32cCodec()])
    >>> chain.compressor.NAME, chain.endian, chain.crc32c, chain.level
    ('zstd', 'little', True, 3)
    """

    codecs: tuple[Any, ...]
    compressor: ModuleType
    endian: Literal["little", "big"] | None
    crc32c: bool
    level: int
    checksum: bool


def _names() -> str:
    return "|".join(c.NAME for c in COMPRESSORS)


def _recognise(codec: Any) -> tuple[ModuleType, int, bool] | None:
    for compressor in COMPRESSORS:
        config = compressor.config_of(codec)
        if config is not None:
            return compressor, *config
    return None


def parse_codecs(codecs: Sequence[Any]) -> CodecChain:
    """Recognise a zarr v3 chunk codec chain (a shard's inner chain for sharded arrays).

    Raises
    ------
    UnsupportedLayoutError
        When the chain is not ``bytes``, a registered compressor, optionally ``crc32c``.

    Examples
    --------
    >>> from zarr.codecs import BloscCodec
    >>> parse_codecs([BytesCodec(), BloscCodec()])
    Traceback (most recent call last):
    ...
    linumpy.errors.UnsupportedLayoutError: codec chain (...) is not bytes+zstd(+crc32c)
    """
    codecs = tuple(codecs)
    crc32c = len(codecs) == 3 and isinstance(codecs[2], Crc32cCodec)
    found = (
        _recognise(codecs[1])
        if len(codecs) == 2 + crc32c and isinstance(codecs[0], BytesCodec)
        else None
    )
    if found is None:
        raise UnsupportedLayoutError(f"codec chain {codecs} is not bytes+{_names()}(+crc32c)")
    return CodecChain(codecs, found[0], codecs[0].endian, crc32c, *found[1:])


def parse_v2(compressor: Any, filters: Any) -> CodecChain:
    """Recognise a zarr v2 array's compressor (no filters).

    Raises
    ------
    UnsupportedLayoutError
        When there are filters or the compressor is not a registered one.

    Examples
    --------
    >>> from numcodecs import Zstd
    >>> parse_v2(Zstd(level=2), None).level
    2
    """
    found = None if filters else _recognise(compressor)
    if found is None:
        raise UnsupportedLayoutError(
            f"zarr v2 filters {filters} / compressor {compressor} are not a plain {_names()} "
            "compressor"
        )
    return CodecChain((), found[0], None, False, *found[1:])
