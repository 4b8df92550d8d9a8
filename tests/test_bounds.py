"""Hostile or mistaken metadata and frames are refused before they cost memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from numcodecs import Zstd
from zarr_layouts import without_content_size

from linumpy.errors import ChunkDecodeError, HostMemoryError, LinumpyError
from linumpy.io import read_volume
from linumpy.io.engine.codecs import zstd


def test_huge_declared_shape_is_refused_before_allocating(tmp_path: Path) -> None:
    # 512 TiB: opened (under the 8 PiB that metadata may declare), refused by the memory check
    zarr.create_array(tmp_path / "a.zarr", shape=(2**16,) * 3, chunks=(64,) * 3, dtype="uint16")
    with pytest.raises(HostMemoryError, match=r"shape \(65536, 65536, 65536\)") as info:
        read_volume(tmp_path / "a.zarr")
    assert isinstance(info.value, MemoryError) and isinstance(info.value, LinumpyError)
    assert "TiB of host memory" in str(info.value)
    # 2 EiB: refused as corrupt metadata when opened, naming the file
    zarr.create_array(tmp_path / "b.zarr", shape=(2**20,) * 3, chunks=(64,) * 3, dtype="uint16")
    with pytest.raises(LinumpyError, match=r"b.zarr/zarr.json: shape .* holds 2048.0 PiB"):
        read_volume(tmp_path / "b.zarr")


def test_huge_declared_chunks_are_refused_for_a_small_region(tmp_path: Path) -> None:
    zarr.create_array(tmp_path / "a.zarr", shape=(2**16,) * 3, chunks=(2**16,) * 3, dtype="uint16")
    with pytest.raises(HostMemoryError, match="chunks of shape .65536, 65536, 65536.*rechunk"):
        read_volume(tmp_path / "a.zarr", region=(slice(0, 8),) * 3)


def test_a_region_of_too_many_chunks_is_refused_while_planning(tmp_path: Path) -> None:
    zarr.create_array(tmp_path / "a.zarr", shape=(2**10,) * 3, chunks=(1, 1, 1), dtype="uint8")
    with pytest.raises(HostMemoryError, match="planning a region of 1073741824 chunks"):
        read_volume(tmp_path / "a.zarr")


def test_frame_without_content_size_stops_at_the_chunk_size(tmp_path: Path) -> None:
    bomb = without_content_size(Zstd().encode(np.zeros(2**30, np.uint8)))  # 1 GiB of zeros
    assert len(bomb) < 2**16
    with pytest.raises(ChunkDecodeError, match="too small"):
        zstd.decode(bomb, key="c/0/0/0", expected_size=16**3 * 2)
    array = zarr.create_array(tmp_path / "a.zarr", shape=(16, 16, 16), chunks=(16, 16, 16),
                              dtype="uint16")  # fmt: skip
    array[...] = 1
    (tmp_path / "a.zarr" / "c" / "0" / "0" / "0").write_bytes(bomb)
    with pytest.raises(ChunkDecodeError, match="c/0/0/0"):
        read_volume(tmp_path / "a.zarr")
