"""Builders of zarr arrays in every layout the batched readers plan, shared by CPU and GPU tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import zarr

LAYOUTS = ("v3", "v3-sharded", "v2")
DTYPES = ("uint8", "uint16", "float32", "complex64")
SHAPE = (21, 34, 47)  # partial edge chunks on every axis
CHUNKS = (8, 16, 16)
REGIONS = [
    None,
    (slice(2, 19), slice(7, 33), slice(1, 46)),
    (slice(16, 21), slice(32, 34), slice(32, 47)),  # only edge chunks
    (slice(9, 10), slice(0, 34), slice(5, 6)),
    (slice(0, 21), slice(3, 3)),  # empty
]


def sample_data(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    """OCT-like test data: speckle-ish values with a background half, never all zeros."""
    rng = np.random.default_rng(seed)
    values = rng.gamma(2.0, 40.0, size=shape)
    values[..., : shape[-1] // 3] = 0  # background, compresses well
    if np.dtype(dtype).kind == "c":
        return (values + 1j * rng.normal(size=shape)).astype(dtype)
    return values.astype(dtype)


def make_array(
    path: Path,
    layout: str,
    data: np.ndarray,
    *,
    chunks: tuple[int, ...],
    shards: tuple[int, ...] | None = None,
    fill_value: object = 0,
    level: int = 3,
    checksum: bool = False,
    order: str = "C",
    crc32c: bool = False,
) -> zarr.Array:
    """Write ``data`` as a zstd zarr array; chunks equal to the fill value are not stored.

    ``crc32c``: zarr v3 only, the codec chain ends with ``crc32c`` (linumpy's default chain).
    """
    kwargs: dict[str, object] = {"chunks": chunks, "fill_value": fill_value}
    if layout == "v2":
        kwargs.update(
            zarr_format=2,
            compressors=numcodecs.Zstd(level=level, checksum=checksum),
            order=order,
        )
    else:
        zstd = zarr.codecs.ZstdCodec(level=level, checksum=checksum)
        kwargs["compressors"] = [zstd, zarr.codecs.Crc32cCodec()] if crc32c else zstd
        if layout == "v3-sharded":
            kwargs["shards"] = shards or tuple(2 * c for c in chunks)
    array = zarr.create_array(str(path), shape=data.shape, dtype=data.dtype, **kwargs)
    array[...] = data
    return array


def zarr_read(path: Path, region: tuple[slice, ...] | None, native: bool = False) -> np.ndarray:
    """What zarr itself reads of ``path[region]``; ``native``: in native byte order (as cupy)."""
    data = zarr.open_array(path, mode="r")[region if region is not None else ...]
    return data.astype(data.dtype.newbyteorder("=")) if native else data


def zstd_frame(data: np.ndarray, checksum: bool = False) -> bytes:
    """One zstd frame of ``data`` as zarr writes it (level 3, content size declared)."""
    return bytes(numcodecs.Zstd(level=3, checksum=checksum).encode(data))


def skippable_frame(content: bytes) -> bytes:
    """A zstd skippable frame holding ``content`` (valid in a chunk; nvCOMP does not take it)."""
    return (0x184D2A5E).to_bytes(4, "little") + len(content).to_bytes(4, "little") + content


def without_content_size(frame: bytes) -> bytes:
    """The same frame with its content size field replaced by a 16 MiB window descriptor."""
    descriptor = frame[4]
    fcs_size = {0: 1 if descriptor & 0x20 else 0, 1: 2, 2: 4, 3: 8}[descriptor >> 6]
    header_end = 5 + (0 if descriptor & 0x20 else 1) + fcs_size
    new_descriptor = descriptor & 0x04  # keep the checksum flag only
    return frame[:4] + bytes([new_descriptor, 14 << 3]) + frame[header_end:]


def read_plan(plan: Any, *, out: np.ndarray | None = None, threads: int = 1) -> tuple[Any, Any]:
    """The CPU back end run on ``plan`` alone, without the read orchestrator: the output and the
    back end's stats."""
    from linumpy.io.engine.cpu import CpuBackend

    backend = CpuBackend(plan, threads=threads, out=out, reader="pread")
    try:
        stats = backend.execute()
    finally:
        backend.close()
    return backend.out, stats
