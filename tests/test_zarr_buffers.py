"""HostBytes and DeviceNDBuffer: zarr's buffers inside gpu_zarr_context.

CPU tests use HostBytes as zarr's byte buffer with zarr's own numpy arrays (every store, codec and
shard path that makes or joins byte buffers goes through it); `gpu` tests add device memory.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, ZstdCodec
from zarr.core.buffer import cpu, default_buffer_prototype
from zarr.core.sync import sync

from linumpy.gpu.zarr_buffers import DeviceNDBuffer, HostBytes, host_bytes_config


def speckle(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (1000 * rng.exponential(1.0, shape) + 5).astype(np.uint16)


def new_array(
    path: Path, data: np.ndarray, shards: tuple[int, ...] | None, compressor: str | None
) -> zarr.Array:
    """A new array of ``data``'s shape and dtype in chunks of 16^3, under the current config."""
    compressors = {"zstd": ZstdCodec(level=3), "blosc": BloscCodec(), None: None}[compressor]
    return zarr.create_array(
        path,
        shape=data.shape,
        chunks=(16, 16, 16),
        shards=shards,
        dtype=data.dtype,
        compressors=compressors,
    )


def test_host_bytes_join_compare_and_convert() -> None:
    first = HostBytes.from_bytes(b"abc")
    joined = first + HostBytes.from_array_like(np.frombuffer(b"de", "B"))
    assert joined.to_bytes() == b"abcde" and isinstance(joined, HostBytes)
    assert joined.combine([HostBytes.from_bytes(b"f")]).to_bytes() == b"abcdef"
    assert joined[1:3].to_bytes() == b"bc" and len(joined) == 5
    assert HostBytes.from_buffer(cpu.Buffer.from_bytes(b"xy")).to_bytes() == b"xy"
    assert isinstance(HostBytes.from_buffer(first).as_numpy_array(), np.ndarray)


def test_device_ndbuffer_leaves_host_arrays_on_the_host() -> None:
    """A shard index decoded from host bytes is read back without a trip through the device."""
    host = np.arange(12, dtype=np.uint64)
    buffer = DeviceNDBuffer.from_ndarray_like(host).reshape((3, 4))
    assert isinstance(buffer.as_numpy_array(), np.ndarray)
    assert np.shares_memory(buffer.as_numpy_array(), host)
    assert DeviceNDBuffer.from_numpy_array([1, 2]).as_numpy_array().tolist() == [1, 2]
    buffer[0, 1] = 99
    assert host[1] == 99
    with pytest.raises(TypeError, match="object dtype"):
        DeviceNDBuffer(np.array([None]))


def test_host_bytes_config_selects_the_classes() -> None:
    with zarr.config.set(host_bytes_config()):
        prototype = default_buffer_prototype()
        assert prototype.buffer is HostBytes and prototype.nd_buffer is DeviceNDBuffer
    assert default_buffer_prototype().buffer is cpu.Buffer


@pytest.mark.parametrize("shards", [None, (32, 32, 32)])
@pytest.mark.parametrize("compressor", ["zstd", "blosc", None])
def test_zarr_round_trips_through_host_bytes(
    tmp_path: Path, shards: tuple[int, ...] | None, compressor: str | None
) -> None:
    """zarr writes and reads with HostBytes as its byte buffer (numpy arrays), files readable by
    plain zarr and equal to the data."""
    data = speckle((48, 40, 64))
    host = {"buffer": host_bytes_config()["buffer"]}
    with zarr.config.set(host):
        array = new_array(tmp_path / "a.zarr", data, shards, compressor)
        array[...] = data
        array[3:20, 5, 7:40] = 9  # partial chunk and shard writes read what is stored
        data[3:20, 5, 7:40] = 9
        np.testing.assert_array_equal(zarr.open_array(tmp_path / "a.zarr", mode="r")[...], data)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a.zarr", mode="r")[...], data)


# --- GPU ------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_host_bytes_keep_device_memory_until_asked() -> None:
    import cupy

    device = HostBytes.from_array_like(cupy.arange(4, dtype=cupy.uint8))
    assert isinstance(device.as_array_like(), cupy.ndarray)
    joined = device + HostBytes.from_array_like(cupy.full(2, 7, dtype=cupy.uint8))
    assert isinstance(joined.as_array_like(), cupy.ndarray)  # joined on the device
    mixed = joined + HostBytes.from_bytes(b"\x08")
    assert isinstance(mixed.as_array_like(), np.ndarray)
    assert mixed.to_bytes() == bytes([0, 1, 2, 3, 7, 7, 8])


@pytest.mark.gpu
def test_device_ndbuffer_creates_device_arrays_and_keeps_host_ones() -> None:
    import cupy

    host = DeviceNDBuffer(np.arange(6, dtype=np.uint16))
    assert isinstance(host.as_ndarray_like(), np.ndarray)  # a shard index stays on the host
    assert isinstance(DeviceNDBuffer.create(shape=(2,), dtype="u2").as_ndarray_like(), cupy.ndarray)
    device = DeviceNDBuffer.empty((6,), np.uint16)
    device[:] = DeviceNDBuffer(np.full(6, 3, dtype=np.uint16))  # a host value into device memory
    assert isinstance(device.as_ndarray_like(), cupy.ndarray)
    assert device.as_numpy_array().tolist() == [3] * 6
    left = DeviceNDBuffer(np.zeros(6, dtype=np.uint16))
    left[2:4] = cupy.full(2, 5, dtype=cupy.uint16)  # a device value into a host array
    assert left.as_numpy_array().tolist() == [0, 0, 5, 5, 0, 0]


@pytest.mark.gpu
@pytest.mark.parametrize("shards", [None, (32, 32, 32)])
@pytest.mark.parametrize("compressor", ["zstd", "blosc", None])
def test_gpu_zarr_context_reads_and_writes_cupy_without_slow_copies(
    tmp_path: Path, shards: tuple[int, ...] | None, compressor: str | None
) -> None:
    """Inside gpu_zarr_context a store's bytes stay on the host, reads return cupy arrays, cupy
    writes land as files plain zarr reads, and zarr warns of no slow copy path on the way."""
    import cupy

    from linumpy.gpu.zarr_context import gpu_zarr_context

    data = speckle((48, 40, 64), seed=3)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*slow copy.*")
        with gpu_zarr_context():
            assert default_buffer_prototype().buffer is HostBytes
            array = new_array(tmp_path / "a.zarr", data, shards, compressor)
            array[...] = cupy.asarray(data)
            array[3:20, 5, 7:40] = cupy.full((17, 33), 9, dtype=cupy.uint16)
            data[3:20, 5, 7:40] = 9
            read = zarr.open_array(tmp_path / "a.zarr", mode="r")[...]
            assert isinstance(read, cupy.ndarray)
            store = zarr.open_array(tmp_path / "a.zarr").store_path.store
            raw = sync(store.get("c/0/0/0", default_buffer_prototype()))
            assert isinstance(raw, HostBytes) and isinstance(raw.as_array_like(), np.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(read), data)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a.zarr", mode="r")[...], data)
