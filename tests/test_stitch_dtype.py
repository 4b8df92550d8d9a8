"""The stitched image's dtype, and blending in one pass: the same values as float32 sums over the
whole image (bit for bit in float32), rounded and clipped for an integer dtype."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from linumpy.errors import LinumpyError
from linumpy.io import read_omezarr, read_volume, save_omezarr
from linumpy.mosaic.demo import make_demo_data, read_demo_truth
from linumpy.mosaic.out_of_core import stitch_lazy
from linumpy.mosaic.pipeline import stitch_omezarr
from linumpy.mosaic.stitch import blending_weights, stitch, stitch_dtype, stitch_region
from linumpy.mosaic.transform import TileTransform


def _reference(mosaic: np.ndarray, transform: TileTransform, blending: str) -> np.ndarray:
    """The float32 stitch as sums over the whole image: each tile times its weights added in
    tile order, then times the inverse of the weight sums."""
    h, w = transform.tile_shape
    volume = mosaic[None] if mosaic.ndim == 2 else mosaic
    out = np.zeros((volume.shape[0], *transform.output_shape()), np.float32)
    weight_sum = np.zeros(transform.output_shape(), np.float32)
    weights = blending_weights(transform, blending)
    for row, col in transform.tiles():
        y, x = (int(v) for v in transform.pixel_positions()[row, col])
        tile = volume[:, row * h : (row + 1) * h, col * w : (col + 1) * w]
        if blending == "none":
            out[:, y : y + h, x : x + w] = tile
            continue
        weighted = np.empty(tile.shape, np.float32)
        np.multiply(tile, weights, out=weighted)
        out[:, y : y + h, x : x + w] += weighted
        weight_sum[y : y + h, x : x + w] += weights
    if blending != "none":
        covered = weight_sum > 0
        out *= np.where(covered, 1.0 / np.where(covered, weight_sum, 1.0), 0.0).astype(np.float32)
    return out if mosaic.ndim == 3 else out[0]


def _rounded(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(np.rint(values), info.min, info.max).astype(dtype)


def _grids(seed: int = 0):
    """Skewed layouts, overlapping by various amounts, of tiles of several dtypes."""
    rng = np.random.default_rng(seed)
    for _ in range(6):
        th, tw = (int(n) for n in rng.integers(10, 40, 2))
        rows, cols = (int(n) for n in rng.integers(1, 4, 2))
        matrix = [
            [th * rng.uniform(0.5, 1.05), rng.uniform(-3, 3)],
            [rng.uniform(-3, 3), tw * rng.uniform(0.5, 1.05)],
        ]
        transform = TileTransform(matrix, (0.0, 0.0), (th, tw), (rows, cols)).normalized()
        shape = (2, rows * th, cols * tw)
        yield transform, rng.integers(0, 65536, shape).astype(np.uint16)
        yield transform, rng.integers(-32768, 32768, shape).astype(np.int16)
        floats = (rng.standard_normal(shape) * 100).astype(np.float32)
        floats.flat[::5] = -0.0  # the sums start from 0: -0.0 comes out as 0.0
        yield transform, floats


@pytest.mark.parametrize("blending", ["none", "average", "linear"])
def test_float32_output_is_the_sums_over_the_whole_image_bit_for_bit(blending: str) -> None:
    for transform, mosaic in _grids():
        expected = _reference(mosaic, transform, blending)
        for threads in (1, 3):
            stitched = stitch_region(mosaic, transform, blending, threads=threads)
            assert stitched.dtype == np.float32
            np.testing.assert_array_equal(stitched.view(np.uint32), expected.view(np.uint32))
        np.testing.assert_array_equal(
            stitch(mosaic[0], transform, blending).view(np.uint32), expected[0].view(np.uint32)
        )


@pytest.mark.parametrize("blending", ["none", "average", "linear"])
def test_integer_output_is_the_float32_output_rounded_and_clipped(blending: str) -> None:
    for transform, mosaic in _grids(1):
        if mosaic.dtype.kind == "f":
            continue
        expected = _reference(mosaic, transform, blending)
        for dtype in map(np.dtype, ("uint16", "int16", "uint8", "int32", "uint32")):
            stitched = stitch(mosaic, transform, blending, dtype=dtype)
            assert stitched.dtype == dtype
            np.testing.assert_array_equal(stitched, _rounded(expected, dtype))
        # a region and its bands of rows: the same values
        whole = stitch(mosaic, transform, blending, dtype=np.uint16)
        height, width = transform.output_shape()
        part = stitch_region(
            mosaic, transform, blending, origin=(3, 2), shape=(height - 3, width - 2),
            dtype=np.uint16, threads=2,
        )  # fmt: skip
        np.testing.assert_array_equal(part, whole[:, 3:, 2:])


def test_stitch_dtype_defaults_to_the_tiles_and_refuses_integers_for_floats() -> None:
    assert stitch_dtype(np.uint16) == np.uint16
    assert stitch_dtype(np.dtype(">i2")) == np.int16  # in the native byte order
    assert stitch_dtype(np.float64) == np.float32
    assert stitch_dtype(np.uint16, "float32") == np.float32
    with pytest.raises(LinumpyError, match="dtype uint16 cannot hold a blend of float32"):
        stitch_dtype(np.float32, np.uint16)
    with pytest.raises(LinumpyError, match="--dtype must be one of"):
        stitch_dtype(np.uint16, "float64", option="--dtype")


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("grid") / "grid.ome.zarr"
    make_demo_data(path, grid_shape=(2, 3), tile_shape=(12, 48, 48))
    return path


def test_stitch_omezarr_writes_the_tiles_dtype_unless_asked(tmp_path: Path, grid: Path) -> None:
    transform = read_demo_truth(grid)
    tiles = read_volume(grid)
    expected = _reference(tiles, transform.normalized(), "linear")
    stitch_omezarr(grid, tmp_path / "default.ome.zarr", transform, n_levels=2)
    stitch_omezarr(grid, tmp_path / "f.ome.zarr", transform, n_levels=2, dtype=np.float32)
    stitch_omezarr(grid, tmp_path / "u8.ome.zarr", transform, n_levels=1, dtype="uint8")
    default, _ = read_omezarr(tmp_path / "default.ome.zarr")
    assert default.dtype == tiles.dtype == np.uint16
    np.testing.assert_array_equal(default[...], _rounded(expected, np.dtype(np.uint16)))
    as_float, _ = read_omezarr(tmp_path / "f.ome.zarr")
    np.testing.assert_array_equal(as_float[...].view(np.uint32), expected.view(np.uint32))
    np.testing.assert_array_equal(
        read_volume(tmp_path / "u8.ome.zarr"), _rounded(expected, np.dtype(np.uint8))
    )
    # the default layout for the output's dtype: chunks twice as deep in uint16 as in float32
    assert default.chunks[0] >= as_float.chunks[0]
    assert read_omezarr(tmp_path / "default.ome.zarr", 1)[0].dtype == np.uint16
    lazy = stitch_lazy(grid, transform.normalized(), block=(6, 64, 64))
    assert lazy.dtype == np.uint16
    np.testing.assert_array_equal(lazy.compute(), default[...])


def test_integer_output_of_float_tiles_is_refused(tmp_path: Path) -> None:
    save_omezarr(np.ones((4, 64), np.float32), tmp_path / "aip.ome.zarr", voxel_size=(1, 1))
    transform = TileTransform([[4.0, 0.0], [0.0, 28.0]], (0.0, 0.0), (4, 32), (1, 2))
    with pytest.raises(LinumpyError, match="dtype uint16 cannot hold"):
        stitch_omezarr(tmp_path / "aip.ome.zarr", tmp_path / "s.ome.zarr", transform, dtype="u2")
    assert not (tmp_path / "s.ome.zarr").exists()
    with pytest.raises(LinumpyError, match="float32 tiles"):
        stitch_lazy(tmp_path / "aip.ome.zarr", transform, block=(4, 60), dtype=np.int16)


def _run(module: str, argv: list, capsys) -> tuple[int, str, str]:
    import importlib

    main = importlib.import_module(f"linumpy.scripts.{module}").main
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_scripts_honour_dtype(tmp_path: Path, grid: Path, capsys) -> None:
    transform = tmp_path / "t.json"
    read_demo_truth(grid).save(transform)
    code, _, err = _run("linum_stitch_3d", [grid, transform, tmp_path / "s.ome.zarr"], capsys)
    assert code == 0, err
    assert read_omezarr(tmp_path / "s.ome.zarr")[0].dtype == np.uint16
    argv = [grid, transform, tmp_path / "f.ome.zarr", "--dtype", "float32", "--n-levels", "1"]
    assert _run("linum_stitch_3d", argv, capsys)[0] == 0
    assert read_omezarr(tmp_path / "f.ome.zarr")[0].dtype == np.float32

    # 2D: a uint16 grid keeps its dtype, or gives float32; a float32 one refuses uint16
    save_omezarr(read_volume(grid)[0], tmp_path / "plane.ome.zarr", voxel_size=(1, 1))
    plane = [tmp_path / "plane.ome.zarr", transform]
    assert _run("linum_stitch_2d", [*plane, tmp_path / "p.ome.zarr"], capsys)[0] == 0
    assert read_volume(tmp_path / "p.ome.zarr").dtype == np.uint16
    argv = [*plane, tmp_path / "pf.ome.zarr", "--dtype", "float32"]
    assert _run("linum_stitch_2d", argv, capsys)[0] == 0
    assert read_volume(tmp_path / "pf.ome.zarr").dtype == np.float32
    floats = tmp_path / "float.ome.zarr"
    save_omezarr(read_volume(grid)[0].astype(np.float32), floats, voxel_size=(1, 1))
    argv = [floats, transform, tmp_path / "bad.ome.zarr", "--dtype", "uint16"]
    code, out, err = _run("linum_stitch_2d", argv, capsys)
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and "--dtype uint16 cannot hold" in err
    assert not (tmp_path / "bad.ome.zarr").exists()

    argv = [grid, tmp_path / "job", "--dtype", "float32", "--n-levels", "1"]
    code, _, err = _run("linum_mosaic_pipeline", argv, capsys)
    assert code == 0, err
    assert read_volume(tmp_path / "job" / "stitched.ome.zarr").dtype == np.float32


@pytest.mark.gpu
@pytest.mark.parametrize("blending", ["none", "average", "linear"])
def test_gpu_stitch_in_each_dtype_equals_the_cpu(blending: str) -> None:
    import cupy

    for transform, mosaic in _grids(2):
        for dtype in ("float32", "uint16", "int16", "uint8"):
            if mosaic.dtype.kind == "f" and dtype != "float32":
                continue
            cpu = stitch(mosaic, transform, blending, dtype=dtype)
            gpu = stitch(cupy.asarray(mosaic), transform, blending, dtype=dtype)
            assert gpu.dtype == cpu.dtype
            if dtype == "float32":  # the same float32 operations, within an ulp
                np.testing.assert_allclose(gpu.get(), cpu, rtol=1e-6)
            else:
                np.testing.assert_array_equal(gpu.get(), cpu)


@pytest.mark.gpu
def test_gpu_stitch_omezarr_writes_the_cpu_values(tmp_path: Path, grid: Path) -> None:
    transform = read_demo_truth(grid)
    for dtype in (None, np.float32):
        cpu, gpu = tmp_path / f"cpu-{dtype}.ome.zarr", tmp_path / f"gpu-{dtype}.ome.zarr"
        stitch_omezarr(grid, cpu, transform, n_levels=2, dtype=dtype)
        stitch_omezarr(grid, gpu, transform, n_levels=2, dtype=dtype, gpu=True)
        for level in (0, 1):
            expected = read_omezarr(cpu, level)[0][...]
            on_gpu = read_omezarr(gpu, level)[0][...]
            assert on_gpu.dtype == expected.dtype
            np.testing.assert_allclose(on_gpu, expected, rtol=1e-5, atol=1 if level else 0)


def test_tile_pieces_cover_each_pixel_once_and_add_the_overlaps() -> None:
    from linumpy.mosaic.pieces import tile_pieces

    rng = np.random.default_rng(5)
    for _ in range(20):
        rects = []
        for _ in range(int(rng.integers(1, 9))):
            y0, x0 = (int(n) for n in rng.integers(0, 30, 2))
            rects.append((y0, y0 + int(rng.integers(1, 20)), x0, x0 + int(rng.integers(1, 20))))
        coverage = np.zeros((50, 50), int)
        for y0, y1, x0, x1 in rects:
            coverage[y0:y1, x0:x1] += 1
        owned, added, alone = (
            np.zeros_like(coverage),
            np.zeros_like(coverage),
            np.zeros_like(coverage),
        )
        for pieces in tile_pieces(rects):
            for target, rects_of in (
                (alone, pieces.alone),
                (owned, pieces.first),
                (added, pieces.added),
            ):
                for y0, y1, x0, x1 in rects_of:
                    target[y0:y1, x0:x1] += 1
        np.testing.assert_array_equal(alone, coverage == 1)
        np.testing.assert_array_equal(owned, coverage > 1)
        np.testing.assert_array_equal(added, np.maximum(coverage - 1, 0))
