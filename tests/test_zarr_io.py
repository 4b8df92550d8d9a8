"""linumpy.gpu.zarr_io: the fast GPU read against zarr's CPU read, and its CPU-side behaviour.

The engine's CPU stages (plan, fetch, frame checks, groups, run) are tested in test_engine.py and
the settings in test_settings.py; the `gpu` tests here run the GPU back end and nvCOMP.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from unittest import mock

import numcodecs
import numpy as np
import pytest
import zarr
from conftest import gpu_missing_reason
from zarr_layouts import (
    CHUNKS,
    DTYPES,
    LAYOUTS,
    REGIONS,
    SHAPE,
    make_array,
    sample_data,
    skippable_frame,
    without_content_size,
    zarr_read,
    zstd_frame,
)

from linumpy.errors import ChunkDecodeError, DeviceMemoryError, GPUUnavailableError, LinumpyError
from linumpy.gpu.zarr_io import (
    gpu_read_route,
    gpu_zarr_context,
    last_read_report,
    read_zarr_to_gpu,
)
from linumpy.io import read_volume
from linumpy.io.engine.codecs.protocol import FRAME_GPU
from linumpy.io.engine.codecs.zstd import check_frames
from linumpy.io.engine.fetch import ALIGN, align_up, chunk_sizes
from linumpy.io.engine.fetch_kvikio import kvikio_unusable_reason
from linumpy.io.engine.plan import plan_read
from linumpy.io.engine.read import last_read_report as engine_last_read_report
from linumpy.settings import Settings

# Settings that force groups of one or two chunks on two streams.
TINY = {"scratch_bytes": 9000, "io_threads": 3}


@contextmanager
def tuned(
    *,
    pinned: int | None = None,
    streams: int | None = None,
    cpu_share: float | None = None,
    chunk_bytes: int | None = None,
) -> Iterator[None]:
    """Within: the GPU back end's tuning constants given (page-locked staging, CUDA streams,
    libzstd's share of the chunks, the largest chunk nvCOMP decodes) instead of its own."""
    from linumpy.gpu import backend, pinned_buffers
    from linumpy.io.engine import plan

    values = [
        (pinned_buffers, "_FIXED_BYTES", pinned),
        (backend, "STREAMS", streams),
        (backend, "CPU_SHARE", cpu_share),
        (plan, "GPU_CHUNK_BYTES", chunk_bytes),
    ]
    with ExitStack() as stack:
        for module, name, value in values:
            if value is not None:
                stack.enter_context(mock.patch.object(module, name, value))
        yield


@pytest.fixture
def tiny_tuning() -> Iterator[None]:
    """Reads staged through 6000 page-locked bytes on two streams: many small groups."""
    with tuned(pinned=6000, streams=2):
        yield


no_gpu = pytest.mark.skipif(
    gpu_missing_reason() is None, reason="checks the behaviour on machines without a GPU"
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
from linumpy.io import read_volume
data = read_volume(sys.argv[1], settings={"io_threads": 2})
assert isinstance(data, np.ndarray) and data.sum() > 0
gpu_modules = sorted(m for m in sys.modules if m.startswith("linumpy.gpu"))
assert not gpu_modules, f"the CPU read imported {gpu_modules}"
# Importing the GPU API is fine: it imports no GPU library (zarr itself imports cupy when it is
# installed, which creates no CUDA context).
from linumpy.gpu import zarr_io
assert read_volume(sys.argv[1], region=(slice(0, 4),)).shape[0] == 4
for name in ("nvidia.nvcomp", "nvidia.libnvcomp", "kvikio"):
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


_WITHOUT_GPU_LIBRARIES_SCRIPT = """
import importlib, pkgutil, sys
for name in ("cupy", "cupyx", "kvikio", "nvidia.nvcomp", "nvidia.libnvcomp"):
    sys.modules[name] = None  # importing it raises ImportError, as where it is not installed
import linumpy.gpu
names = [info.name for info in pkgutil.walk_packages(linumpy.gpu.__path__, "linumpy.gpu.")]
for name in names:
    importlib.import_module(name)
print(len(names))
"""


def test_every_gpu_module_imports_without_the_gpu_libraries() -> None:
    """GPU libraries are imported inside functions: the modules import on any machine."""
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_GPU_LIBRARIES_SCRIPT],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 10  # availability, memory, nvcomp, scatter, backend, ...


# --- GPU ----------------------------------------------------------------------------------------


def assert_same_on_gpu(actual: object, expected: np.ndarray) -> None:
    import cupy

    assert isinstance(actual, cupy.ndarray)
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert actual.get().tobytes() == expected.tobytes()


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fast_path_matches_zarr(tmp_path: Path, layout: str, dtype: str, tiny_tuning) -> None:
    data = sample_data(SHAPE, dtype)
    data[:8] = 0  # missing chunks
    make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS)
    for settings in (None, TINY, Settings.from_env(**TINY)):
        for region in REGIONS:
            actual = read_zarr_to_gpu(tmp_path / "a.zarr", region=region, settings=settings)
            expected = zarr_read(tmp_path / "a.zarr", region, native=True)
            assert_same_on_gpu(actual, expected)
            report = last_read_report()
            assert report is not None and report.path == "fast"
            assert report.reader in ("kvikio", "pread")
            assert report.output_bytes == expected.nbytes
            assert report.n_cpu_decoded == 0
            if region is None:
                assert report.n_fill == 3 * 3  # the first slab of chunks is not stored
                assert report.n_reads == 3 * 3 * 3 - report.n_fill
                assert report.n_batches >= 1 and report.compressed_bytes > 0
                assert {"plan", "pipeline", "fetch", "submit", "final_sync"} <= set(report.phases)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_fill_values_checksums_order_and_byte_order(
    tmp_path: Path, layout: str, tiny_tuning
) -> None:
    data = sample_data(SHAPE, "complex64")
    data[:8] = 1 + 2j
    make_array(tmp_path / "c.zarr", layout, data, chunks=CHUNKS, fill_value=1 + 2j, checksum=True)
    assert_same_on_gpu(read_zarr_to_gpu(tmp_path / "c.zarr"), data)
    tiny = Settings.from_env(**TINY)
    assert_same_on_gpu(read_zarr_to_gpu(tmp_path / "c.zarr", settings=tiny), data)
    if layout == "v2":
        big = sample_data(SHAPE, "float32").astype(">f4")
        make_array(tmp_path / "f.zarr", "v2", big, chunks=CHUNKS, order="F")
        for region in REGIONS:
            actual = read_zarr_to_gpu(tmp_path / "f.zarr", region=region, settings=tiny)
            assert_same_on_gpu(actual, zarr_read(tmp_path / "f.zarr", region, native=True))


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
    files = plan_read(array).files  # one per chunk, all stored
    rewrites = {
        0: lambda chunk: skippable_frame(b"note") + zstd_frame(chunk),
        5: lambda chunk: zstd_frame(chunk[:100]) + zstd_frame(chunk[100:]),
        9: lambda chunk: without_content_size(zstd_frame(chunk)),
    }
    for i, rewrite in rewrites.items():
        chunk = np.frombuffer(numcodecs.Zstd().decode(Path(files[i]).read_bytes()), np.uint16)
        Path(files[i]).write_bytes(rewrite(chunk))
    assert_same_on_gpu(read_zarr_to_gpu(tmp_path / "a.zarr"), data)
    report = last_read_report()
    assert report is not None and report.n_cpu_decoded == len(rewrites)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["v3", "v3-sharded"])
def test_chunks_over_the_nvcomp_limit_are_decoded_on_the_cpu(tmp_path: Path, layout: str) -> None:
    data = sample_data(SHAPE, "float32")
    make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS)
    chunk_nbytes = int(np.prod(CHUNKS)) * 4
    for limit, on_cpu in ((chunk_nbytes - 1, True), (chunk_nbytes, False)):
        with tuned(chunk_bytes=limit):
            assert_same_on_gpu(read_zarr_to_gpu(tmp_path / "a.zarr"), data)
        report = last_read_report()
        assert report is not None
        assert report.n_fill == 0
        assert report.n_cpu_decoded == (report.n_reads if on_cpu else 0)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_chunks_decoded_on_the_host_are_copied_up_as_zarr_reads_them(
    tmp_path: Path, layout: str
) -> None:
    data = sample_data(SHAPE, "uint16")
    data[:8] = 0  # chunks not stored
    make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS)
    for region in REGIONS:
        with tuned(chunk_bytes=1024):  # below the 4 KiB chunks
            result = read_zarr_to_gpu(tmp_path / "a.zarr", region=region)
        assert_same_on_gpu(result, zarr_read(tmp_path / "a.zarr", region))
        report = last_read_report()
        assert report is not None and report.reader == "pread"
        if result.size:
            assert "libzstd threads decode them" in report.reason
            assert report.n_cpu_decoded == report.n_reads > 0


@pytest.mark.gpu
@pytest.mark.parametrize(("order", "dtype"), [("F", "<u2"), ("C", ">u2"), ("F", ">f4")])
def test_large_chunks_of_any_order_and_byte_order_read_as_zarr_reads_them(
    tmp_path: Path, order: str, dtype: str
) -> None:
    data = sample_data(SHAPE, dtype)
    make_array(tmp_path / "a.zarr", "v2", data, chunks=CHUNKS, order=order)
    for region in REGIONS[:2]:
        with tuned(chunk_bytes=1024):  # below the chunks: decoded on the host
            result = read_zarr_to_gpu(tmp_path / "a.zarr", region=region)
        assert_same_on_gpu(result, zarr_read(tmp_path / "a.zarr", region, native=True))


def _damage(path: Path, offset: int, nbytes: int, how: str) -> bytes:
    """Corrupt the frame at ``offset`` of a chunk or shard file; return the file's old bytes."""
    stored = path.read_bytes()
    frame = bytearray(stored[offset : offset + nbytes])
    if how == "truncate":  # only for a chunk file of its own
        path.write_bytes(stored[: nbytes // 2])
        return stored
    if how == "garbage":
        frame[:] = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8).tobytes()
    else:  # the stored checksum
        frame[-1] ^= 0x5A
    path.write_bytes(stored[:offset] + bytes(frame) + stored[offset + nbytes :])
    return stored


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("layout", "damage"),
    [(layout, d) for layout in LAYOUTS for d in ("truncate", "garbage", "checksum")
     if not (layout == "v3-sharded" and d == "truncate")],
)  # fmt: skip
def test_corrupt_chunk_names_it_and_the_next_read_works(
    tmp_path: Path, layout: str, damage: str
) -> None:
    data = sample_data(SHAPE, "uint16")
    array = make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS, checksum=True)
    plan = plan_read(array)
    victim = 7
    path = Path(plan.files[plan.file_index[victim]])
    stored = _damage(path, int(plan.offsets[victim]), int(chunk_sizes(plan)[victim]), damage)
    for settings, chunk_bytes in ((None, None), (TINY, None), (None, 1024)):  # 1024: on the host
        with tuned(chunk_bytes=chunk_bytes), pytest.raises(ChunkDecodeError) as info:
            read_zarr_to_gpu(tmp_path / "a.zarr", settings=settings)
        assert info.value.key == plan.key(victim)
    path.write_bytes(stored)
    assert_same_on_gpu(read_zarr_to_gpu(tmp_path / "a.zarr"), data)


@pytest.mark.gpu
def test_out_is_filled_in_place_even_when_misaligned(tmp_path: Path, tiny_tuning) -> None:
    import cupy

    data = sample_data(SHAPE, "uint16")
    make_array(tmp_path / "a.zarr", "v3-sharded", data, chunks=CHUNKS)
    backing = cupy.zeros(data.size + 3, dtype=np.uint16)
    out = backing[3:].reshape(SHAPE)  # C-contiguous, 6 bytes past an aligned address
    result = read_zarr_to_gpu(tmp_path / "a.zarr", out=out, settings=TINY)
    assert result is out
    assert_same_on_gpu(out, data)
    assert int(backing[:3].sum()) == 0
    with pytest.raises(LinumpyError, match="out must be"):
        read_zarr_to_gpu(tmp_path / "a.zarr", out=cupy.empty(SHAPE, np.float32))


@pytest.mark.gpu
def test_region_reads_only_its_chunks_and_memory_stays_bounded(tmp_path: Path) -> None:
    from linumpy.gpu.gpu_read import device_memory_needed

    data = sample_data((64, 256, 256), "uint16")
    make_array(tmp_path / "a.zarr", "v3", data, chunks=(16, 64, 64))
    region = (slice(0, 32), slice(0, 128), slice(0, 128))  # 1/8 of the volume
    settings = Settings.from_env(scratch_bytes=2**20)
    with tuned(pinned=2**20):
        actual = read_zarr_to_gpu(tmp_path / "a.zarr", region=region, settings=settings)
    assert_same_on_gpu(actual, data[region])
    report = last_read_report()
    assert report is not None
    plan = plan_read(zarr.open_array(tmp_path / "a.zarr", mode="r"), region)
    sizes = chunk_sizes(plan)
    assert plan.n_entries == 2 * 2 * 2
    assert report.n_fill == int((sizes < 0).sum()) == 4  # the background's chunks: not stored
    assert report.n_reads == plan.n_entries - report.n_fill
    assert report.compressed_bytes == int(sizes[sizes >= 0].sum())
    assert report.device_extra_bytes <= device_memory_needed(plan, settings)
    assert report.pinned_bytes <= 2**20 + ALIGN * plan.n_entries
    assert report.n_batches >= 2  # groups of a quarter of the scratch: a chunk or two each


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
    # the read orchestrator, shared by both back ends, says why
    with caplog.at_level(logging.INFO, logger="linumpy.io.engine.read"):
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
    if fetch == "kvikio" and kvikio_unusable_reason() is not None:
        pytest.skip(kvikio_unusable_reason())
    data = sample_data(SHAPE, "uint16")
    make_array(tmp_path / "a.zarr", "v3-sharded", data, chunks=CHUNKS)
    settings = {"fetch": fetch}
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


# --- GPU: streams, groups, nvCOMP statuses ------------------------------------------------------

BIG_SHAPE, BIG_CHUNKS = (48, 96, 96), (16, 32, 32)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_any_number_of_streams_gives_the_same_volume(tmp_path: Path, layout: str) -> None:
    data = sample_data(BIG_SHAPE, "uint16")
    data[:16] = 0  # missing chunks
    make_array(tmp_path / "a.zarr", layout, data, chunks=BIG_CHUNKS)
    chunk_nbytes = int(np.prod(BIG_CHUNKS)) * 2
    region = (slice(5, 40), slice(10, 96), slice(0, 70))
    for streams in (1, 2, 4):
        settings = {"scratch_bytes": 6 * chunk_nbytes, "io_threads": 3}
        for part in (None, region):
            with tuned(streams=streams):
                actual = read_zarr_to_gpu(tmp_path / "a.zarr", region=part, settings=settings)
            assert_same_on_gpu(actual, zarr_read(tmp_path / "a.zarr", part, native=True))
        report = last_read_report()
        assert report is not None and report.path == "fast"
        assert report.n_batches >= streams  # every stream had work


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["uint8", "float32", "complex64"])
def test_groups_of_one_chunk_give_the_same_volume(tmp_path: Path, layout: str, dtype: str) -> None:
    data = sample_data(BIG_SHAPE, dtype) + 1  # no chunk equal to the fill value: all stored
    make_array(tmp_path / "a.zarr", layout, data, chunks=BIG_CHUNKS)
    tiny = {"scratch_bytes": 1}
    for region in (None, (slice(7, 33), slice(31, 65), slice(1, 95))):
        with tuned(pinned=1, streams=3):
            actual = read_zarr_to_gpu(tmp_path / "a.zarr", region=region, settings=tiny)
        assert_same_on_gpu(actual, zarr_read(tmp_path / "a.zarr", region, native=True))
        report = last_read_report()
        assert report is not None
        assert report.n_fill == 0 and report.n_batches == report.n_reads > 1


def _device_frames(
    chunks: list[np.ndarray],
) -> tuple[object, np.ndarray, np.ndarray]:
    """Frames of ``chunks``, checked on the CPU, in one device buffer: (buffer, offsets, sizes)."""
    import cupy

    from linumpy.gpu import nvcomp

    frames = [zstd_frame(chunk.ravel()) for chunk in chunks]
    assert ALIGN % nvcomp.alignments()[0] == 0
    offsets = np.cumsum([0] + [align_up(len(f)) for f in frames[:-1]]).astype(np.int64)
    host = np.zeros(int(offsets[-1]) + align_up(len(frames[-1])), dtype=np.uint8)
    for offset, frame in zip(offsets, frames, strict=True):
        host[offset : offset + len(frame)] = np.frombuffer(frame, dtype=np.uint8)
    sizes = np.array([len(f) for f in frames], dtype=np.int64)
    assert (check_frames(host, offsets, sizes, chunks[0].nbytes) == FRAME_GPU).all()
    frames_on_device = cupy.asarray(host)
    cupy.cuda.Device().synchronize()  # the copy is done before another stream reads it
    return frames_on_device, offsets, sizes


@pytest.mark.gpu
def test_nvcomp_statuses_are_checked() -> None:
    import cupy

    from linumpy.gpu import nvcomp

    chunks = [sample_data((8, 64, 64), "uint16", seed=k) for k in range(5)]
    nbytes = chunks[0].nbytes
    frames, offsets, sizes = _device_frames(chunks)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        out = cupy.zeros(len(chunks) * nbytes, dtype=np.uint8)
    sources = frames.data.ptr + offsets  # type: ignore[attr-defined]
    targets = out.data.ptr + np.arange(len(chunks), dtype=np.int64) * nbytes
    keys = [f"chunk {k}" for k in range(len(chunks))]
    full = np.full(len(chunks), nbytes, dtype=np.int64)

    pending = nvcomp.decode(sources, sizes, targets, full, stream=stream)
    stream.synchronize()
    pending.check(keys)
    assert pending.sizes().tolist() == full.tolist()
    assert out.get().tobytes() == b"".join(chunk.tobytes() for chunk in chunks)

    short = full.copy()
    short[3] = nbytes - 256  # less room than the frame declares
    pending = nvcomp.decode(sources, sizes, targets, short, stream=stream)
    stream.synchronize()
    with pytest.raises(ChunkDecodeError) as info:
        pending.check(keys)
    assert info.value.key == "chunk 3"
    assert "nvCOMP decode" in info.value.reason

    # The stream and nvCOMP still work after the failed call; an empty batch checks fine.
    with stream:
        out[...] = 0
    pending = nvcomp.decode(sources, sizes, targets, full, stream=stream)
    stream.synchronize()
    pending.check(keys)
    assert out.get().tobytes() == b"".join(chunk.tobytes() for chunk in chunks)
    empty = np.zeros(0, dtype=np.int64)
    nvcomp.decode(empty, empty, empty, empty, stream=stream).check([])


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["v3", "v3-sharded"])
def test_groups_decoded_by_libzstd_give_the_same_volume(tmp_path: Path, layout: str) -> None:
    """CPU_SHARE: the last chunks of a large read are decoded on the CPU in groups of their
    own while nvCOMP decodes the others (0.5), or all of them (1), then scattered."""
    rng = np.random.default_rng(2)
    data = rng.integers(0, 2**16, (40, 512, 1024), dtype=np.uint16)  # 40 MiB to read: overlap
    data[:, :, :256] //= 256  # some compressible chunks too
    make_array(
        tmp_path / "a.zarr", layout, data, chunks=(16, 256, 256), shards=(32, 512, 512),
        checksum=True,
    )  # fmt: skip
    for share, on_cpu in ((0.0, False), (0.5, True), (1.0, True)):
        with tuned(cpu_share=share, streams=2):
            assert_same_on_gpu(read_zarr_to_gpu(tmp_path / "a.zarr"), data)
        report = last_read_report()
        assert report is not None and report.path == "fast"
        assert (report.phases.get("cpu_queue", 0.0) > 0) is on_cpu, (share, report.phases)
        assert (report.phases.get("nvcomp", 0.0) > 0) is (share < 1), (share, report.phases)
    # A corrupt chunk decoded on the CPU is named too: the last one read is in the tail.
    array = zarr.open_array(tmp_path / "a.zarr", mode="r")
    plan = plan_read(array)
    sizes = chunk_sizes(plan)
    last = int(np.lexsort((plan.offsets, plan.file_index))[-1])
    for share in (1.0, 0.5):
        path = Path(plan.files[plan.file_index[last]])
        stored = _damage(path, int(plan.offsets[last]), int(sizes[last]), "checksum")
        with tuned(cpu_share=share), pytest.raises(ChunkDecodeError) as info:
            read_zarr_to_gpu(tmp_path / "a.zarr")
        assert info.value.key == plan.key(last)
        assert "checksum" in info.value.reason.lower()
        path.write_bytes(stored)
        with tuned(cpu_share=share):
            assert_same_on_gpu(read_zarr_to_gpu(tmp_path / "a.zarr"), data)


@pytest.mark.gpu
def test_a_cached_pinned_buffer_serves_larger_requests_within_its_room() -> None:
    """Buffers are page-locked a power of two large (up to the room), so that the next reads of
    a job, whose groups grow with the data, take them from the cache instead of locking more."""
    from linumpy.gpu.pinned_buffers import PinnedLease

    mib = 2**20
    first = PinnedLease()
    pointer = first.get("test-room", 0, 3 * mib, 64 * mib).ctypes.data
    first.close()
    second = PinnedLease()
    grown = second.get("test-room", 0, 4 * mib, 64 * mib)
    assert (grown.ctypes.data, grown.nbytes) == (pointer, 4 * mib)
    larger = second.get("test-room", 0, 5 * mib, 64 * mib)  # over the 4 MiB locked: 8 MiB now
    assert larger.ctypes.data != pointer and larger.nbytes == 5 * mib
    second.close()
    third = PinnedLease()
    assert third.get("test-room", 0, 7 * mib, 7 * mib).ctypes.data == larger.ctypes.data
    third.close()


def test_the_reader_and_host_decodes_follow_the_chunk_size(tmp_path: Path) -> None:
    """Chunks above the limit given to nvCOMP are read and decoded by libzstd's threads."""
    from linumpy.gpu.backend import GpuBackend
    from linumpy.gpu.gpu_read import fast_path_obstacle
    from linumpy.gpu.host_decode import decode_pool, decodes_on_host

    path = tmp_path / "a.zarr"
    plan = plan_read(zarr.create_array(path, shape=(64,), chunks=(32,), dtype="uint16"))
    assert fast_path_obstacle(plan) is None
    assert (decodes_on_host(plan, 32), decodes_on_host(plan, 64)) == (True, False)
    assert GpuBackend.choose_reader(plan, Settings(fetch="pread")) == ("pread", "requested")
    with tuned(chunk_bytes=32):
        reader, why = GpuBackend.choose_reader(plan, Settings(fetch="kvikio"))
    assert reader == "pread" and "libzstd threads decode them" in why
    assert decode_pool(2) is decode_pool(2)


def test_scatter_table_places_chunk_parts_and_fills_in_words(tmp_path: Path) -> None:
    from linumpy.gpu.scatter import geometry, scatter_table

    array = zarr.create_array(tmp_path / "a.zarr", shape=(4, 6), chunks=(2, 4), dtype="uint16")
    geo = geometry(plan_read(array))
    assert geo.word == 2
    assert geo.count.tolist() == [8, 4, 8, 4] and geo.out_offset.tolist() == [0, 4, 12, 16]
    table = scatter_table(
        geo, np.array([0]), np.array([1]), sources=np.array([1000]), out_ptr=5000, fill_ptr=9000
    )
    # per row: source, destination, element count
    assert table[:, :3].tolist() == [[1000, 5000, 8], [9000, 5008, 4]]
    path = tmp_path / "c.zarr"
    complex_array = zarr.create_array(path, shape=(4,), chunks=(2,), dtype="complex64")
    complex_geo = geometry(plan_read(complex_array))
    assert (complex_geo.ndim, complex_geo.word) == (2, 4)  # an element is two words of 4 bytes


@pytest.mark.parametrize(
    ("nbytes", "room", "expected"),
    [(3 << 20, 1 << 30, 4 << 20), (4 << 20, 1 << 30, 4 << 20), (5 << 20, 6 << 20, 6 << 20),
     (5 << 20, 0, 5 << 20), (9 << 20, 4 << 20, 9 << 20), (1, 64, 1), (0, 64, 1)],
)  # fmt: skip
def test_pinned_room_is_the_next_power_of_two_within_the_room(
    nbytes: int, room: int, expected: int
) -> None:
    from linumpy.gpu.pinned_buffers import roomy

    assert roomy(nbytes, room) == expected


def test_pinned_allowance_starts_small_and_grows_with_staged_bytes(monkeypatch) -> None:
    from linumpy.gpu import pinned_buffers as pb

    monkeypatch.setattr(pb, "_moved", 0)
    assert pb.pinned_allowance() == pb.FIRST_PINNED_BYTES
    with tuned(pinned=3 * 2**20):
        assert pb.pinned_allowance() == 3 * 2**20
    pb.count_moved(2 * pb.FIRST_PINNED_BYTES * pb.PINNED_PAYBACK)
    assert pb.pinned_allowance() == 2 * pb.FIRST_PINNED_BYTES
    with pb.steady_staging():
        assert pb.pinned_allowance() == pb.MAX_PINNED_BYTES
    pb.count_moved(100 * pb.MAX_PINNED_BYTES * pb.PINNED_PAYBACK)
    assert pb.pinned_allowance() == pb.MAX_PINNED_BYTES


@pytest.mark.gpu
def test_a_new_process_stages_its_first_reads_in_little_pinned_memory(
    tmp_path: Path, monkeypatch
) -> None:
    from linumpy.gpu import backend, pinned_buffers

    data = sample_data((64, 256, 256), "uint16")
    make_array(tmp_path / "a.zarr", "v3", data, chunks=(16, 64, 64))
    mib = 2**20
    monkeypatch.setattr(pinned_buffers, "FIRST_PINNED_BYTES", mib)
    monkeypatch.setattr(pinned_buffers, "MAX_PINNED_BYTES", 64 * mib)
    monkeypatch.setattr(pinned_buffers, "_moved", 0)
    monkeypatch.setattr(pinned_buffers, "_idle", {})  # no buffer left by earlier tests
    monkeypatch.setattr(backend, "STREAMS", 2)
    assert_same_on_gpu(read_zarr_to_gpu(tmp_path / "a.zarr"), data)
    first = last_read_report()
    assert first is not None and first.compressed_bytes > 2 * mib
    assert first.pinned_bytes <= 2 * mib  # each of two slots: half the allowance, in powers of two
    pinned_buffers.count_moved(64 * mib * pinned_buffers.PINNED_PAYBACK)  # a long session's reads
    assert_same_on_gpu(read_zarr_to_gpu(tmp_path / "a.zarr"), data)
    later = last_read_report()
    assert later is not None and later.pinned_bytes >= first.compressed_bytes
    assert later.n_batches < first.n_batches


@pytest.mark.gpu
def test_nvcomp_library_version_is_the_supported_major() -> None:
    import importlib.metadata

    from linumpy.gpu import nvcomp

    version = nvcomp.library_version()
    assert version[0] == nvcomp.SUPPORTED_MAJOR
    wheels = [
        importlib.metadata.version(name)
        for name in ("nvidia-libnvcomp-cu13", "nvidia-libnvcomp-cu12")
        if _installed(name)
    ]
    assert any(w.startswith(".".join(map(str, version[:2]))) for w in wheels), (version, wheels)


def _installed(name: str) -> bool:
    import importlib.metadata

    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.gpu
def test_both_destinations_name_the_array_alike(tmp_path: Path) -> None:
    """One descent, one label: a region out of bounds is reported the same way by the CPU read,
    read_volume(gpu=True) and read_zarr_to_gpu, and both GPU reads leave a GPU report."""
    make_array(tmp_path / "a.zarr", "v3", sample_data(SHAPE, "uint16"), chunks=CHUNKS)
    bad = (slice(0, SHAPE[0] + 1),)
    messages = []
    for read in (
        lambda: read_volume(tmp_path / "a.zarr", region=bad),
        lambda: read_volume(tmp_path / "a.zarr", region=bad, gpu=True),
        lambda: read_zarr_to_gpu(tmp_path / "a.zarr", region=bad),
    ):
        with pytest.raises(LinumpyError) as info:
            read()
        messages.append(str(info.value))
    assert messages[0] == messages[1] == messages[2] and "(level 0)" in messages[0]
    read_volume(tmp_path / "a.zarr", region=(slice(0, 2),))
    cpu = engine_last_read_report("cpu")
    read_zarr_to_gpu(tmp_path / "a.zarr", region=(slice(0, 2),))
    gpu = last_read_report()
    assert cpu is not None and gpu is not None and gpu.backend == "gpu"
    assert gpu.source == cpu.source and gpu.path == cpu.path == "fast"
