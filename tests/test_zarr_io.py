"""linumpy.gpu.zarr_io: the fast GPU read against zarr's CPU read, and its CPU-side pieces."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr
from conftest import gpu_missing_reason
from numcodecs import Zstd
from zarr_layouts import DTYPES, LAYOUTS, make_array, sample_data

from linumpy.errors import ChunkDecodeError, GPUUnavailableError, LinumpyError
from linumpy.gpu import zarr_io
from linumpy.gpu._fetch import (
    FRAME_CHECKSUM,
    FRAME_GPU,
    FRAME_NEEDS_CHECK,
    align_up,
    check_frames,
    chunk_sizes,
    read_into,
)
from linumpy.gpu.zarr_io import (
    DeviceMemoryError,
    GpuReadSettings,
    gpu_read_route,
    gpu_zarr_context,
    last_read_report,
    plan_batches,
    read_zarr_to_gpu,
)
from linumpy.io import read_volume
from linumpy.io.plan import plan_read
from linumpy.io.zstd_frames import inspect_zstd_chunk

SHAPE = (21, 34, 47)  # partial edge chunks on every axis
CHUNKS = (8, 16, 16)
REGIONS = [
    None,
    (slice(2, 19), slice(7, 33), slice(1, 46)),
    (slice(16, 21), slice(32, 34), slice(32, 47)),  # only edge chunks
    (slice(9, 10), slice(0, 34), slice(5, 6)),
    (slice(0, 21), slice(3, 3)),  # empty
]
# Settings that force many batches, the scratch buffer and chunks too large for the staging
# buffer (read and decoded on the CPU).
TINY = {"pinned_bytes": 6000, "scratch_bytes": 9000, "io_threads": 3}

no_gpu = pytest.mark.skipif(
    gpu_missing_reason() is None, reason="checks the behaviour on machines without a GPU"
)


# --- CPU: settings ------------------------------------------------------------------------------


def test_settings_defaults_environment_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(zarr_io.PINNED_ENV, raising=False)
    monkeypatch.delenv(zarr_io.SCRATCH_ENV, raising=False)
    monkeypatch.delenv(zarr_io.FETCH_ENV, raising=False)
    monkeypatch.delenv(zarr_io.BATCH_ENV, raising=False)
    monkeypatch.setenv("LINUMPY_IO_THREADS", "5")
    settings = GpuReadSettings.from_env()
    assert settings == GpuReadSettings(5, 1024 * 2**20, 640 * 2**20, "auto")
    monkeypatch.setenv(zarr_io.PINNED_ENV, "64")
    monkeypatch.setenv(zarr_io.SCRATCH_ENV, "32")
    monkeypatch.setenv(zarr_io.FETCH_ENV, "pread")
    monkeypatch.setenv(zarr_io.BATCH_ENV, "100")
    settings = GpuReadSettings.from_env(io_threads=2)
    assert settings == GpuReadSettings(2, 64 * 2**20, 32 * 2**20, "pread", 100 * 2**20)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LINUMPY_GPU_PINNED_MIB", "0"),
        ("LINUMPY_GPU_SCRATCH_MIB", "lots"),
        ("LINUMPY_GPU_FETCH", "gds"),
        ("LINUMPY_GPU_BATCH_MIB", "-1"),
    ],
)
def test_settings_reject_bad_environment(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=variable):
        GpuReadSettings.from_env()


@pytest.mark.parametrize(
    "overrides",
    [
        {"io_threads": 0},
        {"pinned_bytes": -1},
        {"scratch_bytes": 1.5},
        {"fetch": "x"},
        {"batch_bytes": -5},
        {"gpu_chunk_bytes": 0},
    ],
)
def test_settings_reject_bad_values(overrides: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(overrides))):
        GpuReadSettings.from_env(**overrides)


# --- CPU: the batched frame check ---------------------------------------------------------------

DATA = sample_data((40, 64, 64), "uint16").ravel()  # several 128 KiB blocks per frame


def _frame(data: np.ndarray = DATA, checksum: bool = False) -> bytes:
    return bytes(Zstd(level=3, checksum=checksum).encode(data))


def _skippable(content: bytes) -> bytes:
    return (0x184D2A5E).to_bytes(4, "little") + len(content).to_bytes(4, "little") + content


def _without_content_size(frame: bytes) -> bytes:
    """The same frame with its content size field replaced by a 16 MiB window descriptor."""
    descriptor = frame[4]
    fcs_size = {0: 1 if descriptor & 0x20 else 0, 1: 2, 2: 4, 3: 8}[descriptor >> 6]
    header_end = 5 + (0 if descriptor & 0x20 else 1) + fcs_size
    new_descriptor = descriptor & 0x04  # keep the checksum flag only
    return frame[:4] + bytes([new_descriptor, 14 << 3]) + frame[header_end:]


def _cases() -> list[bytes]:
    good = _frame()
    with_checksum = _frame(checksum=True)
    half = len(DATA) // 2
    cases = [
        good,
        with_checksum,
        _frame(DATA[:half]) + _frame(DATA[half:]),  # two frames
        _skippable(b"meta") + good,
        good + _skippable(b""),
        _without_content_size(good),
        _frame(DATA[:-1]),  # declares another size
        b"",
        b"\x28\xb5\x2f\xfd",
        good[:-1],
        good[:9],
        good + b"\x00",
        b"\x00" * 64,
        bytes([*good[:4], good[4] | 0x08, *good[5:]]),  # reserved bit
        bytes([*good[:4], good[4] | 0x01, 0, *good[5:]]),  # dictionary id field (zero)
    ]
    rng = np.random.default_rng(1)
    for _ in range(60):  # bit flips in headers and data, and truncations
        damaged = bytearray(good if rng.random() < 0.5 else with_checksum)
        if rng.random() < 0.5:
            position = int(rng.integers(0, min(len(damaged), 400)))
            damaged[position] ^= 1 << int(rng.integers(0, 8))
        else:
            damaged = damaged[: int(rng.integers(1, len(damaged)))]
        cases.append(bytes(damaged))
    return cases


def test_check_frames_accepts_only_what_inspect_zstd_chunk_sends_to_nvcomp() -> None:
    cases = _cases()
    offsets = np.cumsum([0] + [align_up(len(c)) for c in cases[:-1]])
    buffer = np.zeros(int(offsets[-1]) + align_up(len(cases[-1])) + 16, dtype=np.uint8)
    for offset, case in zip(offsets, cases, strict=True):
        buffer[offset : offset + len(case)] = np.frombuffer(case, dtype=np.uint8)
    sizes = np.array([len(c) for c in cases])
    verdicts = check_frames(buffer, offsets, sizes, DATA.nbytes)
    assert verdicts[0] == FRAME_GPU
    assert verdicts[1] == FRAME_CHECKSUM
    assert set(verdicts[2:15]) == {FRAME_NEEDS_CHECK}
    for case, verdict in zip(cases, verdicts, strict=True):
        try:
            info = inspect_zstd_chunk(case, key="c", expected_size=DATA.nbytes)
        except ChunkDecodeError:
            info = None
        if verdict != FRAME_NEEDS_CHECK:
            assert info is not None and info.gpu_decodable
            assert (info.checksum is not None) == (verdict == FRAME_CHECKSUM)


# --- CPU: batch planning ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("staging", "device", "batch_cap"),
    [
        (10**9, 10**9, 0),
        (10**9, 10**9, 1500),
        (3000, 4096, 0),
        (700, 1024, 0),
        (2500, 2600, 0),
        (9000, 5200, 2048),
    ],
)
def test_plan_batches_respects_limits_and_never_overwrites_pending_data(
    staging: int, device: int, batch_cap: int
) -> None:
    rng = np.random.default_rng(3)
    rows, row_nbytes, slot, misalign = 12, 1024, 512, 48
    chunk_rows = np.repeat(np.arange(0, rows, 2), 4)  # 6 slabs of 4 chunks, 2 rows each
    row_start, row_end = chunk_rows * row_nbytes, (chunk_rows + 2) * row_nbytes
    sizes = rng.integers(50, 900, len(row_end))
    sizes[rng.random(len(sizes)) < 0.2] = -1
    out_nbytes = rows * row_nbytes
    batches = plan_batches(
        row_start,
        row_end,
        sizes,
        slot_nbytes=slot,
        out_nbytes=out_nbytes,
        out_misalign=misalign,
        staging_capacity=staging,
        device_capacity=device,
        batch_capacity=batch_cap,
    )
    seen = np.concatenate([np.concatenate([b.reads, b.fills]) for b in batches])
    assert sorted(seen.tolist()) == list(range(len(sizes)))
    assert set(np.concatenate([b.fills for b in batches]).tolist()) == set(
        np.flatnonzero(sizes < 0).tolist()
    )
    modes = set()
    written = 0  # output bytes before this are final
    for batch in batches:
        assert len(batch.reads) * slot <= (max(batch_cap, slot) if batch_cap else out_nbytes)
        assert batch.staging_nbytes <= staging
        staged = batch.staging_offsets >= 0
        assert np.all(sizes[batch.reads[~staged]] > staging)
        ends = batch.staging_offsets[staged] + sizes[batch.reads[staged]]
        assert np.all(batch.staging_offsets[staged] % 16 == 0)
        assert np.all(ends <= batch.staging_nbytes)
        assert batch.device_nbytes <= max(device, slot + staging + 16)
        assert np.all((batch.slots + (misalign if batch.in_output else 0)) % 16 == 0)
        entries = np.concatenate([batch.reads, batch.fills])
        if not batch.in_output:
            modes.add("buffer")
            assert np.all(batch.slots >= batch.staging_nbytes)
            assert np.all(batch.slots + slot <= batch.device_nbytes)
        elif batch.segments[0].copy_offset < 0:
            modes.add("tail")  # decoded after every row the batch writes
            assert np.all(batch.slots >= max(written, row_end[entries].max()))
            assert np.all(batch.slots + slot <= out_nbytes)
        else:
            modes.add("own rows")  # decoded in each slab's own rows, copied out before scattering
            for segment in batch.segments:
                reads = batch.reads[segment.start : segment.stop]
                seg_rows = np.concatenate([reads, segment.fills])
                lo, hi = row_start[seg_rows].min(), row_end[seg_rows].max()
                slots = batch.slots[segment.start : segment.stop]
                assert segment.copy_offset == lo >= written
                assert lo + segment.copy_nbytes <= hi
                assert np.all((slots >= lo) & (slots + slot <= lo + segment.copy_nbytes))
                assert segment.copy_nbytes <= batch.device_nbytes
        written = max(written, row_end[entries].max())
    if (staging, device) == (2500, 2600):
        assert "own rows" in modes


# --- CPU: sizes and file reads ------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_read_into_gets_the_stored_bytes(tmp_path: Path, layout: str) -> None:
    data = sample_data(SHAPE, "uint16")
    data[:8] = 0  # chunks never written
    array = make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS)
    plan = plan_read(array)
    with ThreadPoolExecutor(3) as pool:
        sizes = chunk_sizes(plan.reads)
        present = [r for r, s in zip(plan.reads, sizes, strict=True) if s >= 0]
        if layout != "v3-sharded":
            assert len(present) < len(plan.reads)
        nbytes = sizes[sizes >= 0]
        offsets = np.concatenate([[0], np.cumsum([align_up(int(n)) for n in nbytes])[:-1]])
        staging = np.zeros(int(offsets[-1] + nbytes[-1]), dtype=np.uint8)
        read_into(staging, present, nbytes, offsets, reader="pread", pool=pool, threads=3)
    for read, offset, n in zip(present, offsets, nbytes, strict=True):
        with open(read.path, "rb") as f:
            f.seek(read.offset)
            assert staging[offset : offset + n].tobytes() == f.read(n)


def test_read_into_names_a_short_file(tmp_path: Path) -> None:
    array = make_array(tmp_path / "a.zarr", "v3", sample_data(SHAPE, "uint16"), chunks=CHUNKS)
    read = plan_read(array).reads[4]
    size = os.path.getsize(read.path)
    with open(read.path, "r+b") as f:
        f.truncate(size // 2)
    with (
        ThreadPoolExecutor(2) as pool,
        pytest.raises(ChunkDecodeError, match=f"{read.key}.*file ends after {size // 2}"),
    ):
        read_into(
            np.zeros(size, np.uint8),
            [read],
            np.array([size]),
            np.array([0]),
            reader="pread",
            pool=pool,
            threads=2,
        )


# --- CPU: behaviour without a GPU ---------------------------------------------------------------


@no_gpu
def test_without_gpu_routes_and_reads_say_what_is_missing(tmp_path: Path) -> None:
    make_array(tmp_path / "a.zarr", "v3", sample_data(SHAPE, "uint16"), chunks=CHUNKS)
    route = gpu_read_route(tmp_path / "a.zarr")
    assert route.path == "unavailable"
    assert route.reason.startswith(f"{gpu_missing_reason()}; with a GPU: the fast path")
    assert route.n_reads == 3 * 3 * 3
    with pytest.raises(GPUUnavailableError, match="read_zarr_to_gpu.*(cupy|nvcomp|CUDA)"):
        read_zarr_to_gpu(tmp_path / "a.zarr")
    with pytest.raises(GPUUnavailableError, match="(cupy|nvcomp|CUDA)"):
        read_volume(tmp_path / "a.zarr", gpu=True)
    with pytest.raises(GPUUnavailableError), gpu_zarr_context():
        pass


_CPU_ONLY_SCRIPT = """
import ctypes, sys
import numpy as np
from linumpy.gpu import zarr_io
from linumpy.io import read_volume
settings = zarr_io.GpuReadSettings.from_env()
data = read_volume(sys.argv[1])
assert isinstance(data, np.ndarray) and data.sum() > 0
for name in ("nvidia.nvcomp", "kvikio"):
    assert name not in sys.modules, f"{name} was imported"
try:
    libcuda = ctypes.CDLL("libcuda.so.1")
except OSError:
    print("no CUDA driver: no context possible")
else:
    context = ctypes.c_void_p()
    status = libcuda.cuCtxGetCurrent(ctypes.byref(context))
    # 3 = CUDA_ERROR_NOT_INITIALIZED: nothing in this process initialised CUDA.
    assert status == 3 or (status == 0 and not context.value), (status, context.value)
    print("no CUDA context")
"""


def test_cpu_work_imports_no_gpu_library_and_creates_no_cuda_context(tmp_path: Path) -> None:
    make_array(tmp_path / "a.zarr", "v3-sharded", sample_data(SHAPE, "uint16"), chunks=CHUNKS)
    result = subprocess.run(
        [sys.executable, "-c", _CPU_ONLY_SCRIPT, str(tmp_path / "a.zarr")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "no CUDA" in result.stdout


# --- GPU ----------------------------------------------------------------------------------------


def _expected(path: Path, region: tuple[slice, ...] | None) -> np.ndarray:
    data = zarr.open_array(path, mode="r")[region if region is not None else ...]
    return data.astype(data.dtype.newbyteorder("="))


def assert_same_on_gpu(actual: object, expected: np.ndarray) -> None:
    import cupy

    assert isinstance(actual, cupy.ndarray)
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert actual.get().tobytes() == expected.tobytes()


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fast_path_matches_zarr(tmp_path: Path, layout: str, dtype: str) -> None:
    data = sample_data(SHAPE, dtype)
    data[:8] = 0  # missing chunks
    make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS)
    for settings in (GpuReadSettings.from_env(), GpuReadSettings.from_env(**TINY)):
        for region in REGIONS:
            actual = read_zarr_to_gpu(tmp_path / "a.zarr", region=region, settings=settings)
            assert_same_on_gpu(actual, _expected(tmp_path / "a.zarr", region))
            report = last_read_report()
            assert report is not None and report.path == "fast"


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_fill_values_checksums_order_and_byte_order(tmp_path: Path, layout: str) -> None:
    data = sample_data(SHAPE, "complex64")
    data[:8] = 1 + 2j
    make_array(tmp_path / "c.zarr", layout, data, chunks=CHUNKS, fill_value=1 + 2j, checksum=True)
    assert_same_on_gpu(read_zarr_to_gpu(tmp_path / "c.zarr"), data)
    tiny = GpuReadSettings.from_env(**TINY)
    assert_same_on_gpu(read_zarr_to_gpu(tmp_path / "c.zarr", settings=tiny), data)
    if layout == "v2":
        big = sample_data(SHAPE, "float32").astype(">f4")
        make_array(tmp_path / "f.zarr", "v2", big, chunks=CHUNKS, order="F")
        for region in REGIONS:
            actual = read_zarr_to_gpu(tmp_path / "f.zarr", region=region, settings=tiny)
            assert_same_on_gpu(actual, _expected(tmp_path / "f.zarr", region))


@pytest.mark.gpu
def test_array_never_written_and_zero_dimensional(tmp_path: Path) -> None:
    zarr.create_array(
        tmp_path / "e.zarr", shape=(5, 6), chunks=(2, 4), dtype="int16", fill_value=-3
    )
    assert_same_on_gpu(read_zarr_to_gpu(tmp_path / "e.zarr"), np.full((5, 6), -3, np.int16))
    scalar = zarr.create_array(tmp_path / "s.zarr", shape=(), dtype="uint16", fill_value=0)
    scalar[()] = 41
    assert_same_on_gpu(read_zarr_to_gpu(tmp_path / "s.zarr"), np.array(41, np.uint16))


@pytest.mark.gpu
def test_unusual_valid_chunks_are_decoded_on_the_cpu(tmp_path: Path) -> None:
    data = sample_data(SHAPE, "uint16")
    array = make_array(tmp_path / "a.zarr", "v3", data, chunks=CHUNKS)
    reads = plan_read(array).reads
    rewrites = {
        0: lambda chunk: _skippable(b"note") + _frame(chunk),
        5: lambda chunk: _frame(chunk[:100]) + _frame(chunk[100:]),
        9: lambda chunk: _without_content_size(_frame(chunk)),
    }
    for i, rewrite in rewrites.items():
        chunk = np.frombuffer(numcodecs.Zstd().decode(Path(reads[i].path).read_bytes()), np.uint16)
        Path(reads[i].path).write_bytes(rewrite(chunk))
    assert_same_on_gpu(read_zarr_to_gpu(tmp_path / "a.zarr"), data)
    report = last_read_report()
    assert report is not None and report.n_cpu_decoded == len(rewrites)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["v3", "v3-sharded"])
def test_chunks_over_gpu_chunk_bytes_are_decoded_on_the_cpu(tmp_path: Path, layout: str) -> None:
    data = sample_data(SHAPE, "float32")
    make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS)
    chunk_nbytes = int(np.prod(CHUNKS)) * 4
    for limit, on_cpu in ((chunk_nbytes - 1, True), (chunk_nbytes, False)):
        settings = GpuReadSettings.from_env(gpu_chunk_bytes=limit)
        assert_same_on_gpu(read_zarr_to_gpu(tmp_path / "a.zarr", settings=settings), data)
        report = last_read_report()
        assert report is not None
        assert report.n_cpu_decoded == (report.n_reads - report.n_fill if on_cpu else 0)


@pytest.mark.gpu
@pytest.mark.parametrize("damage", ["truncate", "garbage", "checksum"])
def test_corrupt_chunk_names_it_and_the_next_read_works(tmp_path: Path, damage: str) -> None:
    data = sample_data(SHAPE, "uint16")
    array = make_array(tmp_path / "a.zarr", "v3", data, chunks=CHUNKS, checksum=True)
    read = plan_read(array).reads[7]
    stored = Path(read.path).read_bytes()
    if damage == "truncate":
        broken = stored[: len(stored) // 2]
    elif damage == "garbage":
        broken = bytes(np.random.default_rng(0).integers(0, 256, len(stored), dtype=np.uint8))
    else:
        broken = stored[:-1] + bytes([stored[-1] ^ 0x5A])
    Path(read.path).write_bytes(broken)
    with pytest.raises(ChunkDecodeError, match=read.key):
        read_zarr_to_gpu(tmp_path / "a.zarr")
    Path(read.path).write_bytes(stored)
    assert_same_on_gpu(read_zarr_to_gpu(tmp_path / "a.zarr"), data)


@pytest.mark.gpu
def test_out_is_filled_in_place_even_when_misaligned(tmp_path: Path) -> None:
    import cupy

    data = sample_data(SHAPE, "uint16")
    make_array(tmp_path / "a.zarr", "v3-sharded", data, chunks=CHUNKS)
    backing = cupy.zeros(data.size + 3, dtype=np.uint16)
    out = backing[3:].reshape(SHAPE)  # C-contiguous, 6 bytes past an aligned address
    result = read_zarr_to_gpu(
        tmp_path / "a.zarr", out=out, settings=GpuReadSettings.from_env(**TINY)
    )
    assert result is out
    assert_same_on_gpu(out, data)
    assert int(backing[:3].sum()) == 0
    with pytest.raises(LinumpyError, match="out must be"):
        read_zarr_to_gpu(tmp_path / "a.zarr", out=cupy.empty(SHAPE, np.float32))


@pytest.mark.gpu
def test_region_reads_only_its_chunks_and_memory_stays_bounded(tmp_path: Path) -> None:
    data = sample_data((64, 256, 256), "uint16")
    make_array(tmp_path / "a.zarr", "v3", data, chunks=(16, 64, 64))
    region = (slice(0, 32), slice(0, 128), slice(0, 128))  # 1/8 of the volume
    settings = GpuReadSettings.from_env(scratch_bytes=2**20, pinned_bytes=2**20)
    assert_same_on_gpu(
        read_zarr_to_gpu(tmp_path / "a.zarr", region=region, settings=settings), data[region]
    )
    report = last_read_report()
    assert report is not None
    assert report.n_reads == 2 * 2 * 2
    assert report.device_extra_bytes <= settings.scratch_bytes + 2**16  # + fill value, tables
    assert report.pinned_bytes <= settings.pinned_bytes


@pytest.mark.gpu
def test_output_larger_than_the_device_fails_before_allocating(tmp_path: Path) -> None:
    zarr.create_array(
        tmp_path / "huge.zarr", shape=(2**17, 2**17, 2**10), chunks=(64, 64, 64), dtype="uint16"
    )
    with pytest.raises(DeviceMemoryError, match=r"32\.0 TiB.*region="):
        read_zarr_to_gpu(tmp_path / "huge.zarr")


@pytest.mark.gpu
def test_unsupported_layout_falls_back_to_zarr_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = sample_data(SHAPE, "float32")
    array = zarr.create_array(
        tmp_path / "b.zarr",
        shape=SHAPE,
        chunks=CHUNKS,
        dtype="float32",
        compressors=zarr.codecs.BloscCodec(),
    )
    array[...] = data
    with caplog.at_level(logging.INFO, logger="linumpy.gpu.zarr_io"):
        actual = read_zarr_to_gpu(tmp_path / "b.zarr", region=REGIONS[1])
    assert_same_on_gpu(actual, data[REGIONS[1]])
    assert "not bytes+zstd" in caplog.text
    report = last_read_report()
    assert report is not None and report.path == "zarr"
    assert gpu_read_route(tmp_path / "b.zarr").path == "zarr"


@pytest.mark.gpu
def test_read_volume_gpu_takes_the_fast_path(tmp_path: Path) -> None:
    data = sample_data(SHAPE, "uint16")
    make_array(tmp_path / "a.zarr", "v2", data, chunks=CHUNKS)
    assert_same_on_gpu(
        read_volume(tmp_path / "a.zarr", gpu=True, region=REGIONS[1]), data[REGIONS[1]]
    )
    assert last_read_report().path == "fast"  # type: ignore[union-attr]
    route = gpu_read_route(tmp_path / "a.zarr")
    assert route.path == "fast" and route.reader in ("kvikio", "pread")


@pytest.mark.gpu
@pytest.mark.parametrize("fetch", ["pread", "kvikio"])
def test_both_file_readers(tmp_path: Path, fetch: str) -> None:
    from linumpy.gpu._fetch import kvikio_unusable_reason

    if fetch == "kvikio" and kvikio_unusable_reason() is not None:
        pytest.skip(kvikio_unusable_reason())
    data = sample_data(SHAPE, "uint16")
    make_array(tmp_path / "a.zarr", "v3-sharded", data, chunks=CHUNKS)
    settings = GpuReadSettings.from_env(fetch=fetch)
    assert_same_on_gpu(read_zarr_to_gpu(tmp_path / "a.zarr", settings=settings), data)
    assert last_read_report().reader == fetch  # type: ignore[union-attr]


@pytest.mark.gpu
def test_gpu_zarr_context_nests_restores_and_round_trips(tmp_path: Path) -> None:
    import cupy

    before = zarr.config.get("codecs.zstd"), zarr.config.get("buffer")
    data = sample_data(SHAPE, "uint16")
    make_array(tmp_path / "a.zarr", "v3", data, chunks=CHUNKS)
    with gpu_zarr_context():
        with gpu_zarr_context():
            assert isinstance(zarr.open_array(tmp_path / "a.zarr", mode="r")[:4], cupy.ndarray)
        assert zarr.config.get("codecs.zstd") != before[0]
        written = zarr.create_array(tmp_path / "w.zarr", shape=SHAPE, chunks=CHUNKS, dtype="uint16")
        written[...] = cupy.asarray(data)
    assert (zarr.config.get("codecs.zstd"), zarr.config.get("buffer")) == before
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "w.zarr", mode="r")[...], data)

    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with gpu_zarr_context():
                barrier.wait()
                assert isinstance(zarr.open_array(tmp_path / "a.zarr", mode="r")[:2], cupy.ndarray)
                barrier.wait()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert (zarr.config.get("codecs.zstd"), zarr.config.get("buffer")) == before
