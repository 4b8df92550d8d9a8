"""The synthetic serial-OCT demo mosaic grid: content, layout ground truth, OME-Zarr storage."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from linumpy.errors import LinumpyError
from linumpy.io import read_omezarr
from linumpy.io.layout import tile_layout
from linumpy.mosaic.attrs import read_linumpy_attrs
from linumpy.mosaic.demo import generate_demo_mosaic, make_demo_data, read_demo_truth

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


def test_large_grids_are_generated_in_slabs_of_planes(monkeypatch) -> None:
    """In slabs of planes (the memory of a large grid), the tissue and the layout are those of a
    grid generated at once; only the noise draws differ, not their statistics."""
    from linumpy.mosaic import demo as demo_module

    whole = generate_demo_mosaic(grid_shape=(2, 2), tile_shape=(20, 32, 32), seed=4)
    monkeypatch.setattr(demo_module, "HOST_SLAB_VOXELS", 3 * 60 * 60)  # a few planes per slab
    slabs = generate_demo_mosaic(grid_shape=(2, 2), tile_shape=(20, 32, 32), seed=4)
    assert np.array_equal(slabs.tissue, whole.tissue)
    assert np.array_equal(slabs.tissue_fraction, whole.tissue_fraction)
    assert slabs.mosaic.shape == whole.mosaic.shape and slabs.mosaic.dtype == np.uint16
    assert not np.array_equal(slabs.mosaic, whole.mosaic)
    assert abs(slabs.mosaic.mean() / whole.mosaic.mean() - 1) < 0.02


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
    gpu_mean = float(demo.mosaic.mean())
    assert abs(gpu_mean - float(cpu.mosaic.mean())) < 0.1 * float(cpu.mosaic.mean())


def test_a_grid_is_made_in_memory_bounded_by_its_slabs(monkeypatch) -> None:
    """The host's slabs bound the temporaries: a grid made a few planes at a time, its tissue
    not kept, peaks at a fraction of the memory of one made in one slab with its tissue."""
    import tracemalloc

    from linumpy.mosaic import demo as demo_module

    def peak(**options) -> int:
        tracemalloc.start()
        try:
            generate_demo_mosaic(grid_shape=(2, 2), tile_shape=(40, 64, 64), seed=2, **options)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    whole = peak()
    monkeypatch.setattr(demo_module, "HOST_SLAB_VOXELS", 4 * 120 * 120)
    slabs = peak(keep_tissue=False)
    mosaic_bytes = 40 * 128 * 128 * 2
    assert slabs < whole / 3, (slabs, whole)
    assert slabs < 6 * mosaic_bytes, (slabs, mosaic_bytes)
