"""Levels written from level 0's blocks equal the pyramid built from level 0 as stored."""

from __future__ import annotations

from pathlib import Path

import dask.array as da
import numpy as np
import pytest

from linumpy.io import OmeZarrWriter
from linumpy.io.dask_write import write_pyramid
from linumpy.io.levels import store_levels
from linumpy.parallel import Cluster


def _writer(path: Path, shape: tuple[int, ...], dtype: str) -> OmeZarrWriter:
    return OmeZarrWriter(
        path, shape, dtype, voxel_size=(1,) * len(shape), chunks=(4, 8, 8), n_levels=3
    )


def _volume(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    values = np.random.default_rng(5).integers(0, 4000, shape)
    return values.astype(dtype)


@pytest.mark.parametrize("dtype", ["uint16", "float32"])
@pytest.mark.parametrize("shape", [(8, 40, 48), (9, 41, 47)])
def test_levels_from_blocks_equal_the_pyramid_from_storage(
    tmp_path: Path, dtype: str, shape: tuple[int, ...]
) -> None:
    volume = _volume(shape, dtype)
    fused = _writer(tmp_path / "fused.ome.zarr", shape, dtype)
    rest = store_levels(da.from_array(volume, chunks=(4, 16, 16)), fused.arrays)
    assert rest == fused.arrays[2:]  # levels 1 and 2 came from the blocks
    write_pyramid(rest)
    plain = _writer(tmp_path / "plain.ome.zarr", shape, dtype)
    plain.array[...] = volume
    write_pyramid(plain.arrays)
    for ours, theirs in zip(fused.arrays, plain.arrays):
        np.testing.assert_array_equal(ours[...], theirs[...])


def test_levels_odd_blocks_cannot_halve_are_built_from_storage(tmp_path: Path) -> None:
    volume = _volume((9, 40, 48), "uint16")

    def writer(name: str) -> OmeZarrWriter:
        return OmeZarrWriter(tmp_path / name, volume.shape, "uint16", voxel_size=(1, 1, 1),
                             chunks=(3, 5, 5), shards=None, n_levels=3)  # fmt: skip

    odd = writer("o.ome.zarr")
    rest = store_levels(da.from_array(volume, chunks=(3, 10, 10)), odd.arrays)
    assert rest == odd.arrays  # a 3-plane block's mean would pair planes of two blocks
    write_pyramid(rest)
    plain = writer("p.ome.zarr")
    plain.array[...] = volume
    write_pyramid(plain.arrays)
    for ours, theirs in zip(odd.arrays, plain.arrays):
        np.testing.assert_array_equal(ours[...], theirs[...])


def test_odd_blocks_or_a_memory_limit_write_level_0_alone(tmp_path: Path) -> None:
    volume = _volume((8, 40, 48), "uint16")
    writer = _writer(tmp_path / "a.ome.zarr", volume.shape, "uint16")
    limited = Cluster(memory_limit=2**30)
    assert store_levels(da.from_array(volume, chunks=(4, 16, 16)), writer.arrays,
                        cluster=limited) == writer.arrays  # fmt: skip
    np.testing.assert_array_equal(writer.array[...], volume)
    assert not np.any(writer.arrays[1][...])  # level 1 left for write_pyramid


@pytest.mark.gpu
def test_levels_from_device_blocks(tmp_path: Path) -> None:
    import cupy

    volume = _volume((8, 40, 48), "float32")
    writer = _writer(tmp_path / "g.ome.zarr", volume.shape, "float32")
    blocks = da.from_array(cupy.asarray(volume), chunks=(4, 16, 16), asarray=False)
    rest = store_levels(blocks, writer.arrays, gpu=True)
    write_pyramid(rest, gpu=True)
    plain = _writer(tmp_path / "p.ome.zarr", volume.shape, "float32")
    plain.array[...] = volume
    write_pyramid(plain.arrays)
    for ours, theirs in zip(writer.arrays, plain.arrays):
        np.testing.assert_allclose(ours[...], theirs[...], rtol=1e-6)
