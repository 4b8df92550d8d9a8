"""NvcompZstdCodec: zarr's zstd codec on the GPU (nvCOMP), its registration and its config.

CPU tests cover the API, the JSON, registration without the GPU libraries and the checksum patch;
`gpu` tests run real nvCOMP and the XXH64 kernel against zarr's and numcodecs' CPU zstd.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr
from numcodecs import Zstd
from zarr.codecs import ZstdCodec

from linumpy.errors import ChunkDecodeError, GPUUnavailableError, SettingsError
from linumpy.gpu import codec_transfers
from linumpy.gpu.codec_batches import arrived_on_host, decode_items, prepare_items
from linumpy.gpu.codec_transfers import layout as _layout
from linumpy.gpu.nvcomp_zstd import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_CONCURRENCY,
    NvcompZstdCodec,
    gpu_zstd_config,
    register_nvcomp_zstd,
)
from linumpy.gpu.zarr_buffers import host_bytes_config
from linumpy.io.engine.codecs import zstd

CODEC_LOGGER = "linumpy.gpu.codec_batches"


def _subprocess_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )


# --- CPU: API, JSON, config, registration -------------------------------------------------------


def test_defaults_and_attributes() -> None:
    codec = NvcompZstdCodec()
    assert (codec.level, codec.checksum, codec.is_fixed_size) == (0, False, False)
    assert isinstance(codec, zarr.abc.codec.BytesBytesCodec)
    with pytest.raises(dataclasses.FrozenInstanceError):
        codec.level = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        NvcompZstdCodec(3)  # type: ignore[misc]  # keyword-only, like zarr's ZstdCodec


@pytest.mark.parametrize(
    ("level", "checksum"), [(0, False), (3, True), (-5, False), (19, True), (22, False)]
)
def test_json_is_zarrs(level: int, checksum: bool) -> None:
    codec = NvcompZstdCodec(level=level, checksum=checksum)
    assert codec.to_dict() == ZstdCodec(level=level, checksum=checksum).to_dict()
    assert codec.to_dict() == {
        "name": "zstd",
        "configuration": {"level": level, "checksum": checksum},
    }
    assert NvcompZstdCodec.from_dict(codec.to_dict()) == codec
    assert NvcompZstdCodec.from_dict(ZstdCodec(level=level, checksum=checksum).to_dict()) == codec


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"level": 23}, ValueError),
        ({"level": "3"}, TypeError),
        ({"level": 2.5}, TypeError),
        ({"checksum": "yes"}, TypeError),
        ({"checksum": 1.5}, TypeError),
    ],
)
def test_invalid_parameters_raise_like_zarr(kwargs: dict[str, object], error: type) -> None:
    with pytest.raises(error) as zarr_error:
        ZstdCodec(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(error) as ours:
        NvcompZstdCodec(**kwargs)  # type: ignore[arg-type]
    assert type(ours.value) is type(zarr_error.value)
    assert next(iter(kwargs)) in str(ours.value)  # the message names the parameter


def test_from_dict_rejects_other_codecs() -> None:
    with pytest.raises(ValueError, match="zstd"):
        NvcompZstdCodec.from_dict({"name": "gzip", "configuration": {"level": 1}})
    with pytest.raises(TypeError):
        NvcompZstdCodec.from_dict({"name": "zstd", "configuration": {"level": 3, "speed": 1}})


def test_compute_encoded_size_is_not_implemented() -> None:
    with pytest.raises(NotImplementedError):
        NvcompZstdCodec().compute_encoded_size(100, None)  # type: ignore[arg-type]


def test_gpu_zstd_config_keys() -> None:
    config = gpu_zstd_config()
    assert config == {
        "codecs.zstd": "linumpy.gpu.nvcomp_zstd.NvcompZstdCodec",
        "codecs.crc32c": "linumpy.gpu.nvcomp_zstd.DeviceCrc32cCodec",
        "codec_pipeline.batch_size": DEFAULT_BATCH_SIZE,
        "async.concurrency": DEFAULT_CONCURRENCY,
    }
    assert gpu_zstd_config(batch_size=7)["codec_pipeline.batch_size"] == 7
    assert gpu_zstd_config(concurrency=3)["async.concurrency"] == 3
    with zarr.config.set(config):
        assert zarr.config.get("codecs.zstd") == config["codecs.zstd"]
        assert zarr.config.get("codec_pipeline.batch_size") == DEFAULT_BATCH_SIZE
        assert zarr.config.get("async.concurrency") == DEFAULT_CONCURRENCY
        # Dotted keys leave zarr's other codecs in place.
        assert zarr.config.get("codecs.bytes") == "zarr.codecs.bytes.BytesCodec"
    assert zarr.config.get("codecs.zstd") == "zarr.codecs.zstd.ZstdCodec"


def test_device_crc32c_codec_checks_like_zarrs(tmp_path: Path) -> None:
    """Arrays written through DeviceCrc32cCodec read back with zarr's codec, and the other way;
    a damaged index fails the same check (CPU buffers here; the GPU run checks no warning)."""
    from zarr.registry import register_codec

    from linumpy.gpu.nvcomp_zstd import DeviceCrc32cCodec

    data = np.arange(4096, dtype=np.uint16).reshape(64, 64)
    register_codec("crc32c", DeviceCrc32cCodec)
    zarr.create_array(tmp_path / "a.zarr", shape=(64, 64), chunks=(16, 16), shards=(32, 32),
                      dtype="uint16")  # fmt: skip
    with zarr.config.set({"codecs.crc32c": "linumpy.gpu.nvcomp_zstd.DeviceCrc32cCodec"}):
        ours = zarr.open_array(tmp_path / "a.zarr", mode="r+")  # codecs are fixed at open
        assert type(ours.metadata.codecs[0].index_codecs[-1]) is DeviceCrc32cCodec
        ours[...] = data
        assert np.array_equal(ours[...], data)
    theirs = zarr.open_array(tmp_path / "a.zarr", mode="r")
    assert type(theirs.metadata.codecs[0].index_codecs[-1]) is not DeviceCrc32cCodec
    assert np.array_equal(theirs[...], data)
    shard = tmp_path / "a.zarr" / "c" / "0" / "0"
    raw = bytearray(shard.read_bytes())
    raw[-6] ^= 0xFF  # inside the index, before its checksum
    shard.write_bytes(bytes(raw))
    with (
        zarr.config.set({"codecs.crc32c": "linumpy.gpu.nvcomp_zstd.DeviceCrc32cCodec"}),
        pytest.raises(ValueError, match="checksum do not match"),
    ):
        zarr.open_array(tmp_path / "a.zarr", mode="r")[...]


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "8"])
@pytest.mark.parametrize("name", ["batch_size", "concurrency"])
def test_gpu_zstd_config_rejects_bad_values(name: str, bad: object) -> None:
    with pytest.raises(SettingsError, match=name):
        gpu_zstd_config(**{name: bad})  # type: ignore[arg-type]


def test_import_touches_no_gpu_library() -> None:
    result = _subprocess_python(
        "import sys; import linumpy.gpu.nvcomp_zstd; "
        "print(sorted(m for m in ('nvidia.nvcomp', 'kvikio') if m in sys.modules))"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("missing", ["cupy", "nvidia.nvcomp"])
def test_registration_without_gpu_libraries_returns_false(missing: str) -> None:
    # A None entry in sys.modules makes `import missing` raise ImportError: the library is absent.
    result = _subprocess_python(
        f"import sys; sys.modules[{missing!r}] = None\n"
        "from zarr.registry import _codec_registries\n"
        "from linumpy.gpu.nvcomp_zstd import register_nvcomp_zstd\n"
        "print(register_nvcomp_zstd())\n"
        "print('linumpy.gpu.nvcomp_zstd.NvcompZstdCodec' in _codec_registries['zstd'])"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]


def test_registration_here_matches_the_gpu() -> None:
    from conftest import gpu_missing_reason

    assert register_nvcomp_zstd() is (gpu_missing_reason() is None)


def test_without_gpu_a_read_raises_gpu_unavailable(tmp_path: Path) -> None:
    from conftest import gpu_missing_reason

    if gpu_missing_reason() is None:
        pytest.skip("a GPU is usable here")
    data = np.arange(64, dtype=np.uint16)
    arr = zarr.create_array(tmp_path / "a.zarr", shape=data.shape, chunks=(16,), dtype=data.dtype)
    arr[...] = data
    zarr.registry.register_codec("zstd", NvcompZstdCodec)  # what register_nvcomp_zstd refuses
    with zarr.config.set(gpu_zstd_config()), pytest.raises(GPUUnavailableError, match="cupy"):
        zarr.open_array(tmp_path / "a.zarr", mode="r")[...]


def test_layout_is_aligned_and_disjoint() -> None:
    sizes = [0, 1, 15, 16, 17, 1000]
    offsets, total = _layout(sizes)
    assert all(offset % 16 == 0 for offset in offsets)
    ends = [offset + size for offset, size in zip(offsets, sizes, strict=True)]
    assert all(end <= start for end, start in zip(ends, offsets[1:], strict=False))
    assert ends[-1] <= total < ends[-1] + 16


def test_set_checksum_writes_a_frame_libzstd_verifies() -> None:
    data = np.random.default_rng(3).integers(0, 300, 20_000, dtype=np.uint16)
    plain = np.frombuffer(Zstd(level=3).encode(data), dtype=np.uint8)
    stored = zstd.inspect_chunk(
        Zstd(level=3, checksum=True).encode(data), key="ref", expected_size=data.nbytes
    ).checksum
    assert stored is not None
    frame = np.concatenate([plain, np.zeros(4, dtype=np.uint8)])
    zstd.set_checksum(frame, stored | (0xABCD << 32))  # only the low 32 bits are stored
    info = zstd.inspect_chunk(frame, key="patched", expected_size=data.nbytes)
    assert info.checksum == stored
    decoded = zstd.decode(frame, key="patched", expected_size=data.nbytes)
    np.testing.assert_array_equal(decoded.view(np.uint16), data)
    zstd.set_checksum(frame, stored ^ 1)
    with pytest.raises(ChunkDecodeError, match="patched"):
        zstd.decode(frame, key="patched", expected_size=data.nbytes)


# --- GPU: real nvCOMP ---------------------------------------------------------------------------


#: zarr's buffers in the GPU tests' ``gpu_zarr()``: all on the device (``enable_gpu()``), or the
#: stored bytes on the host (``HostBytes``, as in ``gpu_zarr_context``). The ``cp`` fixture runs
#: every GPU test under both (host: in pieces of 4 KiB, ``codec_transfers.PIECE_BYTES``).
BUFFERS = "device"


@pytest.fixture(params=["device", "host"])
def cp(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> object:
    import cupy

    assert register_nvcomp_zstd()
    monkeypatch.setattr(sys.modules[__name__], "BUFFERS", request.param)
    if request.param == "host":  # host chunks uploaded in many pieces, both pinned buffers used
        monkeypatch.setattr(codec_transfers, "PIECE_BYTES", 4096)
    return cupy


@contextlib.contextmanager
def gpu_zarr(*, on_device: bool = True) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        if on_device and BUFFERS == "device":
            stack.enter_context(zarr.config.enable_gpu())
        elif on_device:
            stack.enter_context(zarr.config.set(host_bytes_config()))
        stack.enter_context(zarr.config.set(gpu_zstd_config()))
        yield


def write_cpu(path: Path, data: np.ndarray, chunks: tuple[int, ...], **kwargs: object) -> None:
    shards = kwargs.pop("shards", None)
    arr = zarr.create_array(
        path,
        shape=data.shape,
        chunks=chunks,
        shards=shards,  # type: ignore[arg-type]
        dtype=data.dtype,
        compressors=ZstdCodec(**kwargs),  # type: ignore[arg-type]
        fill_value=0,
    )
    arr[...] = data


def read_gpu(path: Path, *, on_device: bool = True) -> np.ndarray:
    import cupy

    with gpu_zarr(on_device=on_device):
        result = zarr.open_array(path, mode="r")[...]
    assert isinstance(result, cupy.ndarray) is on_device
    return cupy.asnumpy(result)


def nvcomp_counts(caplog: pytest.LogCaptureFixture) -> tuple[int, int]:
    """Chunks decoded by nvCOMP and by the CPU decoder, from the codec's debug log."""
    gpu = cpu = 0
    for record in caplog.records:
        if record.name == CODEC_LOGGER and record.msg.startswith("decoded"):
            gpu += record.args[0]  # type: ignore[index]
            cpu += record.args[1]  # type: ignore[index]
    return gpu, cpu


def oct_like(shape: tuple[int, ...], dtype: type = np.uint16, seed: int = 0) -> np.ndarray:
    """Speckle under a depth attenuation: compressible like OCT, never constant."""
    rng = np.random.default_rng(seed)
    depth = np.exp(-np.arange(shape[0]) / 20.0).reshape((-1,) + (1,) * (len(shape) - 1))
    values = 1000.0 * depth * rng.exponential(1.0, shape) + 5.0
    if np.issubdtype(dtype, np.complexfloating):
        return (values + 1j * values[::-1]).astype(dtype)
    return values.astype(dtype) if dtype != np.uint8 else np.clip(values / 8, 0, 255).astype(dtype)


@pytest.fixture
def good_array(tmp_path: Path) -> Callable[[], None]:
    """A reference array and a check that it still reads correctly through the GPU codec."""
    data = oct_like((40, 40, 40), seed=11)
    write_cpu(tmp_path / "good.zarr", data, (16, 16, 16), level=3, checksum=True)

    def check() -> None:
        np.testing.assert_array_equal(read_gpu(tmp_path / "good.zarr"), data)

    return check


@pytest.mark.gpu
def test_codec_streams_are_lent_per_thread(cp: object) -> None:
    """A thread's calls one after the other reuse its stream; calls at once get one each; another
    thread has its own."""
    import threading

    from linumpy.gpu.availability import codec_stream

    with codec_stream() as first:
        pass
    with codec_stream() as again, codec_stream() as beside:
        assert again is first and beside is not first
    others: list[object] = []

    def other() -> None:
        with codec_stream() as stream:
            others.append(stream)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert len(others) == 1 and others[0] not in (first, beside)


@pytest.mark.gpu
def test_registration_routes_zstd(cp: object) -> None:
    from zarr.registry import get_codec_class

    assert get_codec_class("zstd") is ZstdCodec
    with zarr.config.set(gpu_zstd_config()):
        assert get_codec_class("zstd") is NvcompZstdCodec
    assert register_nvcomp_zstd()  # idempotent


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.float32, np.complex64])
def test_decode_matches_cpu_with_edge_chunks(
    cp: object, tmp_path: Path, caplog: pytest.LogCaptureFixture, dtype: type
) -> None:
    caplog.set_level(logging.DEBUG, logger=CODEC_LOGGER)
    data = oct_like((45, 40, 33), dtype)
    write_cpu(tmp_path / "a.zarr", data, (16, 16, 16), level=3)
    np.testing.assert_array_equal(read_gpu(tmp_path / "a.zarr"), data)
    assert nvcomp_counts(caplog) == (3 * 3 * 3, 0)


@pytest.mark.gpu
def test_decode_into_host_buffers(cp: object, tmp_path: Path) -> None:
    data = oct_like((20, 30, 40))
    write_cpu(tmp_path / "a.zarr", data, (8, 16, 16), level=3, checksum=True)
    np.testing.assert_array_equal(read_gpu(tmp_path / "a.zarr", on_device=False), data)


@pytest.mark.gpu
def test_all_levels(cp: object, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=CODEC_LOGGER)
    data = oct_like((24, 32, 32), seed=5)
    for level in range(1, 20):
        write_cpu(tmp_path / f"l{level}.zarr", data, (16, 16, 16), level=level)
        np.testing.assert_array_equal(read_gpu(tmp_path / f"l{level}.zarr"), data)
    assert nvcomp_counts(caplog) == (19 * 2 * 2 * 2, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("checksum", [False, True])
def test_checksum_on_and_off(
    cp: object, tmp_path: Path, caplog: pytest.LogCaptureFixture, checksum: bool
) -> None:
    caplog.set_level(logging.DEBUG, logger=CODEC_LOGGER)
    data = oct_like((33, 64, 64), seed=7)
    write_cpu(tmp_path / "a.zarr", data, (32, 32, 32), level=5, checksum=checksum)
    np.testing.assert_array_equal(read_gpu(tmp_path / "a.zarr"), data)
    assert nvcomp_counts(caplog) == (2 * 2 * 2, 0)


@pytest.mark.gpu
def test_partially_empty_array(cp: object, tmp_path: Path) -> None:
    data = oct_like((48, 48, 48))
    data[:16] = 0  # chunks equal to the fill value are never written
    data[32:, :16, 16:32] = 0
    write_cpu(tmp_path / "a.zarr", data, (16, 16, 16), level=3)
    stored = sum(1 for p in (tmp_path / "a.zarr" / "c").rglob("*") if p.is_file())
    assert stored == 27 - 9 - 1
    np.testing.assert_array_equal(read_gpu(tmp_path / "a.zarr"), data)


@pytest.mark.gpu
def test_sharded_cpu_write_gpu_read_and_back(cp: object, tmp_path: Path) -> None:
    import cupy

    data = oct_like((64, 64, 48), seed=2)
    write_cpu(tmp_path / "cpu.zarr", data, (16, 16, 16), shards=(32, 32, 48), level=3)
    np.testing.assert_array_equal(read_gpu(tmp_path / "cpu.zarr"), data)

    with gpu_zarr():
        arr = zarr.create_array(
            tmp_path / "gpu.zarr",
            shape=data.shape,
            chunks=(16, 16, 16),
            shards=(32, 32, 48),
            dtype=data.dtype,
            compressors=NvcompZstdCodec(level=3, checksum=True),
        )
        arr[...] = cupy.asarray(data)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "gpu.zarr", mode="r")[...], data)
    np.testing.assert_array_equal(read_gpu(tmp_path / "gpu.zarr"), data)


@pytest.mark.gpu
def test_sharded_read_takes_no_slow_copy_path(cp: object, tmp_path: Path) -> None:
    """zarr's own crc32c codec rebuilds each shard index from host memory under enable_gpu(),
    and zarr warns "falling back to slow copy based path" for every shard; the config's codec
    makes its buffers from bytes, so a sharded read under it warns nothing of the kind."""
    data = oct_like((64, 64, 48), seed=5)
    write_cpu(tmp_path / "s.zarr", data, (16, 16, 16), shards=(32, 32, 48), level=3)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*slow copy.*")
        np.testing.assert_array_equal(read_gpu(tmp_path / "s.zarr"), data)


@pytest.mark.gpu
def test_shards_share_nvcomp_calls(
    cp: object, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """zarr decodes the shards as concurrent tasks: their inner chunks share nvCOMP calls."""
    caplog.set_level(logging.DEBUG, logger=CODEC_LOGGER)
    data = oct_like((64, 64, 64), seed=4)
    write_cpu(tmp_path / "s.zarr", data, (16, 16, 16), shards=(32, 32, 32), level=3)
    np.testing.assert_array_equal(read_gpu(tmp_path / "s.zarr"), data)
    calls = [r for r in caplog.records if r.name == CODEC_LOGGER and r.msg.startswith("decoded")]
    assert nvcomp_counts(caplog) == (64, 0)
    assert len(calls) < 8  # 8 shards


@pytest.mark.gpu
@pytest.mark.parametrize("checksum", [False, True])
@pytest.mark.parametrize("source", ["device", "host"])
def test_gpu_write_cpu_read(
    cp: object, tmp_path: Path, caplog: pytest.LogCaptureFixture, checksum: bool, source: str
) -> None:
    import cupy

    caplog.set_level(logging.DEBUG, logger=CODEC_LOGGER)
    data = oct_like((40, 50, 30), np.float32, seed=9)
    with gpu_zarr(on_device=source == "device"):
        arr = zarr.create_array(
            tmp_path / "a.zarr",
            shape=data.shape,
            chunks=(16, 16, 16),
            dtype=data.dtype,
            compressors=NvcompZstdCodec(level=7, checksum=checksum),
        )
        arr[...] = cupy.asarray(data) if source == "device" else data
    assert zarr.open_array(tmp_path / "a.zarr").metadata.to_dict()["codecs"][1] == {
        "name": "zstd",
        "configuration": {"level": 7, "checksum": checksum},
    }
    chunk_files = [p for p in (tmp_path / "a.zarr" / "c").rglob("*") if p.is_file()]
    assert len(chunk_files) == 3 * 4 * 2
    for path in chunk_files:
        info = zstd.inspect_chunk(path.read_bytes(), key=str(path))
        assert info.gpu_decodable
        assert (info.checksum is not None) is checksum
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a.zarr", mode="r")[...], data)
    caplog.clear()
    np.testing.assert_array_equal(read_gpu(tmp_path / "a.zarr"), data)
    assert nvcomp_counts(caplog) == (len(chunk_files), 0)


@pytest.mark.gpu
def test_large_chunk_round_trip(cp: object, tmp_path: Path) -> None:
    import cupy

    data = oct_like((8, 1024, 2048), seed=4)  # one 32 MiB chunk
    write_cpu(tmp_path / "cpu.zarr", data, data.shape, level=3, checksum=True)
    np.testing.assert_array_equal(read_gpu(tmp_path / "cpu.zarr"), data)
    with gpu_zarr():
        arr = zarr.create_array(
            tmp_path / "gpu.zarr",
            shape=data.shape,
            chunks=data.shape,
            dtype=data.dtype,
            compressors=NvcompZstdCodec(checksum=True),
        )
        arr[...] = cupy.asarray(data)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "gpu.zarr", mode="r")[...], data)


CHUNK = (16, 16, 16)


def _skippable(content: bytes) -> bytes:
    return (0x184D2A53).to_bytes(4, "little") + len(content).to_bytes(4, "little") + content


def _frame_without_size(payload: bytes) -> bytes:
    """One raw block (at most 128 KiB) with a window descriptor and no content size field."""
    header = (0xFD2FB528).to_bytes(4, "little") + bytes([0x00, 0x48])
    return header + ((len(payload) << 3) | 1).to_bytes(3, "little") + payload


def _flip_middle(frame: bytes) -> bytes:
    corrupt = bytearray(frame)
    corrupt[len(frame) // 2] ^= 0x5A
    return bytes(corrupt)


# Each takes the stored frame (checksummed) and the chunk's raw bytes, and returns new chunk bytes.
CORRUPT: dict[str, Callable[[bytes, bytes], bytes]] = {
    "truncated": lambda frame, raw: frame[: len(frame) // 2],
    "garbage": lambda frame, raw: np.random.default_rng(1).bytes(len(frame)),
    "bad_magic": lambda frame, raw: b"\x00" + frame[1:],
    "trailing_garbage": lambda frame, raw: frame + b"\x01\x02\x03",
    "empty": lambda frame, raw: b"",
    "two_frames_too_long": lambda frame, raw: frame + frame,
    "wrong_content_size": lambda frame, raw: Zstd(level=3).encode(raw[:-2]),
    "bad_checksum": lambda frame, raw: frame[:-1] + bytes([frame[-1] ^ 0xFF]),
    "payload_bit_flip": lambda frame, raw: _flip_middle(frame),
}

UNUSUAL: dict[str, Callable[[bytes, bytes], bytes]] = {
    "two_frames": lambda frame, raw: (
        Zstd(level=3).encode(raw[:1000]) + Zstd(level=3, checksum=True).encode(raw[1000:])
    ),
    "skippable_frame": lambda frame, raw: _skippable(b"metadata") + frame,
    "no_content_size": lambda frame, raw: _frame_without_size(raw),
}


def _replace_first_chunk(
    path: Path, data: np.ndarray, make: Callable[[bytes, bytes], bytes]
) -> None:
    chunk_file = path / "c" / "0" / "0" / "0"
    raw = np.ascontiguousarray(data[: CHUNK[0], : CHUNK[1], : CHUNK[2]]).tobytes()
    chunk_file.write_bytes(make(chunk_file.read_bytes(), raw))


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_corrupt_chunk_raises_and_next_read_is_correct(
    cp: object, tmp_path: Path, good_array: Callable[[], None], case: str
) -> None:
    data = oct_like((32, 32, 32), seed=3)
    write_cpu(tmp_path / "a.zarr", data, CHUNK, level=3, checksum=True)
    _replace_first_chunk(tmp_path / "a.zarr", data, CORRUPT[case])
    with pytest.raises(ChunkDecodeError, match=r"batch item 0 of 8 \(chunk shape \(16, 16, 16\)"):
        read_gpu(tmp_path / "a.zarr")
    good_array()
    # The other chunks of the same array still read correctly.
    with gpu_zarr():
        rest = zarr.open_array(tmp_path / "a.zarr", mode="r")[16:, :, :]
    np.testing.assert_array_equal(rest.get(), data[16:])


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(UNUSUAL))
def test_unusual_valid_chunk_is_decoded_on_the_cpu(
    cp: object, tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    caplog.set_level(logging.DEBUG, logger=CODEC_LOGGER)
    data = oct_like((32, 32, 32), seed=8)
    write_cpu(tmp_path / "a.zarr", data, CHUNK, level=3)
    _replace_first_chunk(tmp_path / "a.zarr", data, UNUSUAL[case])
    np.testing.assert_array_equal(read_gpu(tmp_path / "a.zarr"), data)
    assert nvcomp_counts(caplog) == (7, 1)


def _items(buffer: Callable[[bytes], object], pieces: list[np.ndarray]) -> list[tuple]:
    """``(zstd frame, spec, name)`` items of uint16 pieces, the frames made by ``buffer``."""
    from zarr.core.array_spec import ArrayConfig, ArraySpec
    from zarr.core.buffer import gpu
    from zarr.core.dtype import parse_dtype

    prototype = gpu.buffer_prototype  # decoded chunks land on the device
    return [
        (
            buffer(Zstd(level=3, checksum=True).encode(piece)),
            ArraySpec(
                shape=piece.shape,
                dtype=parse_dtype(np.uint16, zarr_format=3),
                fill_value=0,
                config=ArrayConfig.from_dict({}),
                prototype=prototype,
            ),
            f"c/{i}",
        )
        for i, piece in enumerate(pieces)
    ]


def test_arrived_on_host_for_host_bytes() -> None:
    from zarr.core.buffer import cpu

    items = [(cpu.Buffer.from_bytes(b"\x01\x02"), None, "c/0")]
    assert arrived_on_host(items)  # type: ignore[arg-type]


@pytest.mark.gpu
def test_prepared_and_raw_chunks_decode_in_one_call(
    cp: object, caplog: pytest.LogCaptureFixture
) -> None:
    """A merged call can hold chunks prepared as their call arrived (host bytes) beside raw
    ones (device bytes, staged in the call): every chunk decodes to its own values."""
    import asyncio

    import cupy
    from zarr.core.buffer import cpu, gpu

    caplog.set_level(logging.DEBUG, logger=CODEC_LOGGER)
    pieces = [oct_like((n,), seed=n) for n in (5000, 7, 65536, 1200)]
    host = _items(cpu.Buffer.from_bytes, pieces[:2])
    device = _items(lambda b: gpu.Buffer(cupy.frombuffer(b, np.uint8)), pieces[2:])
    assert arrived_on_host(host) and not arrived_on_host(device)
    assert not arrived_on_host(host + device)

    async def both() -> list:
        return await decode_items([*await prepare_items(host), device[0], device[1]])

    decoded = asyncio.run(both())
    for buffer, piece in zip(decoded, pieces, strict=True):
        np.testing.assert_array_equal(cupy.asnumpy(buffer.as_array_like()).view(np.uint16), piece)
    assert nvcomp_counts(caplog) == (4, 0)


@pytest.mark.gpu
def test_xxh64_kernel_matches_zstd_checksums(cp: object) -> None:
    import cupy

    from linumpy.gpu._xxhash import TILED_BYTES, xxh64_batch

    rng = np.random.default_rng(12)
    sizes = [0, 1, 3, 4, 7, 8, 31, 32, 33, 63, 64, 100, 4096, 100_003, 8192 + 40]
    sizes += [TILED_BYTES - 1, TILED_BYTES + 7, 4 * 2**20 + 5]
    pieces = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    offsets, total = _layout(sizes)
    host = np.zeros(total, dtype=np.uint8)
    for offset, piece in zip(offsets, pieces, strict=True):
        host[offset : offset + piece.size] = piece
    stream = cupy.cuda.Stream()
    hashes = xxh64_batch(cupy.asarray(host), offsets, sizes, stream=stream)
    stream.synchronize()
    for piece, digest in zip(pieces, hashes.get(), strict=True):
        frame = Zstd(level=1, checksum=True).encode(piece)
        assert int(digest) & 0xFFFFFFFF == zstd.inspect_chunk(frame, key="x").checksum
    assert int(hashes[0]) == 0xEF46DB3751D8E999  # XXH64 of no bytes, seed 0
    # below TILED_BYTES the other kernel hashes them: the same digests
    small = [i for i, n in enumerate(sizes) if n < TILED_BYTES]
    alone = xxh64_batch(
        cupy.asarray(host), [offsets[i] for i in small], [sizes[i] for i in small], stream=stream
    )
    stream.synchronize()
    np.testing.assert_array_equal(alone.get(), hashes.get()[small])
    with pytest.raises(ValueError, match="multiple of 8"):
        xxh64_batch(cupy.asarray(host), [4], [8], stream=stream)


@pytest.mark.gpu
def test_one_chunk_per_call_pipeline(
    cp: object, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """zarr's FusedCodecPipeline calls _encode_single and _decode_single, one chunk at a time."""
    import cupy

    caplog.set_level(logging.DEBUG, logger=CODEC_LOGGER)
    data = oct_like((20, 20, 20))
    fused = {"codec_pipeline.path": "zarr.core.codec_pipeline.FusedCodecPipeline"}
    with gpu_zarr(), zarr.config.set(fused):
        arr = zarr.create_array(
            tmp_path / "a.zarr",
            shape=data.shape,
            chunks=(8, 8, 8),
            dtype=data.dtype,
            compressors=NvcompZstdCodec(checksum=True),
        )
        arr[...] = cupy.asarray(data)
        result = zarr.open_array(tmp_path / "a.zarr", mode="r")[...]
    np.testing.assert_array_equal(result.get(), data)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a.zarr", mode="r")[...], data)
    assert nvcomp_counts(caplog) == (27, 0)
