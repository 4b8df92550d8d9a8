"""The codec seam: chains recognised once for reads and writes, and a second compressor that is
one package of the zstd seam's shape plus its registration."""

from __future__ import annotations

import gzip
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ZstdCodec
from zarr_layouts import sample_data

from linumpy.errors import ChunkDecodeError, UnsupportedLayoutError
from linumpy.io import read_volume
from linumpy.io.engine import codecs
from linumpy.io.engine.codecs import parse_codecs, parse_v2, zstd
from linumpy.io.engine.codecs.protocol import FRAME_NEEDS_CHECK, decode_fast
from linumpy.io.engine.cpu import CpuBackend
from linumpy.io.engine.plan import plan_read
from linumpy.io.engine.read import last_read_report
from linumpy.io.engine.run import run
from linumpy.io.engine.write_plan import write_layout


def test_chains_are_recognised_for_reads_and_writes(tmp_path: Path) -> None:
    chain = parse_codecs([BytesCodec(endian="big"), ZstdCodec(level=7, checksum=True)])
    assert (chain.compressor, chain.endian, chain.crc32c, chain.level, chain.checksum) == (
        zstd,
        "big",
        False,
        7,
        True,
    )
    assert parse_codecs([BytesCodec(), ZstdCodec(), Crc32cCodec()]).crc32c
    for bad in ([BytesCodec(), BloscCodec()], [ZstdCodec()], [BytesCodec(), ZstdCodec()] * 2):
        with pytest.raises(UnsupportedLayoutError, match=r"not bytes\+zstd\|zlib\|gzip\(\+crc32c"):
            parse_codecs(bad)
    with pytest.raises(UnsupportedLayoutError, match="plain zstd|zlib|gzip"):
        parse_v2(None, None)
    # The write planner takes the read planner's verdict, and refuses what it cannot write.
    array = zarr.create_array(
        tmp_path / "big.zarr",
        shape=(8,),
        chunks=(4,),
        dtype=">u2",
        serializer=BytesCodec(endian="big"),
        compressors=ZstdCodec(level=2),
    )
    with pytest.raises(UnsupportedLayoutError, match="big endian"):
        write_layout(array)
    plain = zarr.create_array(
        tmp_path / "a.zarr", shape=(8,), chunks=(4,), dtype="u2", compressors=ZstdCodec(level=2)
    )
    assert write_layout(plain).level == 2 and plan_read(plain).codec is zstd


def _gzip_seam() -> Any:
    """A second compressor of the zstd seam's shape: gzip, decoded by the standard library."""

    def config_of(codec: Any) -> tuple[int, bool] | None:
        return (int(codec.level), False) if isinstance(codec, GzipCodec) else None

    def check_frames(buffer: Any, offsets: Any, sizes: Any, expected: int) -> np.ndarray:
        return np.full(len(offsets), FRAME_NEEDS_CHECK, dtype=np.int8)

    def inspect_chunk(data: Any, *, key: str, expected_size: int | None = None) -> Any:
        return SimpleNamespace(verdict=FRAME_NEEDS_CHECK, checksum=None)

    def decode(
        data: Any,
        *,
        key: str,
        out: np.ndarray | None = None,
        expected_size: int | None = None,
        checked: bool = False,
    ) -> np.ndarray:
        try:
            raw = np.frombuffer(gzip.decompress(bytes(data)), dtype=np.uint8)
        except (OSError, EOFError) as exc:
            raise ChunkDecodeError(key, f"gzip decode failed: {exc}") from None
        size = out.nbytes if out is not None else expected_size
        if size is not None and raw.nbytes != size:
            raise ChunkDecodeError(key, f"decoded to {raw.nbytes} bytes, the chunk holds {size}")
        if out is None:
            return raw
        out[...] = raw
        return out

    return SimpleNamespace(
        NAME="gzip",
        NVCOMP=None,
        FAST_DECODE=False,
        decode_into=None,
        config_of=config_of,
        check_frames=check_frames,
        inspect_chunk=inspect_chunk,
        decode=decode,
    )


@pytest.mark.parametrize("shards", [None, (16, 32)])
def test_a_registered_compressor_is_read_by_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shards: tuple[int, ...] | None
) -> None:
    data = sample_data((21, 34), "uint16")
    data[:8] = 0  # chunks not stored
    zarr.create_array(
        tmp_path / "g.zarr",
        shape=data.shape,
        chunks=(8, 16),
        shards=shards,
        dtype=data.dtype,
        compressors=GzipCodec(level=5),
    )[...] = data
    region = (slice(3, 19), slice(5, 30))
    assert np.array_equal(read_volume(tmp_path / "g.zarr", region=region), data[region])
    with monkeypatch.context() as unregistered:
        unregistered.setattr(codecs, "COMPRESSORS", (zstd,))
        assert np.array_equal(read_volume(tmp_path / "g.zarr", region=region), data[region])
        assert last_read_report("cpu").path == "zarr"  # type: ignore[union-attr]
    seam = _gzip_seam()
    monkeypatch.setattr(codecs, "COMPRESSORS", (zstd, seam))
    for threads in (1, 3):
        result = read_volume(tmp_path / "g.zarr", region=region, settings={"io_threads": threads})
        assert result.tobytes() == data[region].tobytes()
        report = last_read_report("cpu")
        assert report is not None and report.path == "fast" and report.n_fill > 0
    plan = plan_read(zarr.open_array(tmp_path / "g.zarr", mode="r"), region)
    assert plan.codec is seam
    backend = CpuBackend(plan, threads=2)  # the run loop's validate stage asks the codec too
    stats = run(plan, backend, reader="pread", threads=2)
    assert backend.out.tobytes() == data[region].tobytes() and stats.n_cpu_decoded == stats.n_reads
    from linumpy.gpu.gpu_read import fast_path_obstacle  # imports no GPU library

    assert "does not decode gzip" in fast_path_obstacle(plan)  # the GPU reads it through zarr


def test_decode_fast_refuses_empty_input_and_zstd_spans_whole_frames() -> None:
    out = np.zeros(3, np.uint8)
    assert not decode_fast(zstd.decode_into, b"", out)
    if zstd.FAST_DECODE:
        assert decode_fast(zstd.decode_into, numcodecs.Zstd().encode(b"abc"), out)
        assert out.tobytes() == b"abc"
    start, span = zstd.nvcomp_span(np.array([0, 64]), np.array([60, 30]))
    assert start.tolist() == [0, 64] and span.tolist() == [60, 30]
