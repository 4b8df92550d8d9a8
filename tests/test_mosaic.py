"""Mosaic math: tile transform, phase correlation, layout estimation, blending, file pipeline."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import ndimage

from linumpy.errors import LinumpyError
from linumpy.io import downsample_mean, read_omezarr, read_volume, save_omezarr
from linumpy.mosaic.attrs import mosaic_tile_shape
from linumpy.mosaic.demo import generate_demo_mosaic, make_demo_data
from linumpy.mosaic.pipeline import (
    average_intensity_projection,
    convert_to_omezarr,
    estimate_transform_omezarr,
    stitch_omezarr,
)
from linumpy.mosaic.registration import (
    PairMeasurement,
    estimate_transform,
    fit_transform,
    measure_pair,
)
from linumpy.mosaic.stitch import blending_weights, stitch
from linumpy.mosaic.transform import TileTransform

# seed 2: a demo whose central tiles carry texture across the overlaps these tests measure
SMALL = {"grid_shape": (4, 5), "tile_shape": (16, 64, 64), "seed": 2}


@pytest.fixture(scope="module")
def demo():
    return generate_demo_mosaic(**SMALL)


@pytest.fixture(scope="module")
def demo_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("demo") / "mosaic.ome.zarr"
    make_demo_data(path, **SMALL)
    return path


def _texture(shape, seed=0, sigma=1.5):
    rng = np.random.default_rng(seed)
    return ndimage.gaussian_filter(rng.standard_normal(shape), sigma)


# --- TileTransform ------------------------------------------------------------------------------


def _transform(**changes) -> TileTransform:
    fields = {
        "matrix": ((50.0, -2.0), (1.5, 51.0)),
        "offset": (0.0, 0.0),
        "tile_shape": (64, 64),
        "grid_shape": (3, 4),
    }
    fields.update(changes)
    return TileTransform(**fields)


def test_transform_positions_and_normalization() -> None:
    transform = _transform()
    positions = transform.positions()
    assert positions.shape == (3, 4, 2)
    np.testing.assert_allclose(positions[2, 3], [2 * 50 - 3 * 2, 2 * 1.5 + 3 * 51])
    normalized = transform.normalized()
    np.testing.assert_allclose(normalized.positions().reshape(-1, 2).min(axis=0), 0.0)
    assert normalized.matrix == transform.matrix
    with pytest.raises(LinumpyError, match="negative"):
        transform.output_shape()
    height, width = normalized.output_shape()
    top = normalized.pixel_positions().reshape(-1, 2).max(axis=0)
    assert (height, width) == (top[0] + 64, top[1] + 64)
    assert normalized.overlap() == (14, 13)


def test_transform_round_trip(tmp_path) -> None:
    transform = _transform(offset=(3.25, 0.5))
    assert TileTransform.from_dict(json.loads(json.dumps(transform.to_dict()))) == transform
    transform.save(tmp_path / "t.json")
    assert TileTransform.load(tmp_path / "t.json") == transform
    assert transform.max_position_error(transform) == 0.0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"matrix": ((1.0, 2.0), (2.0, 4.0))}, "singular"),
        ({"matrix": ((1.0, 2.0, 3.0), (2.0, 4.0))}, "2x2"),
        ({"offset": (float("nan"), 0.0)}, "offset"),
        ({"tile_shape": (0, 64)}, "tile shape"),
        ({"grid_shape": (3,)}, "grid shape"),
    ],
)
def test_transform_validation(change, message) -> None:
    with pytest.raises(LinumpyError, match=message):
        _transform(**change)


def test_transform_load_errors_name_the_file(tmp_path) -> None:
    with pytest.raises(LinumpyError, match="missing.json"):
        TileTransform.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(LinumpyError, match="bad.json"):
        TileTransform.load(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"format": "something-else"}')
    with pytest.raises(LinumpyError, match="not a linumpy tile transform"):
        TileTransform.load(tmp_path / "other.json")


# --- registration -------------------------------------------------------------------------------


def phase_correlation(fixed, moving):
    """The shift of ``fixed`` from ``moving`` by the registration's phase correlation."""
    from linumpy.mosaic.phase_correlation import DEFAULT_BAND, refined_shifts, whitened_spectrum

    product = (
        whitened_spectrum(fixed, DEFAULT_BAND) * whitened_spectrum(moving, DEFAULT_BAND).conj()
    )
    return refined_shifts(product[None], 100)[0]


def test_phase_correlation_integer_shift() -> None:
    image = _texture((64, 80))
    shift = phase_correlation(np.roll(image, (3, -5), axis=(0, 1)), image)
    np.testing.assert_allclose(shift, [3, -5], atol=0.02)


def test_phase_correlation_subpixel_shift() -> None:
    image = _texture((96, 96), sigma=2.0)
    moved = ndimage.fourier_shift(np.fft.fft2(image), (1.3, -2.6))
    shift = phase_correlation(np.fft.ifft2(moved).real, image)
    np.testing.assert_allclose(shift, [1.3, -2.6], atol=0.05)


def test_registration_needs_equal_2d_images() -> None:
    with pytest.raises(LinumpyError, match="2D images of one shape"):
        measure_pair(np.zeros((8, 8)), np.zeros((8, 9)))


@pytest.mark.parametrize("displacement", [(2.3, 51.6), (-3.7, 49.2), (50.4, 1.8)])
def test_measure_pair_recovers_subpixel_displacement(displacement) -> None:
    canvas = _texture((200, 200), sigma=1.2)
    a = canvas[20:84, 20:84]
    moved = ndimage.shift(canvas, (-displacement[0], -displacement[1]), order=3)
    b = moved[20:84, 20:84]  # b[y, x] = canvas[20 + y + dy, 20 + x + dx]
    axis = 0 if abs(displacement[0]) > abs(displacement[1]) else 1
    measured, score = measure_pair(a, b, axis=axis)
    np.testing.assert_allclose(measured, displacement, atol=0.1)
    assert score > 0.8  # measured at the nearest whole-pixel displacement


def test_measure_pair_of_flat_or_unrelated_tiles_scores_low() -> None:
    flat = np.zeros((64, 64))
    _, score = measure_pair(flat, flat)
    assert score == 0.0
    _, score = measure_pair(_texture((64, 64)), _texture((64, 64), seed=7), axis=1)
    assert score < 0.3


def test_estimate_transform_on_demo_within_half_a_pixel(demo) -> None:
    transform, pairs = estimate_transform(demo.mosaic.mean(axis=0), (64, 64))
    assert transform.grid_shape == (4, 5)
    assert transform.max_position_error(demo.transform) < 0.5
    assert len(pairs) == 4 * 4 + 3 * 5
    # the pairs between empty corner tiles are recognized as unreliable
    assert any(p.score < 0.3 for p in pairs)


def test_estimate_transform_robust_to_missing_tiles(demo) -> None:
    mosaic = demo.mosaic.mean(axis=0)
    for row, col in [(0, 0), (0, 4), (3, 0), (1, 2)]:  # never acquired: zeros
        mosaic[row * 64 : (row + 1) * 64, col * 64 : (col + 1) * 64] = 0
    transform, _ = estimate_transform(mosaic, (64, 64))
    assert transform.max_position_error(demo.transform) < 0.5


def test_estimate_transform_without_tissue_says_so() -> None:
    rng = np.random.default_rng(0)
    noise = rng.random((128, 192))
    with pytest.raises(LinumpyError, match="no reliable"):
        estimate_transform(noise, (64, 64))
    with pytest.raises(LinumpyError, match="not a grid"):
        estimate_transform(noise, (60, 64))


def _shifted_demo_tiles(demo, shift, size=96, margin=32):
    """A 2D tile of the demo's tissue and the same place ``shift`` pixels away,
    ``moved[y, x] = tile[y - dy, x - dx]``: resampled from the tissue around the tile (a real
    shift) and as a circular shift of the tile itself (Fourier)."""
    tissue = demo.tissue.mean(axis=0).astype(np.float64)
    y, x = (n // 2 - size // 2 for n in tissue.shape)
    region = tissue[y - margin : y + size + margin, x - margin : x + size + margin]
    inner = (slice(margin, -margin),) * 2
    tile = region[inner]
    moved = ndimage.shift(region, shift, order=3, mode="nearest")[inner]
    circular = np.fft.ifft2(ndimage.fourier_shift(np.fft.fft2(tile), shift)).real
    return tile, moved, circular


@pytest.mark.parametrize("shift", [(0.0, 0.0), (1.3, -2.6), (-4.45, 0.2), (7.0, 3.75)])
def test_phase_correlation_equals_skimage_on_shifted_demo_tiles(demo, shift) -> None:
    from skimage.registration import phase_cross_correlation

    tile, moved, circular = _shifted_demo_tiles(demo, shift)
    ours = phase_correlation(circular, tile)
    theirs, _, _ = phase_cross_correlation(circular, tile, upsample_factor=100)
    np.testing.assert_allclose(ours, theirs, atol=0.02)
    np.testing.assert_allclose(ours, shift, atol=0.011)
    # A real shift: the tiles' edges do not match, both estimates are biased alike.
    ours = phase_correlation(moved, tile)
    theirs, _, _ = phase_cross_correlation(moved, tile, upsample_factor=100)
    np.testing.assert_allclose(ours, theirs, atol=0.1)
    np.testing.assert_allclose(ours, shift, atol=0.15)


@pytest.mark.parametrize("displacement", [(1.35, 50.6), (49.8, -2.25)])
def test_measure_pair_equals_skimage_on_demo_overlaps(demo, displacement) -> None:
    """Two 64x64 demo tiles ``displacement`` apart: the displacement measure_pair finds, and
    scikit-image's phase_cross_correlation of the overlap it implies, agree."""
    from skimage.registration import phase_cross_correlation

    tissue = demo.tissue.mean(axis=0)
    y, x = (n // 2 - 64 for n in tissue.shape)
    a = tissue[y : y + 64, x : x + 64]
    moved = ndimage.shift(tissue, (-displacement[0], -displacement[1]), order=3)
    b = moved[y : y + 64, x : x + 64]  # b[y, x] = tissue[y + dy, x + dx]
    axis = 0 if abs(displacement[0]) > abs(displacement[1]) else 1
    measured, score = measure_pair(a, b, axis=axis)
    assert score > 0.8
    np.testing.assert_allclose(measured, displacement, atol=0.1)
    coarse = np.round(measured).astype(int)
    dy, dx = coarse
    view_a = a[max(dy, 0) : 64 + min(dy, 0), max(dx, 0) : 64 + min(dx, 0)]
    view_b = b[max(-dy, 0) : 64 + min(-dy, 0), max(-dx, 0) : 64 + min(-dx, 0)]
    residual, _, _ = phase_cross_correlation(view_a, view_b, upsample_factor=100)
    # one measurement on crops is biased towards 0 (their edges correlate at zero shift), which
    # is why measure_pair iterates: it agrees with skimage within that bias
    np.testing.assert_allclose(coarse + residual, measured, atol=0.35)


def test_registration_in_threads_equals_one_thread(demo) -> None:
    aip = demo.mosaic.mean(axis=0)
    _, alone = estimate_transform(aip, (64, 64), threads=1)
    _, threaded = estimate_transform(aip, (64, 64), threads=3)
    assert threaded == alone


def test_registration_threads_follow_the_tile_size(demo, caplog) -> None:
    from linumpy.mosaic.registration import registration_threads

    assert [registration_threads((n, n), 16) for n in (64, 128, 256, 512, 1024)] == [
        1,
        1,
        4,
        16,
        16,
    ]
    assert registration_threads((512, 512), 2) == 2
    with caplog.at_level("INFO", logger="linumpy.mosaic.registration"):
        estimate_transform(demo.mosaic.mean(axis=0), (64, 64))
    assert "registering 31 tile pairs on the host in 1 thread(s)" in caplog.text


def test_an_interrupted_registration_cancels_the_pairs_not_begun() -> None:
    import threading
    import time

    from linumpy.mosaic.registration import _in_threads

    started = []
    lock = threading.Lock()

    def measure(item: int) -> int:
        with lock:
            started.append(item)
        if item == 2:
            raise KeyboardInterrupt
        time.sleep(0.01)
        return item

    with pytest.raises(KeyboardInterrupt):
        _in_threads(measure, list(range(200)), 2, lambda: None)
    assert 2 in started and len(started) < 50
    assert _in_threads(measure, [0, 1, 3], 2, lambda: None) == [0, 1, 3]


@pytest.mark.parametrize(("start", "stop", "size"), [(0, 13, 64), (51, 64, 64), (3, 125, 128)])
def test_resample_span_covers_the_overlap_with_a_margin(start, stop, size) -> None:
    from linumpy.mosaic.pair_geometry import _RESAMPLE_MARGIN, _RESAMPLE_STEP, _resample_span

    span, inner = _resample_span(start, stop, size)
    length = span.stop - span.start
    assert span.start >= 0 and span.stop <= size
    assert length == size or length % _RESAMPLE_STEP == 0
    assert span.start <= max(start - _RESAMPLE_MARGIN, 0)
    assert span.stop >= min(stop + _RESAMPLE_MARGIN, size)
    assert (inner.start + span.start, inner.stop + span.start) == (start, stop)


def test_fit_transform_ignores_outliers_and_low_scores() -> None:
    good_h = [PairMeasurement((0, c), (0, c + 1), (-2.0, 51.0), 0.9) for c in range(3)]
    good_v = [PairMeasurement((0, c), (1, c), (50.0, 1.5), 0.9) for c in range(3)]
    outlier = [PairMeasurement((1, 0), (1, 1), (30.0, 10.0), 0.8)]
    weak = [PairMeasurement((1, 1), (1, 2), (0.0, 5.0), 0.1)]
    transform = fit_transform(good_h + good_v + outlier + weak, (64, 64), (2, 4))
    np.testing.assert_allclose(transform.matrix, [[50.0, -2.0], [1.5, 51.0]])


# --- stitching ----------------------------------------------------------------------------------


def _integer_layout_mosaic(depth=3):
    """A mosaic grid cut from a known canvas at whole-pixel positions."""
    transform = TileTransform(((40.0, 3.0), (-2.0, 44.0)), (0.0, 0.0), (48, 56), (3, 3))
    transform = transform.normalized()
    height, width = transform.output_shape()
    canvas = _texture((depth, height, width)).astype(np.float32) + 5
    mosaic = np.zeros((depth, 3 * 48, 3 * 56), np.float32)
    for row, col in transform.tiles():
        y, x = transform.pixel_positions()[row, col]
        mosaic[:, row * 48 : (row + 1) * 48, col * 56 : (col + 1) * 56] = canvas[
            :, y : y + 48, x : x + 56
        ]
    return mosaic, canvas, transform


@pytest.mark.parametrize("blending", ["none", "average", "linear"])
def test_stitch_reconstructs_the_canvas(blending) -> None:
    mosaic, canvas, transform = _integer_layout_mosaic()
    stitched = stitch(mosaic, transform, blending)
    assert stitched.dtype == np.float32
    covered = np.zeros(canvas.shape[1:], bool)
    for row, col in transform.tiles():
        y, x = transform.pixel_positions()[row, col]
        covered[y : y + 48, x : x + 56] = True
    np.testing.assert_allclose(stitched[:, covered], canvas[:, covered], rtol=1e-5)
    assert (stitched[:, ~covered] == 0).all()
    stitched_2d = stitch(mosaic[1], transform, blending)
    np.testing.assert_array_equal(stitched_2d, stitched[1])


def test_blending_modes_differ_where_tiles_disagree() -> None:
    mosaic, _, transform = _integer_layout_mosaic(depth=1)
    for row, col in transform.tiles():  # give each tile its own offset (a seam)
        mosaic[:, row * 48 : (row + 1) * 48, col * 56 : (col + 1) * 56] += row * 3 + col
    none, average, linear = (stitch(mosaic, transform, b) for b in ("none", "average", "linear"))
    p0, p1 = transform.pixel_positions()[0, :2]
    y, x = p1 + (20, 2)  # inside tiles (0, 0) and (0, 1), near the left edge of (0, 1)
    overlap = (0, y, x)
    a0 = mosaic[0, y - p0[0], x - p0[1]]
    a1 = mosaic[0, 20, 56 + 2]
    assert a0 != a1
    assert none[overlap] == a1  # the later tile wins
    assert average[overlap] == pytest.approx((a0 + a1) / 2, rel=1e-5)
    assert min(a0, a1) - 1e-3 <= linear[overlap] <= max(a0, a1) + 1e-3
    assert abs(linear[overlap] - a1) > abs(linear[overlap] - a0)  # near tile 1's edge


def test_linear_weights_ramp_over_the_overlap() -> None:
    transform = _transform().normalized()
    weights = blending_weights(transform, "linear")
    oy, ox = transform.overlap()
    assert weights.shape == (64, 64) and weights.dtype == np.float32
    assert weights[32, 32] == 1.0
    assert 0 < weights[0, 32] < weights[oy // 2, 32] < weights[oy, 32] == 1.0
    np.testing.assert_array_equal(weights, weights[::-1, ::-1])
    assert (blending_weights(transform, "average") == 1).all()
    with pytest.raises(LinumpyError, match="blending"):
        blending_weights(transform, "cubic")


def test_stitch_checks_the_grid() -> None:
    with pytest.raises(LinumpyError, match="does not hold"):
        stitch(np.zeros((4, 100, 100)), _transform().normalized())


@pytest.mark.parametrize("dtype", [np.uint16, np.float32, np.int8])
def test_downsample_mean_matches_the_writer_pyramid(tmp_path, dtype) -> None:
    data = (np.random.default_rng(0).random((9, 7, 5)) * 100).astype(dtype)
    save_omezarr(data, tmp_path / "p.ome.zarr", voxel_size=(1, 1, 1), n_levels=3)
    level1 = downsample_mean(data)
    level2 = downsample_mean(level1)
    np.testing.assert_allclose(level1, read_omezarr(tmp_path / "p.ome.zarr", 1)[0][...], atol=1e-5)
    np.testing.assert_allclose(level2, read_omezarr(tmp_path / "p.ome.zarr", 2)[0][...], atol=1e-5)
    assert level2.dtype == dtype


# --- file pipeline ------------------------------------------------------------------------------


def test_projection_and_tile_shape_from_file(demo, demo_path) -> None:
    aip = average_intensity_projection(demo_path)
    np.testing.assert_allclose(aip, demo.mosaic.mean(axis=0), rtol=1e-6)
    assert mosaic_tile_shape(demo_path) == (64, 64)
    assert mosaic_tile_shape(demo_path, (32, 32)) == (32, 32)


def test_estimate_transform_from_file(demo, demo_path) -> None:
    transform, _ = estimate_transform_omezarr(demo_path)
    assert transform.max_position_error(demo.transform) < 0.5


def test_stitch_file_slabs_and_pyramid(tmp_path, demo, demo_path) -> None:
    stitch_omezarr(demo_path, tmp_path / "one.ome.zarr", demo.transform, n_levels=3)
    stitch_omezarr(
        demo_path, tmp_path / "float.ome.zarr", demo.transform, n_levels=3, dtype=np.float32
    )
    expected = stitch(demo.mosaic, demo.transform, "linear", dtype=demo.mosaic.dtype)
    for name in ("one", "float"):
        path = tmp_path / f"{name}.ome.zarr"
        level0, voxel_size = read_omezarr(path)
        assert voxel_size == (3.5, 2.5, 2.5)
        if name == "float":
            expected = stitch(demo.mosaic, demo.transform, "linear")
        assert level0.dtype == expected.dtype
        np.testing.assert_array_equal(level0[...], expected)
        level2, voxel_size2 = read_omezarr(path, 2)
        np.testing.assert_allclose(
            level2[...], downsample_mean(downsample_mean(expected)), rtol=1e-5, atol=1e-3
        )
        assert voxel_size2 == (14.0, 10.0, 10.0)
    with pytest.raises(LinumpyError, match="exists"):
        stitch_omezarr(demo_path, tmp_path / "one.ome.zarr", demo.transform)


def test_stitched_demo_matches_the_ground_truth(tmp_path, demo, demo_path) -> None:
    """Stitched with the estimated layout, the image lines up with the tissue it was cut from."""
    transform, _ = estimate_transform_omezarr(demo_path)
    stitch_omezarr(demo_path, tmp_path / "s.ome.zarr", transform, blending="average")
    stitched = read_volume(tmp_path / "s.ome.zarr").mean(axis=0)
    tissue = demo.tissue.mean(axis=0)
    h, w = min(stitched.shape[0], tissue.shape[0]), min(stitched.shape[1], tissue.shape[1])
    aligned = np.corrcoef(stitched[:h, :w].ravel(), tissue[:h, :w].ravel())[0, 1]
    shifted = np.corrcoef(stitched[3:h, 3:w].ravel(), tissue[: h - 3, : w - 3].ravel())[0, 1]
    assert aligned > 0.9
    assert aligned > shifted + 0.02


def test_stitch_2d_projection(tmp_path, demo, demo_path) -> None:
    save_omezarr(demo.mosaic.mean(axis=0), tmp_path / "aip.ome.zarr", voxel_size=(2.5, 2.5))
    stitch_omezarr(tmp_path / "aip.ome.zarr", tmp_path / "s2.ome.zarr", demo.transform)
    expected = stitch(demo.mosaic.mean(axis=0), demo.transform, "linear")
    np.testing.assert_allclose(read_volume(tmp_path / "s2.ome.zarr"), expected, rtol=1e-6)


@pytest.mark.parametrize("kind", ["npy", "tiff", "zarr"])
def test_convert_to_omezarr(tmp_path, kind) -> None:
    import tifffile
    import zarr

    data = (np.random.default_rng(1).random((10, 20, 30)) * 1000).astype(np.uint16)
    if kind == "npy":
        source = tmp_path / "in.npy"
        np.save(source, data)
    elif kind == "tiff":
        source = tmp_path / "in.tif"
        tifffile.imwrite(source, data)
    else:
        source = tmp_path / "in.zarr"
        zarr.create_array(source, data=data, chunks=(5, 20, 30))
    target = tmp_path / "out.ome.zarr"
    convert_to_omezarr(source, target, voxel_size=(2, 1, 1), chunks=(4, 8, 8), n_levels=2)
    array, voxel_size = read_omezarr(target)
    np.testing.assert_array_equal(array[...], data)
    assert array.chunks == (4, 8, 8) and voxel_size == (2.0, 1.0, 1.0)
    np.testing.assert_array_equal(read_omezarr(target, 1)[0][...], downsample_mean(data))


def test_convert_rejects_unreadable_input(tmp_path) -> None:
    (tmp_path / "junk.npy").write_bytes(b"not numpy")
    with pytest.raises(LinumpyError, match="junk.npy"):
        convert_to_omezarr(tmp_path / "junk.npy", tmp_path / "out.ome.zarr")
    (tmp_path / "folder").mkdir()
    with pytest.raises(LinumpyError, match="folder"):
        convert_to_omezarr(tmp_path / "folder", tmp_path / "out.ome.zarr")


# --- GPU ----------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_stitch_and_registration_match_cpu(demo) -> None:
    import cupy

    for blending in ("none", "average", "linear"):
        cpu = stitch(demo.mosaic, demo.transform, blending)
        gpu = stitch(cupy.asarray(demo.mosaic), demo.transform, blending)
        np.testing.assert_allclose(gpu.get(), cpu, rtol=1e-5, atol=1e-5)
    aip = demo.mosaic.mean(axis=0)
    cpu_transform, _ = estimate_transform(aip, (64, 64))
    gpu_transform, _ = estimate_transform(cupy.asarray(aip), (64, 64))
    assert gpu_transform.max_position_error(cpu_transform) < 0.05
    host_transform, _ = estimate_transform(cupy.asarray(aip), (64, 64), on_host=True)
    assert host_transform.max_position_error(cpu_transform) < 1e-9
    np.testing.assert_allclose(
        downsample_mean(cupy.asarray(cpu)).get(), downsample_mean(cpu), rtol=1e-6
    )


@pytest.mark.gpu
def test_gpu_file_pipeline_matches_cpu(tmp_path, demo, demo_path) -> None:
    aip_gpu = average_intensity_projection(demo_path, gpu=True)
    np.testing.assert_allclose(aip_gpu.get(), average_intensity_projection(demo_path), rtol=1e-6)
    stitch_omezarr(demo_path, tmp_path / "cpu.ome.zarr", demo.transform, n_levels=2)
    stitch_omezarr(demo_path, tmp_path / "gpu.ome.zarr", demo.transform, n_levels=2, gpu=True)
    for level in (0, 1):
        cpu = read_omezarr(tmp_path / "cpu.ome.zarr", level)[0][...]
        gpu = read_omezarr(tmp_path / "gpu.ome.zarr", level)[0][...]
        np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
def test_gpu_registration_matches_the_cpu_on_the_device(demo) -> None:
    import cupy

    tile, moved, circular = _shifted_demo_tiles(demo, (1.3, -2.6))
    for fixed in (circular, moved):
        cpu_shift = phase_correlation(fixed, tile)
        gpu_shift = phase_correlation(cupy.asarray(fixed), cupy.asarray(tile))
        assert isinstance(gpu_shift, np.ndarray)
        np.testing.assert_allclose(gpu_shift, cpu_shift, atol=0.011)
    a, b = tile[:, :56], tile[:, 40:]
    cpu_pair = measure_pair(a, b, axis=1)
    gpu_pair = measure_pair(cupy.asarray(a), cupy.asarray(b), axis=1)
    np.testing.assert_allclose(gpu_pair[0], cpu_pair[0], atol=0.011)
    np.testing.assert_allclose(cpu_pair[0], [0, 40], atol=0.011)
    assert gpu_pair[1] == pytest.approx(cpu_pair[1], abs=1e-6)
    aip = demo.mosaic.mean(axis=0)
    cpu_transform, cpu_pairs = estimate_transform(aip, (64, 64))
    gpu_transform, gpu_pairs = estimate_transform(cupy.asarray(aip), (64, 64))
    # pairs without tissue to correlate have near-equal peaks, which rounding may reorder: the
    # fit leaves them out, and the pairs it keeps agree
    kept = [i for i, pair in enumerate(cpu_pairs) if pair.score >= 0.3]
    assert len(kept) >= len(cpu_pairs) // 2
    np.testing.assert_allclose(
        [gpu_pairs[i].displacement for i in kept],
        [cpu_pairs[i].displacement for i in kept],
        atol=0.011,
    )
    assert gpu_transform.max_position_error(demo.transform) < 0.5
