"""What an array's metadata says of how its chunks are stored, read once for the plan stage;
layouts outside it raise :class:`~linumpy.errors.UnsupportedLayoutError`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec
from zarr.storage import LocalStore

from linumpy.errors import UnsupportedLayoutError
from linumpy.io.engine.codecs import CodecChain, parse_codecs, parse_v2
from linumpy.io.engine.codecs.protocol import Compressor
from linumpy.io.formats import for_zarr_format
from linumpy.settings import Settings

__all__: list[str] = []


@dataclass(frozen=True, slots=True)
class ArrayLayout:
    """How an array's chunks are stored (see the module docstring)."""

    root: str
    grid_shape: tuple[int, ...]  # chunks, or shards when sharded
    chunk_shape: tuple[int, ...]  # decoded (inner) chunks
    stored_dtype: np.dtype
    order: Literal["C", "F"]
    shard_index_location: Literal["start", "end"] | None  # None: not sharded
    shard_index_crc32c: bool
    codec: Compressor
    chunk_crc32c: bool = False
    remote: Any = None  # the RangeClient of a remote store


def parse_chain(
    codecs: Sequence[Any], *, index_crc32c: bool = False
) -> tuple[ShardingCodec | None, CodecChain]:
    """The sharding codec of a zarr v3 array's ``codecs`` (None when unsharded) and the chain of
    codecs of its (inner) chunks (:func:`~linumpy.io.engine.codecs.parse_codecs`).
    """
    sharding = None
    if len(codecs) == 1 and isinstance(codecs[0], ShardingCodec):
        sharding = codecs[0]
        index = sharding.index_codecs
        after = ((Crc32cCodec(),),) if index_crc32c else ((), (Crc32cCodec(),))
        if not (
            isinstance(index[0], BytesCodec)
            and index[0].endian in (None, "little")
            and index[1:] in after
        ):
            raise UnsupportedLayoutError(f"shard index codecs {index} are not bytes+crc32c")
        codecs = sharding.codecs
    return sharding, parse_codecs(codecs)


def shard_index_location(sharding: ShardingCodec) -> Literal["start", "end"]:
    """Where a shard's index lies: ``"start"`` or ``"end"``."""
    location = getattr(sharding, "index_location", "end")
    return getattr(location, "value", location)


def parse_layout(array: zarr.Array, settings: Settings | None = None) -> ArrayLayout:
    store = array.store
    remote = None
    if isinstance(store, LocalStore):
        root = os.path.join(str(store.root), array.path)
    else:  # chunks named by URL, fetched by fetch_remote
        from linumpy.io.engine.fetch_remote import remote_root

        root, remote = remote_root(array, settings)
    metadata = array.metadata
    dtype = np.dtype(array.dtype)
    if not for_zarr_format(metadata.zarr_format).codec_pipeline:
        chain = parse_v2(metadata.compressor, metadata.filters)
        chunks = tuple(array.chunks)
        return ArrayLayout(
            root,
            chunks,
            chunks,
            dtype,
            metadata.order,
            None,
            False,
            chain.compressor,
            remote=remote,
        )
    sharding, chain = parse_chain(metadata.codecs)
    crc = chain.crc32c
    endian = chain.endian
    stored = dtype if endian is None else dtype.newbyteorder("<" if endian == "little" else ">")
    if sharding is None:
        chunks = tuple(array.chunks)
        return ArrayLayout(
            root, chunks, chunks, stored, "C", None, False, chain.compressor, crc, remote
        )
    return ArrayLayout(
        root,
        tuple(array.shards),
        tuple(sharding.chunk_shape),
        stored,
        "C",
        shard_index_location(sharding),
        len(sharding.index_codecs) == 2,
        chain.compressor,
        crc,
        remote,
    )
