"""The linum-* pipeline scripts: help, runs on demo data, overwrite refusal, errors, GPU flag."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from linumpy import cli
from linumpy.io import downsample_mean, read_omezarr, read_volume, save_omezarr
from linumpy.mosaic.demo import read_demo_truth
from linumpy.mosaic.transform import TileTransform

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = [
    "linum_make_demo_data",
    "linum_aip",
    "linum_estimate_transform",
    "linum_stitch_3d",
    "linum_stitch_2d",
    "linum_convert_to_omezarr",
    "linum_mosaic_pipeline",
]
SMALL = ["--grid", "4", "5", "--tile-shape", "16", "64", "64"]


def _main(name: str):
    return importlib.import_module(f"linumpy.scripts.{name}").main


def run_script(name: str, *args: object) -> None:
    _main(name)([str(a) for a in args])


def run_failing(name: str, capsys, *args: object) -> str:
    """Run a script that must stop with exit status 2; return its one-line error."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        run_script(name, *args)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if ": error: " in line]
    # one error line, last (progress bars of work done before the failure may precede it)
    assert len(errors) == 1 and err[-1] == errors[0], err
    return errors[0]


def _no_leftovers(folder: Path) -> None:
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """The small pipeline's outputs: demo grid, its AIP, transform, 3D and 2D stitch."""
    folder = tmp_path_factory.mktemp("small")
    run_script("linum_make_demo_data", folder / "mosaic.ome.zarr", *SMALL)
    run_script("linum_aip", folder / "mosaic.ome.zarr", folder / "mosaic_aip.ome.zarr")
    run_script("linum_estimate_transform", folder / "mosaic.ome.zarr", folder / "t.json")
    run_script(
        "linum_stitch_3d",
        folder / "mosaic.ome.zarr",
        folder / "t.json",
        folder / "stitched.ome.zarr",
        "--n-levels",
        "2",
    )
    run_script(
        "linum_stitch_2d", folder / "mosaic_aip.ome.zarr", folder / "t.json", folder / "s2.ome.zarr"
    )
    return folder


@pytest.mark.parametrize("name", SCRIPTS)
def test_help(name, capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        run_script(name, "--help")
    assert stop.value.code == 0
    out = capsys.readouterr().out
    doc = importlib.import_module(f"linumpy.scripts.{name}").__doc__.strip().splitlines()[0]
    assert doc in out
    for flag in ("--overwrite", "--use-gpu", "--no-use-gpu", "--verbose"):
        assert flag in out


def test_make_demo_pipeline_recovers_the_layout(tmp_path, capsys) -> None:
    """What ``make demo`` runs, at the default size: the layout comes back within half a pixel."""
    mosaic = tmp_path / "mosaic.ome.zarr"
    run_script("linum_make_demo_data", mosaic, "-f")
    run_script("linum_estimate_transform", mosaic, tmp_path / "transform.json", "-f")
    out = capsys.readouterr().out
    assert "ground truth" in out
    transform = TileTransform.load(tmp_path / "transform.json")
    assert transform.max_position_error(read_demo_truth(mosaic)) < 0.5
    run_script(
        "linum_stitch_3d",
        mosaic,
        tmp_path / "transform.json",
        tmp_path / "stitched.ome.zarr",
        "--blending",
        "linear",
        "-f",
    )
    run_script(
        "linum_aip",
        tmp_path / "stitched.ome.zarr",
        tmp_path / "stitched_aip.ome.zarr",
        "--png",
        tmp_path / "stitched_aip.png",
        "-f",
    )
    stitched, _ = read_omezarr(tmp_path / "stitched.ome.zarr")
    assert stitched.shape == (64, *transform.output_shape())
    with Image.open(tmp_path / "stitched_aip.png") as png:
        assert png.size == stitched.shape[:0:-1] and png.mode == "L"
        pixels = np.asarray(png)
    assert pixels.min() == 0 and pixels.max() == 255
    _no_leftovers(tmp_path)


def test_small_pipeline_outputs(small) -> None:
    truth = read_demo_truth(small / "mosaic.ome.zarr")
    transform = TileTransform.load(small / "t.json")
    assert transform.max_position_error(truth) < 0.5
    mosaic = read_volume(small / "mosaic.ome.zarr")
    aip, voxel_size = read_omezarr(small / "mosaic_aip.ome.zarr")
    np.testing.assert_allclose(aip[...], mosaic.mean(axis=0), rtol=1e-6)
    assert voxel_size == (2.5, 2.5) and aip.chunks == (64, 64)  # one chunk per tile, kept
    stitched = read_volume(small / "stitched.ome.zarr")
    stitched_2d = read_volume(small / "s2.ome.zarr")
    assert stitched.shape == (16, *transform.output_shape())
    # the 3D stitch rounds each voxel to uint16: its planes' mean is within 0.5 of the 2D one's
    assert stitched.dtype == np.uint16
    np.testing.assert_allclose(stitched_2d, stitched.mean(axis=0), rtol=0, atol=0.5)
    assert read_omezarr(small / "stitched.ome.zarr", 1)[0].shape == (
        8,
        *(-(-n // 2) for n in stitched.shape[1:]),
    )
    _no_leftovers(small)


def test_the_job_in_one_process_writes_what_the_commands_write(small, tmp_path, capsys) -> None:
    out = tmp_path / "job"
    run_script("linum_mosaic_pipeline", small / "mosaic.ome.zarr", out, "--n-levels", "2", "--png")
    printed = capsys.readouterr().out
    assert f"{out / 'stitched.ome.zarr'}: stitched 20 tiles" in printed
    assert TileTransform.load(out / "transform.json") == TileTransform.load(small / "t.json")
    for level in (0, 1):
        np.testing.assert_array_equal(
            read_omezarr(out / "stitched.ome.zarr", level)[0][...],
            read_omezarr(small / "stitched.ome.zarr", level)[0][...],
        )
    stitched = read_volume(out / "stitched.ome.zarr")
    np.testing.assert_allclose(
        read_volume(out / "stitched_aip.ome.zarr"), stitched.mean(axis=0), rtol=1e-5, atol=1e-4
    )
    with Image.open(out / "stitched_aip.png") as png:
        assert png.size == stitched.shape[:0:-1]
    _no_leftovers(out)
    error = run_failing("linum_mosaic_pipeline", capsys, small / "mosaic.ome.zarr", out)
    assert "transform.json" in error and "-f" in error
    run_script("linum_mosaic_pipeline", small / "mosaic.ome.zarr", out, "-f")
    error = run_failing(
        "linum_mosaic_pipeline", capsys, small / "mosaic_aip.ome.zarr", tmp_path / "two-d"
    )
    assert "3D mosaic grid" in error and "2D" in error


@pytest.mark.parametrize(
    ("name", "inputs", "output"),
    [
        ("linum_make_demo_data", [], "mosaic.ome.zarr"),
        ("linum_aip", ["mosaic.ome.zarr"], "mosaic_aip.ome.zarr"),
        ("linum_estimate_transform", ["mosaic.ome.zarr"], "t.json"),
        ("linum_stitch_3d", ["mosaic.ome.zarr", "t.json"], "stitched.ome.zarr"),
        ("linum_stitch_2d", ["mosaic_aip.ome.zarr", "t.json"], "s2.ome.zarr"),
        ("linum_convert_to_omezarr", ["mosaic_aip.ome.zarr"], "s2.ome.zarr"),
    ],
)
def test_overwrite_refused_without_f(small, capsys, name, inputs, output) -> None:
    before = sorted(p.name for p in (small / output).rglob("*")) if (small / output).is_dir() else 0
    error = run_failing(name, capsys, *[small / i for i in inputs], small / output)
    assert "exists" in error and "-f" in error
    after = sorted(p.name for p in (small / output).rglob("*")) if (small / output).is_dir() else 0
    assert before == after


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("linum_aip", []),
        ("linum_estimate_transform", []),
        ("linum_stitch_3d", ["t.json"]),
        ("linum_stitch_2d", ["t.json"]),
        ("linum_convert_to_omezarr", []),
    ],
)
def test_bad_inputs_give_one_line_errors(tmp_path, small, capsys, name, extra) -> None:
    extra = [small / e for e in extra]
    missing = run_failing(name, capsys, tmp_path / "missing.ome.zarr", *extra, tmp_path / "out")
    assert "missing.ome.zarr" in missing
    (tmp_path / "notes.txt").write_text("not an image")
    assert "notes.txt" in run_failing(name, capsys, tmp_path / "notes.txt", *extra, tmp_path / "o")
    assert not (tmp_path / "out").exists() and not (tmp_path / "o").exists()
    _no_leftovers(tmp_path)


def test_wrong_dimensions_and_bad_transform(tmp_path, small, capsys) -> None:
    error = run_failing(
        "linum_stitch_3d", capsys, small / "mosaic_aip.ome.zarr", small / "t.json", tmp_path / "o"
    )
    assert "3D" in error
    error = run_failing("linum_aip", capsys, small / "mosaic_aip.ome.zarr", tmp_path / "o")
    assert "3D" in error
    (tmp_path / "bad.json").write_text('{"format": "linumpy-tile-transform", "version": 1}')
    error = run_failing(
        "linum_stitch_3d", capsys, small / "mosaic.ome.zarr", tmp_path / "bad.json", tmp_path / "o"
    )
    assert "bad.json" in error
    other = TileTransform(((40.0, 0.0), (0.0, 40.0)), (0.0, 0.0), (32, 32), (2, 2))
    other.save(tmp_path / "other.json")
    error = run_failing(
        "linum_stitch_3d",
        capsys,
        small / "mosaic.ome.zarr",
        tmp_path / "other.json",
        tmp_path / "o",
    )
    assert "grid" in error
    assert "invalid choice" in run_failing(
        "linum_stitch_3d",
        capsys,
        small / "mosaic.ome.zarr",
        small / "t.json",
        tmp_path / "o",
        "--blending",
        "cubic",
    )
    assert "required" in run_failing("linum_aip", capsys)
    _no_leftovers(tmp_path)


def test_failed_run_leaves_no_output(tmp_path, capsys) -> None:
    """A run that fails after starting to write leaves nothing under the final name."""
    save_omezarr(
        np.random.default_rng(0).random((4, 128, 128)).astype(np.float32),
        tmp_path / "noise.ome.zarr",
        voxel_size=(1, 1, 1),
        chunks=(4, 64, 64),
        shards=None,  # tiles of one chunk each, the tile shape read from the chunks
    )
    error = run_failing(
        "linum_estimate_transform", capsys, tmp_path / "noise.ome.zarr", tmp_path / "t.json"
    )
    assert "no reliable" in error
    assert not (tmp_path / "t.json").exists()
    _no_leftovers(tmp_path)


def test_output_path_moves_into_place_only_on_success(tmp_path) -> None:
    final = tmp_path / "result.ome.zarr"
    final.mkdir()
    (final / "old").write_text("previous")
    with pytest.raises(KeyboardInterrupt), cli.output_path(final) as partial:
        partial.mkdir()
        (partial / "half").write_text("half-written")
        raise KeyboardInterrupt
    assert sorted(p.name for p in final.iterdir()) == ["old"]
    with cli.output_path(final) as partial:
        assert partial.name == final.name and partial.parent != final.parent
        partial.mkdir()
        (partial / "new").write_text("complete")
    assert sorted(p.name for p in final.iterdir()) == ["new"]
    _no_leftovers(tmp_path)


def test_convert_script(tmp_path, capsys) -> None:
    data = np.arange(6 * 20 * 24, dtype=np.uint16).reshape(6, 20, 24)
    np.save(tmp_path / "v.npy", data)
    run_script(
        "linum_convert_to_omezarr",
        tmp_path / "v.npy",
        tmp_path / "v.ome.zarr",
        "--voxel-size",
        "3",
        "2",
        "2",
        "--chunks",
        "2",
        "8",
        "8",
        "--n-levels",
        "2",
        "--ngff-version",
        "0.4",
    )
    array, voxel_size = read_omezarr(tmp_path / "v.ome.zarr")
    np.testing.assert_array_equal(array[...], data)
    assert voxel_size == (3.0, 2.0, 2.0) and array.metadata.zarr_format == 2
    assert "voxel_size" in run_failing(
        "linum_convert_to_omezarr",
        capsys,
        tmp_path / "v.npy",
        tmp_path / "w.ome.zarr",
        "--voxel-size",
        "1",
    )


def test_zstd_level_sets_the_codecs_level(tmp_path) -> None:
    """``--zstd-level`` sets the codec's level."""
    np.save(tmp_path / "v.npy", np.arange(8 * 16 * 16, dtype=np.uint16).reshape(8, 16, 16))
    run_script(
        "linum_convert_to_omezarr", tmp_path / "v.npy", tmp_path / "v.ome.zarr", "--zstd-level", 9
    )
    array, _ = read_omezarr(tmp_path / "v.ome.zarr")
    levels = [getattr(codec, "level", None) for codec in array.compressors]
    assert levels == [9, None], array.compressors  # zstd, then crc32c


def _gpu_usable() -> bool:
    from conftest import gpu_missing_reason

    return gpu_missing_reason() is None


def test_use_gpu_without_a_gpu_warns_and_runs_on_the_cpu(tmp_path, small, capsys) -> None:
    if _gpu_usable():
        pytest.skip("a GPU is usable here: the fallback does not happen")
    run_script("linum_aip", small / "mosaic.ome.zarr", tmp_path / "aip.ome.zarr", "--use_gpu")
    err = capsys.readouterr().err
    assert "--use-gpu: no usable GPU" in err and "running on the CPU" in err
    np.testing.assert_array_equal(
        read_volume(tmp_path / "aip.ome.zarr"), read_volume(small / "mosaic_aip.ome.zarr")
    )


_PROBE = textwrap.dedent(
    """
    import ctypes, json, sys
    from pathlib import Path
    import linumpy.scripts.linum_make_demo_data as demo, linumpy.scripts.linum_aip as aip
    import linumpy.scripts.linum_estimate_transform as est, linumpy.scripts.linum_stitch_3d as s3
    import linumpy.scripts.linum_stitch_2d as s2, linumpy.scripts.linum_convert_to_omezarr as conv
    d = Path(sys.argv[1])
    demo.main([str(d / "m.ome.zarr"), "--grid", "2", "3", "--tile-shape", "8", "64", "64"])
    aip.main([str(d / "m.ome.zarr"), str(d / "a.ome.zarr"), "--no-use-gpu"])
    est.main([str(d / "m.ome.zarr"), str(d / "t.json"), "--min-score", "0"])
    s3.main([str(d / "m.ome.zarr"), str(d / "t.json"), str(d / "s.ome.zarr")])
    s2.main([str(d / "a.ome.zarr"), str(d / "t.json"), str(d / "s2.ome.zarr")])
    conv.main([str(d / "a.ome.zarr"), str(d / "c.ome.zarr")])
    active = []
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        cuda = None  # no driver: no CUDA context is possible
    if cuda is not None and cuda.cuInit(0) == 0:
        count = ctypes.c_int()
        cuda.cuDeviceGetCount(ctypes.byref(count))
        for index in range(count.value):
            device, flags, state = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
            cuda.cuDeviceGet(ctypes.byref(device), index)
            cuda.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(state))
            if state.value:
                active.append(index)
    gpu_modules = [m for m in ("nvidia.nvcomp", "kvikio") if m in sys.modules]
    print(json.dumps({"modules": gpu_modules, "contexts": active}))
    """
)


def test_no_gpu_imports_and_no_cuda_context_without_the_flag(tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"modules": [], "contexts": []}


# --- GPU runs against the CPU -------------------------------------------------------------------


@pytest.mark.gpu
def test_the_job_on_the_gpu_matches_the_commands_on_the_cpu(tmp_path, small) -> None:
    run_script(
        "linum_mosaic_pipeline", small / "mosaic.ome.zarr", tmp_path, "--n-levels", "2", "--use-gpu"
    )
    gpu_transform = TileTransform.load(tmp_path / "transform.json")
    assert gpu_transform.max_position_error(TileTransform.load(small / "t.json")) < 0.05
    stitched = read_volume(tmp_path / "stitched.ome.zarr")  # from the GPU's own layout
    assert stitched.shape == read_volume(small / "stitched.ome.zarr").shape
    np.testing.assert_allclose(
        read_volume(tmp_path / "stitched_aip.ome.zarr"), stitched.mean(axis=0), rtol=1e-5
    )


@pytest.mark.gpu
def test_gpu_runs_match_cpu(tmp_path, small, capsys) -> None:
    mosaic = small / "mosaic.ome.zarr"
    run_script("linum_aip", mosaic, tmp_path / "aip.ome.zarr", "--use-gpu")
    np.testing.assert_allclose(
        read_volume(tmp_path / "aip.ome.zarr"),
        read_volume(small / "mosaic_aip.ome.zarr"),
        rtol=1e-5,
    )
    run_script("linum_estimate_transform", mosaic, tmp_path / "t.json", "--use-gpu")
    gpu_transform = TileTransform.load(tmp_path / "t.json")
    assert gpu_transform.max_position_error(TileTransform.load(small / "t.json")) < 0.05
    run_script(
        "linum_stitch_3d",
        mosaic,
        small / "t.json",
        tmp_path / "s.ome.zarr",
        "--n-levels",
        "2",
        "--use-gpu",
    )
    for level in (0, 1):
        np.testing.assert_allclose(
            read_volume(tmp_path / "s.ome.zarr", level=level),
            read_volume(small / "stitched.ome.zarr", level=level),
            rtol=1e-5,
            atol=1e-3,
        )
    run_script(
        "linum_stitch_2d",
        small / "mosaic_aip.ome.zarr",
        small / "t.json",
        tmp_path / "s2.ome.zarr",
        "--use-gpu",
    )
    np.testing.assert_allclose(
        read_volume(tmp_path / "s2.ome.zarr"), read_volume(small / "s2.ome.zarr"), rtol=1e-5
    )
    run_script(
        "linum_convert_to_omezarr",
        mosaic,
        tmp_path / "c.ome.zarr",
        "--n-levels",
        "2",
        "--use-gpu",
    )
    source = read_volume(mosaic)
    np.testing.assert_array_equal(read_volume(tmp_path / "c.ome.zarr"), source)
    np.testing.assert_array_equal(
        read_volume(tmp_path / "c.ome.zarr", level=1), downsample_mean(source)
    )
    run_script("linum_make_demo_data", tmp_path / "g.ome.zarr", *SMALL, "--use-gpu")
    assert read_omezarr(tmp_path / "g.ome.zarr")[0].shape == read_omezarr(mosaic)[0].shape
    assert "no usable GPU" not in capsys.readouterr().err
