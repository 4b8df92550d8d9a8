"""The synthetic serial-OCT demo mosaic grid: content, layout ground truth, OME-Zarr storage."""

from __future__ import annotations

import re

import numpy as np
import pytest
import zarr

from linumpy.errors import DiskSpaceError, LinumpyError
from linumpy.io import read_omezarr
from linumpy.io.layout import tile_layout
from linumpy.mosaic.attrs import read_linumpy_attrs
from linumpy.mosaic.demo import (
    check_demo_space,
    generate_demo_mosaic,
    make_demo_data,
    read_demo_truth,
)

SMALL = {"grid_shape": (4, 5), "tile_shape": (16, 64, 64)}


@pytest.fixture(scope="module")
def demo():
    return generate_demo_mosaic(**SMALL)


def test_mosaic_grid_shape_and_dtype(demo) -> None:
    assert demo.mosaic.shape == (16, 4 * 64, 5 * 64)
    assert demo.mosaic.dtype == np.uint16
    assert demo.transform.tile_shape == (64, 64)
    assert demo.transform.grid_shape == (4, 5)


def test_same_seed_same_data_other_seed_other_data(demo) -> None:
    again = generate_demo_mosaic(**SMALL)
    np.testing.assert_array_equal(again.mosaic, demo.mosaic)
    other = generate_demo_mosaic(**SMALL, seed=1)
    assert not np.array_equal(other.mosaic, demo.mosaic)


def test_layout_is_an_overlapping_affine_grid_with_rotation(demo) -> None:
    matrix = np.array(demo.transform.matrix)
    step = 64 * 0.8
    np.testing.assert_allclose(np.diag(matrix), step, rtol=0.02)
    assert 0.5 < abs(matrix[1, 0]) < 4  # the rotation moves rows sideways
    assert min(demo.transform.overlap()) > 8
    positions = demo.transform.positions().reshape(-1, 2)
    np.testing.assert_allclose(positions.min(axis=0), 0.0, atol=1e-9)
    # sub-pixel positions: the truth is not a grid of whole pixels
    assert np.abs(positions - np.round(positions)).max() > 0.1


def test_tissue_and_empty_tiles(demo) -> None:
    fraction = demo.tissue_fraction
    assert fraction.min() < 0.05 and fraction.max() > 0.95
    h, w = demo.transform.tile_shape
    means = demo.mosaic.reshape(16, 4, h, 5, w).mean(axis=(0, 2, 4))
    background = means[fraction < 0.01]
    tissue = means[fraction > 0.95]
    assert background.size and tissue.size
    assert tissue.min() > 3 * background.max()
    # the detector noise floor is not zero: an empty tile still has texture
    empty_row, empty_col = np.argwhere(fraction < 0.01)[0]
    tile = demo.mosaic[:, empty_row * h : (empty_row + 1) * h, empty_col * w : (empty_col + 1) * w]
    assert tile.std() > 10


def test_depth_attenuation_and_speckle(demo) -> None:
    h, w = demo.transform.tile_shape
    row, col = np.argwhere(demo.tissue_fraction > 0.95)[0]
    tile = demo.mosaic[:, row * h : (row + 1) * h, col * w : (col + 1) * w].astype(np.float64)
    profile = tile.mean(axis=(1, 2))
    peak = int(profile.argmax())
    assert profile[-1] < 0.6 * profile[peak]  # light decays below the surface
    assert profile[0] < 0.5 * profile[peak]  # above the surface: background
    deep = tile[peak : peak + 4]
    assert deep.std() / deep.mean() > 0.3  # speckle contrast


def test_tissue_ground_truth_matches_tiles(demo) -> None:
    """Each tile is the tissue volume seen from its true position (times speckle and noise)."""
    h, w = demo.transform.tile_shape
    positions = demo.transform.pixel_positions()
    row, col = np.argwhere(demo.tissue_fraction > 0.95)[0]
    y, x = positions[row, col]
    truth = demo.tissue[:, y : y + h, x : x + w].mean(axis=0)
    tile = demo.mosaic[:, row * h : (row + 1) * h, col * w : (col + 1) * w].mean(axis=0)
    assert np.corrcoef(truth.ravel(), tile.ravel())[0, 1] > 0.6
    shifted = demo.tissue[:, y + 6 : y + 6 + h, x + 6 : x + 6 + w].mean(axis=0)
    assert (
        np.corrcoef(shifted.ravel(), tile.ravel())[0, 1]
        < np.corrcoef(truth.ravel(), tile.ravel())[0, 1]
    )


def test_slabs_equal_the_whole() -> None:
    """Every random field is keyed by position: a grid generated in small blocks and thin slabs
    of planes holds the same values as one generated at once, and make_demo_data writes it."""
    options = {"grid_shape": (3, 4), "tile_shape": (20, 48, 40), "seed": 4}
    whole = generate_demo_mosaic(**options)
    slabs = generate_demo_mosaic(**options, slab_bytes=2**16)  # blocks of a tile, few planes
    np.testing.assert_array_equal(slabs.mosaic, whole.mosaic)
    np.testing.assert_array_equal(slabs.tissue, whole.tissue)
    np.testing.assert_array_equal(slabs.tissue_fraction, whole.tissue_fraction)
    assert slabs.transform == whole.transform
    other = generate_demo_mosaic(**{**options, "seed": 5}, slab_bytes=2**16)
    assert not np.array_equal(other.mosaic, whole.mosaic)


def test_written_slabs_equal_the_whole(tmp_path) -> None:
    options = {"grid_shape": (3, 4), "tile_shape": (20, 48, 40), "seed": 4}
    whole = generate_demo_mosaic(**options)
    for index, (slab_bytes, shards) in enumerate(
        ((2**16, "auto"), (2**22, "auto"), (2**16, (20, 96, 80)))
    ):
        path = tmp_path / f"{index}.ome.zarr"
        make_demo_data(path, **options, slab_bytes=slab_bytes, shards=shards)
        np.testing.assert_array_equal(read_omezarr(path)[0][...], whole.mosaic)
    # chunks smaller than a tile, no shards: blocks of a part of a tile
    path = tmp_path / "chunks.ome.zarr"
    make_demo_data(path, **options, chunks=(8, 16, 24), shards=None, slab_bytes=2**14)
    np.testing.assert_array_equal(read_omezarr(path)[0][...], whole.mosaic)


def test_the_same_layout_and_tissue_as_before() -> None:
    """The seed gives the true layout and the tissue's outline of earlier versions: the
    transform and the tissue fraction of each tile are unchanged."""
    demo = generate_demo_mosaic(grid_shape=(2, 3), tile_shape=(8, 32, 32), seed=0)
    np.testing.assert_allclose(
        demo.tissue_fraction, [[0.1689, 0.5566, 0.4004], [0.3145, 0.8848, 0.7275]], atol=1e-4
    )
    np.testing.assert_allclose(
        demo.transform.matrix, [[25.66132787, -0.90090371], [0.67196552, 25.46727489]]
    )


def test_bad_parameters() -> None:
    with pytest.raises(LinumpyError, match="overlap"):
        generate_demo_mosaic(overlap=0.7)
    with pytest.raises(LinumpyError, match="tile shape"):
        generate_demo_mosaic(tile_shape=(4, 64, 64))


def test_written_image_default_layout_zstd_with_truth(tmp_path, demo) -> None:
    path = tmp_path / "mosaic.ome.zarr"
    written = make_demo_data(path, **SMALL)
    array, voxel_size = read_omezarr(path)
    assert array.shape == demo.mosaic.shape
    # the default layout: one tile per shard of inner chunks (a 128 KiB tile is one chunk)
    assert (array.chunks, array.shards) == tile_layout(array.shape, "uint16", (64, 64))
    assert array.chunks == (16, 64, 64) and array.shards is None
    assert [type(c).__name__ for c in array.compressors] == ["ZstdCodec", "Crc32cCodec"]
    assert array.metadata.zarr_format == 3
    assert voxel_size == (3.5, 2.5, 2.5)
    np.testing.assert_array_equal(array[...], written.mosaic)
    np.testing.assert_array_equal(array[...], demo.mosaic)
    assert read_demo_truth(path) == demo.transform
    attrs = read_linumpy_attrs(path)
    assert attrs["mosaic"] == {"tile_shape": [64, 64], "grid_shape": [4, 5]}
    np.testing.assert_allclose(attrs["demo"]["tissue_fraction"], demo.tissue_fraction, atol=1e-4)


def test_large_tiles_are_shards_of_small_chunks(tmp_path) -> None:
    path = tmp_path / "mosaic.ome.zarr"
    demo = make_demo_data(path, grid_shape=(2, 2), tile_shape=(96, 256, 256))
    array = zarr.open_array(path / "0", mode="r")
    assert array.shards == (96, 256, 256) and array.chunks == (32, 128, 128)
    np.testing.assert_array_equal(array[...], demo.mosaic)
    make_demo_data(path, grid_shape=(2, 2), tile_shape=(96, 256, 256), shards=None, overwrite=True)
    tiles = zarr.open_array(path / "0", mode="r")  # one chunk per tile, as other tools write
    assert tiles.shards is None and tiles.chunks == (96, 256, 256)


def test_sharded_and_overwrite(tmp_path) -> None:
    path = tmp_path / "mosaic.ome.zarr"
    make_demo_data(path, grid_shape=(2, 2), tile_shape=(8, 32, 32), shards=(8, 64, 64))
    array = zarr.open_array(path / "0", mode="r")
    assert array.shards == (8, 64, 64) and array.chunks == (8, 32, 32)
    with pytest.raises(LinumpyError, match="exists"):
        make_demo_data(path, grid_shape=(2, 2), tile_shape=(8, 32, 32))
    make_demo_data(path, grid_shape=(2, 3), tile_shape=(8, 32, 32), overwrite=True)
    assert read_omezarr(path)[0].shape == (8, 64, 96)


def test_read_demo_truth_needs_demo_attributes(tmp_path) -> None:
    from linumpy.io import save_omezarr

    path = tmp_path / "plain.ome.zarr"
    save_omezarr(np.zeros((4, 8, 8), np.uint16), path, voxel_size=(1, 1, 1))
    with pytest.raises(LinumpyError, match="ground truth"):
        read_demo_truth(path)


@pytest.mark.gpu
def test_generation_on_the_gpu() -> None:
    import cupy

    demo = generate_demo_mosaic(**SMALL, xp=cupy)
    assert isinstance(demo.mosaic, cupy.ndarray)
    cpu = generate_demo_mosaic(**SMALL)
    assert demo.transform == cpu.transform  # the layout does not depend on the array module
    np.testing.assert_array_equal(demo.tissue_fraction, cpu.tissue_fraction)
    # the noise is drawn on the host: the same data, up to the float rounding of the device
    difference = np.abs(cupy.asnumpy(demo.mosaic).astype(np.int32) - cpu.mosaic.astype(np.int32))
    assert np.mean(difference <= 1) > 0.99, np.mean(difference <= 1)


def test_a_grid_is_written_in_memory_bounded_by_its_slabs(tmp_path) -> None:
    """make_demo_data holds a few blocks and the temporaries of its slabs, never the grid: its
    peak of traced allocations stays a fraction of a grid 12 times its slab budget."""
    import tracemalloc

    grid_shape, tile_shape = (4, 6), (32, 64, 64)
    grid_bytes = 2 * 4 * 6 * 32 * 64 * 64  # 6 MiB, each tile's shard 256 KiB
    slab_bytes = 2**19

    def peak(path, **options) -> int:
        tracemalloc.start()
        try:
            make_demo_data(path, grid_shape=grid_shape, tile_shape=tile_shape, **options)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    make_demo_data(tmp_path / "imports.ome.zarr", grid_shape=(1, 1), tile_shape=(8, 16, 16))
    bounded = peak(tmp_path / "slabs.ome.zarr", slab_bytes=slab_bytes)
    whole = peak(tmp_path / "whole.ome.zarr", slab_bytes=4 * grid_bytes)  # one block: the grid
    assert bounded < 4 * slab_bytes, (bounded, slab_bytes)
    assert bounded < grid_bytes / 3, (bounded, grid_bytes)
    assert bounded < whole / 3, (bounded, whole)


def test_a_grid_the_disk_cannot_hold_is_refused_before_anything_is_written(tmp_path) -> None:
    path = tmp_path / "new" / "mosaic.ome.zarr"
    with pytest.raises(
        DiskSpaceError, match=r"would hold 8\.0 MiB, more than the 976.6 KiB"
    ) as info:
        make_demo_data(path, grid_shape=(2, 2), free_bytes=10**6)
    assert isinstance(info.value, OSError) and str(path) in str(info.value)
    assert not path.exists() and not path.parent.exists()
    needed = check_demo_space(path, (2, 2), (64, 128, 128))
    assert needed == 2 * 4 * 64 * 128 * 128
    make_demo_data(path, grid_shape=(2, 2), tile_shape=(8, 16, 16), free_bytes=needed)
    assert read_omezarr(path)[0].shape == (8, 32, 32)


def test_the_script_refuses_a_grid_larger_than_the_disk_in_one_line(tmp_path, capsys) -> None:
    from linumpy.scripts import linum_make_demo_data

    output = tmp_path / "folder" / "huge.ome.zarr"
    argv = [str(output), "--grid", "100", "100", "--tile-shape", "512", "512", "512"]
    with pytest.raises(SystemExit) as info:
        linum_make_demo_data.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("linum-make-demo-data: error: ") and str(output) in err
    assert re.search(r"would hold 2\.4 TiB, more than the .* free in .*; free space, or ask", err)
    assert not output.exists() and not output.parent.exists()
