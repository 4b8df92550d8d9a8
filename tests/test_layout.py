"""The default write layout: the inner-chunk policy, shards of tiles and of whole planes, every
writer's default, the NGFF 0.4 warning, and steps that read no stored chunk twice."""

from __future__ import annotations

import logging
import math
from collections import Counter
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import zarr

import linumpy.io.engine.read as read_engine
from linumpy import settings
from linumpy.io import OmeZarrWriter, open_array, read_volume, save_omezarr
from linumpy.io import layout as layout_module
from linumpy.io.layout import (
    SHARD_BYTES,
    default_layout,
    inner_chunks,
    slab_shards,
    tile_layout,
    tile_shards,
)
from linumpy.mosaic.convert import convert_to_omezarr
from linumpy.mosaic.demo import make_demo_data, read_demo_truth
from linumpy.mosaic.pipeline import (
    average_intensity_projection,
    projection_omezarr,
    stitch_omezarr,
)
from linumpy.parallel import Cluster
from linumpy.scripts import linum_make_demo_data

MIB = 2**20


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [("uint8", (64, 128, 128)), ("uint16", (32, 128, 128)), ("float32", (16, 128, 128))],
)
def test_inner_chunks_hold_about_the_target_bytes(dtype: str, expected: tuple) -> None:
    chunks = inner_chunks((512, 2048, 2048), dtype)
    assert chunks == expected
    assert math.prod(chunks) * np.dtype(dtype).itemsize == MIB
    assert inner_chunks((512, 2048, 2048), "float64") == (8, 128, 128)


def test_inner_chunks_of_images_thin_volumes_channels_and_small_arrays() -> None:
    assert inner_chunks((8192, 8192), "uint16") == (512, 1024)
    assert inner_chunks((8192, 8192), "float32") == (512, 512)
    assert inner_chunks((4, 2048, 2048), "uint16") == (4, 256, 512)  # planes widen instead
    assert inner_chunks((2, 5, 64, 512, 512), "uint16") == (1, 1, 32, 128, 128)  # t, c apart
    assert inner_chunks((3, 512, 512), "uint16", space=(1, 2)) == (1, 512, 512)
    assert inner_chunks((10, 20, 30), "uint16") == (10, 20, 30)  # smaller than one chunk
    for shape in [(1000, 3000, 77), (1, 1, 1), (7, 129, 4097)]:
        chunks = inner_chunks(shape, "uint16")
        assert all(1 <= c <= n for c, n in zip(chunks, shape))
        assert math.prod(chunks) * 2 <= MIB


def test_inner_chunks_follow_the_setting() -> None:
    with settings.set(chunk_bytes=256 * 1024):
        assert inner_chunks((512, 2048, 2048), "uint16") == (8, 128, 128)
    assert inner_chunks((512, 2048, 2048), "uint16", chunk_bytes=4 * MIB) == (128, 128, 128)


def test_chunks_within_a_tile_divide_it() -> None:
    for tile in [(96, 256, 256), (64, 250, 250), (80, 131, 200), (96, 512, 512)]:
        chunks = inner_chunks((tile[0], tile[1] * 3, tile[2] * 4), "uint16", within=tile)
        assert all(t % c == 0 for t, c in zip(tile, chunks)), (tile, chunks)
    assert inner_chunks((96, 768, 768), "uint16", within=(96, 256, 256)) == (32, 128, 128)


def test_slab_shards_are_whole_planes_within_the_shard_size() -> None:
    assert slab_shards((512, 1024, 1024), (32, 128, 128), "uint16") == (64, 1024, 1024)
    for shape, dtype in [((64, 4096, 4096), "float32"), ((300, 1000, 700), "uint16")]:
        chunks = inner_chunks(shape, dtype)
        shards = slab_shards(shape, chunks, dtype)
        assert shards is not None
        assert all(s % c == 0 for s, c in zip(shards, chunks))
        assert math.prod(shards) * np.dtype(dtype).itemsize <= SHARD_BYTES
        # rows are whole first, then planes, then depth
        assert shards[2] >= shape[2]
    assert slab_shards((64, 4096, 4096), (16, 128, 128), "float32")[1:] == (512, 4096)
    assert slab_shards((16, 64, 64), (16, 64, 64), "uint16") is None  # one chunk: no shards
    assert slab_shards((64, 512, 512), (32, 128, 128), "uint16", shard_bytes=MIB) is None


def test_tile_layout_is_one_tile_per_shard() -> None:
    chunks, shards = tile_layout((96, 1024, 1024), "uint16", (256, 256))
    assert chunks == (32, 128, 128) and shards == (96, 256, 256)
    chunks, shards = tile_layout((96, 1536, 1536), "uint16", (512, 512), shard_bytes=16 * MIB)
    assert shards == (32, 512, 512)  # a tile deeper than the shard size: cut in depth
    assert tile_layout((8, 64, 64), "uint16", (32, 32)) == ((8, 32, 32), None)
    with pytest.raises(ValueError, match="do not divide the tile"):
        tile_shards((8, 96, 96), (8, 64, 64), "uint16", (48, 48))


def test_default_layout_keeps_explicit_shapes_and_checks_them() -> None:
    assert default_layout((64, 512, 512), "uint16", chunks=(64, 64, 64), shards=None) == (
        (64, 64, 64),
        None,
    )
    layout = default_layout((64, 512, 512), "uint16", shards=(64, 256, 256))
    assert layout.shards == (64, 256, 256) and all(s % c == 0 for s, c in zip(*layout[::-1]))
    with pytest.raises(ValueError, match="multiples"):
        default_layout((64, 512, 512), "uint16", chunks=(64, 64, 64), shards=(64, 100, 100))
    with pytest.raises(ValueError, match="zarr v3"):
        default_layout((64, 512, 512), "uint16", shards=(64, 256, 256), ngff_version="0.4")
    with pytest.raises(ValueError, match="'auto' or None"):
        default_layout((64, 512, 512), "uint16", shards="tiles")


def _expect_default(array: zarr.Array, dtype: str = "uint16") -> None:
    """An array in the default layout: zarr v3, the policy's chunks, whole-plane shards."""
    shape = tuple(array.shape)
    assert array.metadata.zarr_format == 3
    chunks = inner_chunks(shape, dtype)
    assert array.chunks == chunks
    assert array.shards == slab_shards(shape, chunks, dtype)


def test_every_writer_writes_the_default_layout(tmp_path: Path) -> None:
    volume = np.random.default_rng(0).integers(0, 4000, (64, 256, 384)).astype(np.uint16)
    save_omezarr(volume, tmp_path / "numpy.ome.zarr", voxel_size=(1, 1, 1), n_levels=2)
    _expect_default(open_array(tmp_path / "numpy.ome.zarr"))
    _expect_default(open_array(tmp_path / "numpy.ome.zarr", level=1))
    lazy = da.from_array(volume, chunks=(16, 100, 100))
    save_omezarr(lazy, tmp_path / "dask.ome.zarr", voxel_size=(1, 1, 1), n_levels=2)
    _expect_default(open_array(tmp_path / "dask.ome.zarr"))
    np.testing.assert_array_equal(read_volume(tmp_path / "dask.ome.zarr"), volume)
    with OmeZarrWriter(tmp_path / "w.ome.zarr", volume.shape, np.uint16, voxel_size=(1, 1, 1)) as w:
        w[...] = volume
    _expect_default(w.array)
    np.save(tmp_path / "volume.npy", volume)
    convert_to_omezarr(tmp_path / "volume.npy", tmp_path / "converted.ome.zarr")
    _expect_default(open_array(tmp_path / "converted.ome.zarr"))
    with settings.set(chunk_bytes=64 * 1024):  # the setting reaches every writer
        save_omezarr(volume, tmp_path / "small.ome.zarr", voxel_size=(1, 1, 1))
        assert open_array(tmp_path / "small.ome.zarr").chunks == (2, 128, 128)


def test_demo_stitch_and_projection_outputs(tmp_path: Path) -> None:
    grid = tmp_path / "grid.ome.zarr"
    make_demo_data(grid, grid_shape=(2, 3), tile_shape=(32, 128, 128))
    array = open_array(grid)
    assert array.metadata.zarr_format == 3
    assert array.shards is None and array.chunks == (32, 128, 128)  # a tile is one chunk
    with settings.set(chunk_bytes=256 * 1024):
        make_demo_data(grid, grid_shape=(2, 3), tile_shape=(32, 128, 128), overwrite=True)
    assert open_array(grid).chunks == (8, 128, 128) and open_array(grid).shards == (32, 128, 128)
    linum_make_demo_data.main(
        [str(tmp_path / "cli.ome.zarr"), "--grid", "2", "2", "--tile-shape", "32", "128", "128"]
    )
    assert open_array(tmp_path / "cli.ome.zarr").shards is None  # one small tile is one chunk
    linum_make_demo_data.main(
        [str(tmp_path / "cli.ome.zarr"), "--grid", "2", "2", "--tile-shape", "32", "128", "128"]
        + ["--chunks", "16", "64", "64", "-f"]
    )
    cli = open_array(tmp_path / "cli.ome.zarr")
    assert cli.chunks == (16, 64, 64) and cli.shards == (32, 128, 128)
    linum_make_demo_data.main(
        [str(tmp_path / "cli.ome.zarr"), "--grid", "2", "2", "--tile-shape", "32", "128", "128"]
        + ["--chunks", "16", "64", "64", "--no-shards", "-f"]
    )
    assert open_array(tmp_path / "cli.ome.zarr").shards is None

    transform = read_demo_truth(grid)
    stitch_omezarr(grid, tmp_path / "stitched.ome.zarr", transform, n_levels=2)
    _expect_default(open_array(tmp_path / "stitched.ome.zarr"))  # the tiles' dtype, uint16
    projection_omezarr(grid, tmp_path / "aip.ome.zarr")
    aip = open_array(tmp_path / "aip.ome.zarr")  # a mosaic's projection: one tile per shard
    assert aip.metadata.zarr_format == 3 and (aip.shards or aip.chunks) == (128, 128)
    projection_omezarr(tmp_path / "stitched.ome.zarr", tmp_path / "flat.ome.zarr")
    _expect_default(open_array(tmp_path / "flat.ome.zarr"), "float32")


def test_ngff_04_gets_the_small_chunks_and_a_warning_for_many_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    volume = np.zeros((64, 256, 512), np.uint16)
    with caplog.at_level(logging.WARNING, logger="linumpy"):
        save_omezarr(volume, tmp_path / "a.ome.zarr", voxel_size=(1, 1, 1), ngff_version="0.4")
    array = open_array(tmp_path / "a.ome.zarr")
    assert array.metadata.zarr_format == 2 and array.chunks == (32, 128, 128)
    assert not [r for r in caplog.records if "files" in r.getMessage()]  # 16 files: no warning
    monkeypatch.setattr(layout_module, "V2_WARN_FILES", 10)
    with caplog.at_level(logging.WARNING, logger="linumpy"):
        save_omezarr(volume, tmp_path / "b.ome.zarr", voxel_size=(1, 1, 1), ngff_version="0.4")
    (message,) = [r.getMessage() for r in caplog.records if "files" in r.getMessage()]
    assert "b.ome.zarr" in message and "16 files" in message and "NGFF 0.5" in message


def _count_chunk_reads(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Count every stored chunk the read engine plans to read (file, chunk coordinates)."""
    counts: Counter = Counter()
    plan_region = read_engine.plan_region

    def counting(array, region, settings=None):
        plan = plan_region(array, region, settings)
        for i in np.flatnonzero(plan.stored).tolist():
            counts[plan.files[int(plan.file_index[i])], tuple(plan.coords[i].tolist())] += 1
        return plan

    monkeypatch.setattr(read_engine, "plan_region", counting)
    return counts


@pytest.fixture(scope="module")
def sharded_grid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("layout") / "grid.ome.zarr"
    with settings.set(chunk_bytes=64 * 1024):  # several inner chunks per tile: (16, 32, 64)
        make_demo_data(path, grid_shape=(3, 3), tile_shape=(32, 64, 64), seed=2)
    array = open_array(path)
    assert array.shards == (32, 64, 64) and array.chunks != array.shards
    return path


def test_projection_reads_no_chunk_twice(
    sharded_grid: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = _count_chunk_reads(monkeypatch)
    array = open_array(sharded_grid)
    for cluster in (Cluster(threads=2), Cluster(threads=4, memory_limit=2 * MIB)):
        counts.clear()
        aip = average_intensity_projection(sharded_grid, cluster=cluster)
        stored = math.prod(-(-n // c) for n, c in zip(array.shape, array.chunks))
        assert len(counts) == stored and max(counts.values()) == 1
        np.testing.assert_array_equal(aip, read_volume(sharded_grid).mean(axis=0, dtype=np.float64))


def test_stitch_reads_no_chunk_twice(
    sharded_grid: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = _count_chunk_reads(monkeypatch)
    transform = read_demo_truth(sharded_grid)
    # two slabs of whole planes for two threads (more threads would cut the planes)
    cluster = Cluster(threads=2)
    stitch_omezarr(sharded_grid, tmp_path / "s.ome.zarr", transform, n_levels=1, cluster=cluster)
    source = {k: v for k, v in counts.items() if str(sharded_grid) in k[0]}
    array = open_array(sharded_grid)
    assert len(source) == math.prod(-(-n // c) for n, c in zip(array.shape, array.chunks))
    assert max(source.values()) == 1, Counter(source.values())
