"""The codec chains the engine reads and writes, recognised in one place for both planners.

A compressor is a package implementing :class:`~linumpy.io.engine.codecs.protocol.Compressor`,
registered in :data:`COMPRESSORS`; the run loop, the back ends and the GPU modules ask the plan's
compressor and never name one. Unknown chains raise
:class:`~linumpy.errors.UnsupportedLayoutError` so that callers fall back to zarr.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from zarr.codecs import BytesCodec, Crc32cCodec

from linumpy.errors import UnsupportedLayoutError
from linumpy.io.engine.codecs import zstd
from linumpy.io.engine.codecs.deflate import GZIP, ZLIB
from linumpy.io.engine.codecs.protocol import Compressor

__all__: list[str] = []

#: The compressors the engine reads and writes, asked in turn.
COMPRESSORS: tuple[Compressor, ...] = (zstd, ZLIB, GZIP)  # type: ignore[assignment]
#: The compressor the engine's writers use by default, and a plan's when none is given.
DEFAULT: Compressor = zstd  # type: ignore[assignment]


def lookup(name: str) -> Compressor:
    """The registered compressor called ``name``."""
    for compressor in COMPRESSORS:
        if name == compressor.NAME:
            return compressor
    raise UnsupportedLayoutError(f"no compressor {name!r}: the engine reads {_names()}")


@dataclass(frozen=True, slots=True)
class CodecChain:
    """A recognised codec chain."""

    codecs: tuple[Any, ...]
    compressor: Compressor
    endian: Literal["little", "big"] | None
    crc32c: bool
    level: int
    checksum: bool


def _names() -> str:
    return "|".join(c.NAME for c in COMPRESSORS)


def _recognise(codec: Any) -> tuple[Compressor, int, bool] | None:
    for compressor in COMPRESSORS:
        config = compressor.config_of(codec)
        if config is not None:
            return compressor, *config
    return None


def parse_codecs(codecs: Sequence[Any]) -> CodecChain:
    """Recognise a zarr v3 chunk codec chain (a shard's inner chain for sharded arrays)."""
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
    """Recognise a zarr v2 array's compressor (no filters)."""
    found = None if filters else _recognise(compressor)
    if found is None:
        raise UnsupportedLayoutError(
            f"zarr v2 filters {filters} / compressor {compressor} are not a plain {_names()} "
            "compressor"
        )
    return CodecChain((), found[0], None, False, *found[1:])
