"""zlib and gzip, the compressors of most public OME-Zarr data, through the engine: zarr v2
``zlib`` and ``gzip``, zarr v3 ``gzip`` (plain, sharded, with crc32c), planned, checked and
decoded on the CPU (libdeflate where installed, Python's zlib otherwise) equal to zarr's reads;
their GPU reads (nvCOMP's DEFLATE decoder) in ``gpu`` tests."""

from __future__ import annotations

import gzip
import io
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from numcodecs import GZip, Zlib
from zarr.codecs import BytesCodec, Crc32cCodec, GzipCodec
from zarr_layouts import sample_data

from linumpy.errors import ChunkDecodeError
from linumpy.io import read_volume
from linumpy.io.engine.codecs import lookup, parse_v2
from linumpy.io.engine.codecs.deflate import GZIP, ZLIB, Deflate
from linumpy.io.engine.codecs.protocol import FRAME_GPU, FRAME_NEEDS_CHECK
from linumpy.io.engine.cpu import CpuBackend
from linumpy.io.engine.plan import plan_read
from linumpy.io.engine.read import last_read_report
from linumpy.io.engine.run import run
from linumpy.io.engine.write import write_array
from linumpy.io.engine.write_plan import write_layout

LAYOUTS = ("v2-zlib", "v2-gzip", "v3-gzip", "v3-gzip-sharded", "v3-gzip-crc32c")


def make_deflate_array(path: Path, layout: str, data: np.ndarray, chunks: tuple[int, ...]) -> Any:
    """A zarr array of ``layout`` holding ``data``, written by zarr."""
    kwargs: dict[str, Any] = {"shape": data.shape, "chunks": chunks, "dtype": data.dtype}
    if layout == "v2-zlib":
        kwargs |= {"zarr_format": 2, "compressors": Zlib(level=4)}
    elif layout == "v2-gzip":
        kwargs |= {"zarr_format": 2, "compressors": GZip(level=4)}
    elif layout == "v3-gzip":
        kwargs |= {"compressors": GzipCodec(level=4)}
    elif layout == "v3-gzip-sharded":
        kwargs |= {"compressors": GzipCodec(level=4), "shards": tuple(2 * c for c in chunks)}
    else:
        kwargs |= {
            "serializer": BytesCodec(),
            "compressors": (GzipCodec(level=4), Crc32cCodec()),
        }
    array = zarr.create_array(path, **kwargs)
    array[...] = data
    return array


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fast", [True, False])
def test_deflate_arrays_read_by_the_engine_as_zarr_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str, fast: bool
) -> None:
    if fast and not ZLIB.FAST_DECODE:
        pytest.skip("libdeflate is not installed: Python's zlib decodes")
    monkeypatch.setattr(Deflate, "FAST_DECODE", fast)
    data = sample_data((19, 40, 33), "uint16")
    data[:6] = 0  # background chunks
    path = tmp_path / "a.zarr"
    make_deflate_array(path, layout, data, (8, 16, 16))
    reference = zarr.open_array(path, mode="r")
    for region in (None, (slice(3, 17), slice(5, 39), slice(0, 31))):
        for threads in (1, 3):
            got = read_volume(path, region=region, settings={"io_threads": threads})
            expected = reference[...] if region is None else reference[region]
            assert got.dtype == expected.dtype and np.array_equal(got, expected)
            report = last_read_report("cpu")
            assert report is not None and report.path == "fast", report
            assert report.n_reads > 0


def test_the_run_loop_checks_and_decodes_deflate_groups(tmp_path: Path) -> None:
    """The kvikio-style run loop: the validate stage asks the plan's compressor for verdicts."""
    data = sample_data((24, 30), "int32")
    for layout in ("v2-zlib", "v3-gzip", "v3-gzip-crc32c"):
        array = make_deflate_array(tmp_path / f"{layout}.zarr", layout, data, (8, 8))
        plan = plan_read(array)
        assert plan.codec is (ZLIB if layout == "v2-zlib" else GZIP)
        backend = CpuBackend(plan, threads=2)
        stats = run(plan, backend, reader="pread", threads=2)
        assert np.array_equal(backend.out, data) and stats.n_reads > 0
        assert stats.n_reads + stats.n_fill == plan.n_entries


def test_recognition_from_zarr_metadata() -> None:
    assert parse_v2(Zlib(level=3), None).compressor is ZLIB
    assert parse_v2(GZip(level=3), None).compressor is GZIP
    assert parse_v2(Zlib(level=3), None).level == 3
    assert lookup("gzip") is GZIP and lookup("zlib").NVCOMP == "deflate"
    assert ZLIB.config_of(GZip()) is None and GZIP.config_of(Zlib()) is None


def _gzip_with_name(content: bytes) -> bytes:
    """A gzip member whose header carries a file name (valid; not the plain header)."""
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="chunk", mode="wb", fileobj=buffer, mtime=0) as stream:
        stream.write(content)
    return buffer.getvalue()


def test_verdicts_and_what_is_wrong() -> None:
    content = sample_data((512,), "uint16").tobytes()
    size = len(content)
    plain_zlib, plain_gzip = zlib.compress(content), gzip.compress(content, mtime=0)
    named = _gzip_with_name(content)
    frames = [plain_gzip, named, gzip.compress(content + b"x", mtime=0), plain_gzip[:-3]]
    buffer = np.frombuffer(b"".join(frames), np.uint8)
    sizes = np.array([len(f) for f in frames])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    verdicts = GZIP.check_frames(buffer, offsets, sizes, size).tolist()
    assert verdicts == [FRAME_GPU, FRAME_NEEDS_CHECK, FRAME_NEEDS_CHECK, FRAME_NEEDS_CHECK]
    # A named member is valid: the CPU decodes it.
    assert GZIP.inspect_chunk(named, key="c/1", expected_size=size).verdict == FRAME_NEEDS_CHECK
    assert GZIP.decode(named, key="c/1", expected_size=size).tobytes() == content
    one = np.frombuffer(plain_zlib, np.uint8)
    assert ZLIB.check_frames(one, np.array([0]), np.array([one.size]), size).tolist() == [0]
    start, span = ZLIB.nvcomp_span(np.array([0]), np.array([one.size]))
    assert zlib.decompress(one[int(start[0]) : int(start[0] + span[0])].tobytes(), -15) == content
    start, span = GZIP.nvcomp_span(np.array([0]), np.array([len(plain_gzip)]))
    raw = plain_gzip[int(start[0]) : int(start[0] + span[0])]
    assert zlib.decompress(raw, -15) == content
    for fast in (True, False):
        if fast and not ZLIB.FAST_DECODE:
            continue
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Deflate, "FAST_DECODE", fast)
            damaged = bytearray(plain_zlib)
            damaged[len(damaged) // 2] ^= 0xFF
            cases = [
                (ZLIB, plain_zlib[:-2], "zlib decode failed"),
                (ZLIB, bytes(damaged), "zlib decode failed"),
                (ZLIB, plain_zlib + b"\0\0", "follow the stream"),
                (GZIP, plain_zlib, "not a gzip member"),
                (ZLIB, plain_gzip, "not a zlib stream"),
                (ZLIB, plain_zlib[:5], "too few"),
            ]
            for compressor, data, reason in cases:
                with pytest.raises(ChunkDecodeError, match=reason) as caught:
                    compressor.decode(data, key="c/0/1", expected_size=size)
                assert "c/0/1" in str(caught.value)
            with pytest.raises(ChunkDecodeError, match="holds"):
                ZLIB.decode(plain_zlib, key="c/0", expected_size=size + 2)


def test_a_corrupt_stored_chunk_names_its_file(tmp_path: Path) -> None:
    data = sample_data((16, 16), "uint16")
    path = tmp_path / "a.zarr"
    make_deflate_array(path, "v2-zlib", data, (8, 8))
    chunk = path / "1.0"
    stored = bytearray(chunk.read_bytes())
    stored[len(stored) // 2] ^= 0x55
    chunk.write_bytes(bytes(stored))
    with pytest.raises(ChunkDecodeError, match=f"1.0|{os.sep}1.0"):
        read_volume(path)


@pytest.mark.parametrize("layout", ["v3-gzip", "v3-gzip-sharded", "v3-gzip-crc32c"])
def test_the_write_engine_writes_gzip_that_zarr_reads(tmp_path: Path, layout: str) -> None:
    data = sample_data((16, 32, 32), "uint16")
    array = make_deflate_array(tmp_path / "a.zarr", layout, np.zeros_like(data), (8, 16, 16))
    assert write_layout(array).compressor is GZIP
    write_array(array, data)
    assert np.array_equal(zarr.open_array(tmp_path / "a.zarr", mode="r")[...], data)
    assert np.array_equal(read_volume(tmp_path / "a.zarr"), data)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_deflate_arrays_read_on_the_gpu_by_nvcomp(tmp_path: Path, layout: str) -> None:
    import cupy

    from linumpy.gpu.zarr_io import read_zarr_to_gpu

    data = sample_data((19, 40, 33), "uint16")
    path = tmp_path / "a.zarr"
    make_deflate_array(path, layout, data, (8, 16, 16))
    got = read_zarr_to_gpu(path)
    assert isinstance(got, cupy.ndarray)
    assert np.array_equal(cupy.asnumpy(got), zarr.open_array(path, mode="r")[...])
    report = last_read_report("gpu")
    assert report is not None and report.path == "fast", report
    # Plain headers of the chunk's size all go to nvCOMP.
    assert report.n_cpu_decoded == 0
