"""Every linum-* script against a table of bad inputs: exit status 2 and one line naming the file,
option or chunk, never a traceback."""

from __future__ import annotations

import errno
import importlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from linumpy.cli import build_parser, fail_on_errors
from linumpy.errors import LinumpyError
from linumpy.io import read_volume, save_omezarr
from linumpy.io.staging import STAGING_SUFFIX
from linumpy.mosaic.demo import make_demo_data, read_demo_truth
from linumpy.scripts import linum_aip

REPO = Path(__file__).resolve().parents[1]
TINY_BENCH = ["--cpu-only", "--chunks", "16", "--checksum", "on", "--repeats", "1"]


def _scripts() -> dict[str, str]:
    """``linum-*`` name -> module of every console script in pyproject.toml."""
    table = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    return {name: target.split(":")[0] for name, target in table.items()}


SCRIPTS = _scripts()


def _argv(name: str, source: Path, data: Path, out: Path) -> list[str]:
    """A run of script ``name`` on ``source`` writing under ``out`` (``data``: shared inputs)."""
    transform = str(data / "t.json")
    return {
        "linum-aip": [str(source), str(out / "aip.ome.zarr")],
        "linum-estimate-transform": [str(source), str(out / "t.json")],
        "linum-stitch-3d": [str(source), transform, str(out / "s.ome.zarr")],
        "linum-stitch-2d": [str(source), transform, str(out / "s.ome.zarr")],
        "linum-convert-to-omezarr": [str(source), str(out / "c.ome.zarr")],
        "linum-rechunk": [str(source), str(out / "r.ome.zarr")],
        "linum-benchmark-io": [str(out / "bench"), "--input", str(source), *TINY_BENCH],
        "linum-gpu-info": [str(source)],
        "linum-make-demo-data": [str(out / "grid.ome.zarr"), "--grid", "2", "2"],
        "linum-mosaic-pipeline": [str(source), str(out / "job")],
    }[name]


#: Scripts that take no image: the pipeline benchmark makes its own mosaics.
NO_IMAGE = ("linum-benchmark-pipeline",)
INPUT_SCRIPTS = [name for name in SCRIPTS if name not in ("linum-make-demo-data", *NO_IMAGE)]
OUTPUT_SCRIPTS = [
    name for name in SCRIPTS if name not in ("linum-gpu-info", "linum-benchmark-io", *NO_IMAGE)
]
#: Scripts that read the voxels (linum-gpu-info reads the metadata only).
DATA_SCRIPTS = [name for name in INPUT_SCRIPTS if name != "linum-gpu-info"]


def _exit_2(name: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run script ``name`` in-process expecting exit status 2; return its one error line."""
    main = importlib.import_module(SCRIPTS[name]).main
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    errors = [line for line in lines if ": error: " in line]
    # one error line, last (progress bars of work done before the failure may precede it)
    assert len(errors) == 1 and lines[-1] == errors[0], err
    assert errors[0].startswith(f"{name}: error: "), err
    return errors[0]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2x2 demo grid (3D, unsharded and in one shard), its projection (2D) and the demo's true
    tile transform."""
    folder = tmp_path_factory.mktemp("data")
    make_demo_data(folder / "grid.ome.zarr", grid_shape=(2, 2), tile_shape=(8, 32, 32))
    make_demo_data(
        folder / "sharded.ome.zarr", grid_shape=(2, 2), tile_shape=(8, 32, 32), shards=(8, 64, 64)
    )
    read_demo_truth(folder / "grid.ome.zarr").save(folder / "t.json")
    linum_aip.main([str(folder / "grid.ome.zarr"), str(folder / "aip.ome.zarr")])
    return folder


def _image(name: str, data: Path, tmp_path: Path, sharded: bool = False) -> Path:
    """A copy of the demo image script ``name`` takes (2D for linum-stitch-2d, else 3D)."""
    source = data / ("aip.ome.zarr" if name == "linum-stitch-2d" else "grid.ome.zarr")
    if sharded:
        source = data / "sharded.ome.zarr"
    return Path(shutil.copytree(source, tmp_path / source.name))


def _chunk(image: Path) -> Path:
    """The largest chunk file of level 0 (one holding tissue, not just background)."""
    files = [p for p in (image / "0").rglob("*") if p.is_file() and p.name != "zarr.json"]
    return max(files, key=lambda p: p.stat().st_size)


def _edit_json(path: Path, edit: Callable[[dict], object]) -> None:
    doc = json.loads(path.read_text())
    result = edit(doc)
    path.write_text(json.dumps(doc if result is None else result))


def _drop_path(doc: dict) -> None:
    del doc["attributes"]["ome"]["multiscales"][0]["datasets"][0]["path"]


def _path_number(doc: dict) -> None:
    doc["attributes"]["ome"]["multiscales"][0]["datasets"][0]["path"] = 0


def _multiscales_string(doc: dict) -> None:
    doc["attributes"]["ome"]["multiscales"] = "0"


def _huge_shape(doc: dict) -> None:
    doc["shape"] = [2**20] * len(doc["shape"])


def _huge_chunks(doc: dict) -> None:
    chunk_shape = doc["chunk_grid"]["configuration"]["chunk_shape"]
    doc["chunk_grid"]["configuration"]["chunk_shape"] = [
        2**16 if len(chunk_shape) == 3 else 2**21
    ] * len(chunk_shape)


def _flip_bytes(chunk: Path) -> None:
    raw = bytearray(chunk.read_bytes())
    raw[:8] = bytes(b ^ 0xFF for b in raw[:8])  # the zstd magic number and frame header
    chunk.write_bytes(bytes(raw))


def _chunk_directory(chunk: Path) -> None:
    chunk.unlink()
    chunk.mkdir()


def _multiscale(doc: dict) -> dict:
    return doc["attributes"]["ome"]["multiscales"][0]


def _drop_an_axis(doc: dict) -> None:
    multiscale = _multiscale(doc)
    multiscale["axes"] = multiscale["axes"][1:]
    for dataset in multiscale["datasets"]:
        for transform in dataset["coordinateTransformations"]:
            transform[transform["type"]] = transform[transform["type"]][1:]


def _first_scale(value: float) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        _multiscale(doc)["datasets"][0]["coordinateTransformations"][0]["scale"][0] = value

    return edit


def _level_entry(key: str, value: object) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        if key == "codec":
            doc["codecs"][-1]["name"] = value
        elif key == "shape":
            doc["shape"] = [value, *doc["shape"][1:]]
        else:
            doc[key] = value

    return edit


#: Hostile or degenerate metadata: case -> (file edited, edit, what the error must name).
HOSTILE_EDITS: dict[str, tuple[str, Callable[[dict], object], str]] = {
    "shape-2**60": ("0/zarr.json", _level_entry("shape", 2**60), "0/zarr.json"),
    "shape-empty": ("0/zarr.json", _level_entry("shape", 0), "0/zarr.json"),
    "shape-negative": ("0/zarr.json", _level_entry("shape", -1), "0/zarr.json"),
    "codec-unknown": ("0/zarr.json", _level_entry("codec", "nope"), "0/zarr.json"),
    "dtype-unknown": ("0/zarr.json", _level_entry("data_type", "bogus"), "0/zarr.json"),
    "dataset-path-dotdot": (
        "zarr.json",
        lambda d: _multiscale(d)["datasets"][0].update(path=".."),
        "zarr.json",
    ),
    "axes-not-rank": ("zarr.json", _drop_an_axis, "zarr.json"),
    "scale-negative": ("zarr.json", _first_scale(-1.0), "zarr.json"),
    "scale-zero": ("zarr.json", _first_scale(0.0), "zarr.json"),
    "scale-nan": ("zarr.json", _first_scale(float("nan")), "zarr.json"),
    "scale-inf": ("zarr.json", _first_scale(float("inf")), "zarr.json"),
}


def _corrupt(case: str, image: Path) -> str:
    """Damage ``image`` as ``case`` says; return what the error must name."""
    if case == "no-dataset-path":
        _edit_json(image / "zarr.json", _drop_path)
        return "zarr.json"
    if case == "dataset-path-number":
        _edit_json(image / "zarr.json", _path_number)
        return os.path.join(image.name, "zarr.json")
    if case == "multiscales-string":
        _edit_json(image / "zarr.json", _multiscales_string)
        return "zarr.json"
    if case == "zarr-json-list":
        _edit_json(image / "zarr.json", lambda doc: [doc])
        return "zarr.json"
    if case == "level-json-broken":
        (image / "0" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "ar')
        return os.path.join("0", "zarr.json")
    if case == "huge-shape":  # 2^20 voxels along each axis: refused before any allocation
        _edit_json(image / "0" / "zarr.json", _huge_shape)
        return ""
    if case == "huge-chunks":  # 512 TiB chunks (2D: 4 TiB)
        _edit_json(image / "0" / "zarr.json", _huge_chunks)
        return "TiB"
    if case in HOSTILE_EDITS:
        file, edit, named = HOSTILE_EDITS[case]
        _edit_json(image / file, edit)
        return os.path.join(image.name, *named.split("/"))
    if case == "json-too-deep":  # 100,000 levels of nesting: the parser's recursion limit
        (image / "zarr.json").write_text('{"a": ' * 100_000 + "1" + "}" * 100_000)
        return os.path.join(image.name, "zarr.json")
    if case == "metadata-fifo":  # a FIFO would block a reader opening it
        (image / "0" / "zarr.json").unlink()
        os.mkfifo(image / "0" / "zarr.json")
        return os.path.join(image.name, "0", "zarr.json")
    chunk = _chunk(image)
    key = chunk.relative_to(image).as_posix()
    if case in ("chunk-flipped", "shard-flipped"):
        _flip_bytes(chunk)
    elif case in ("chunk-directory", "shard-directory"):
        _chunk_directory(chunk)
    elif case in ("chunk-fifo", "shard-fifo"):
        chunk.unlink()
        os.mkfifo(chunk)
    else:
        raise AssertionError(case)
    return key[len("0/") :]  # the chunk's key in its array ("c/0/1/0")


METADATA_CASES = [
    "no-dataset-path",
    "dataset-path-number",
    "multiscales-string",
    "zarr-json-list",
    "level-json-broken",
]
CHUNK_CASES = [
    "chunk-flipped",
    "chunk-directory",
    "chunk-fifo",
    "shard-flipped",
    "shard-directory",
    "shard-fifo",
]
HOSTILE_CASES = ["huge-shape", "huge-chunks"]
#: Refused when the image is opened: every script, linum-gpu-info included.
OPEN_CASES = [*HOSTILE_EDITS, "json-too-deep", "metadata-fifo"]


def test_a_directory_or_fifo_in_place_of_a_stored_file_is_refused(tmp_path: Path) -> None:
    from linumpy.errors import ChunkDecodeError
    from linumpy.io.validate import check_regular_file

    (tmp_path / "c0").mkdir()
    os.mkfifo(tmp_path / "zarr.json")
    check_regular_file(tmp_path / "missing", "missing")  # a missing file passes
    with pytest.raises(ChunkDecodeError, match="a directory, not a chunk file"):
        check_regular_file(tmp_path / "c0", "0/c0")
    with pytest.raises(LinumpyError, match="a FIFO, not a metadata file"):
        check_regular_file(tmp_path / "zarr.json", "0/zarr.json")


@pytest.mark.parametrize("name", INPUT_SCRIPTS)
def test_missing_and_not_zarr_inputs(
    name: str, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    missing = tmp_path / "missing.ome.zarr"
    assert "missing.ome.zarr" in _exit_2(name, _argv(name, missing, data, out), capsys)
    folder = tmp_path / "notzarr"
    folder.mkdir()
    (folder / "readme.txt").write_text("hello")
    assert "notzarr" in _exit_2(name, _argv(name, folder, data, out), capsys)
    text = tmp_path / "notes.txt"
    text.write_text("not an image")
    assert "notes.txt" in _exit_2(name, _argv(name, text, data, out), capsys)
    assert not any(out.iterdir())


@pytest.mark.parametrize("case", METADATA_CASES + CHUNK_CASES + HOSTILE_CASES + OPEN_CASES)
@pytest.mark.parametrize("name", INPUT_SCRIPTS)
def test_malformed_input(
    name: str, case: str, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if case in CHUNK_CASES + HOSTILE_CASES and name not in DATA_SCRIPTS:
        pytest.skip(f"{name} reads no chunk")
    sharded = case.startswith("shard-")
    if sharded and name == "linum-stitch-2d":
        pytest.skip("the demo's sharded grid is 3D")
    image = _image(name, data, tmp_path, sharded)
    named = _corrupt(case, image)
    out = tmp_path / "out"
    out.mkdir()
    error = _exit_2(name, _argv(name, image, data, out), capsys)
    assert named in error, error
    if case in METADATA_CASES + OPEN_CASES:
        assert image.name in error, error
    assert not [p for p in out.iterdir() if p.name != "bench"]


@pytest.mark.parametrize("text", ["[1, 2]", "{bad", '{"format": "linumpy-tile-transform"}'])
@pytest.mark.parametrize("name", ["linum-stitch-3d", "linum-stitch-2d"])
def test_malformed_transform(
    name: str, text: str, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    image = _image(name, data, tmp_path)
    (tmp_path / "bad.json").write_text(text)
    argv = [str(image), str(tmp_path / "bad.json"), str(tmp_path / "s.ome.zarr")]
    assert "bad.json" in _exit_2(name, argv, capsys)
    assert not (tmp_path / "s.ome.zarr").exists()


@pytest.mark.parametrize("name", OUTPUT_SCRIPTS)
def test_read_only_output_location(
    name: str, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if os.geteuid() == 0:  # root writes through file modes: use a read-only file system
        out = Path("/sys/kernel")
    else:
        out = tmp_path / "read-only"
        out.mkdir(mode=0o555)
    argv = _argv(name, _image(name, data, tmp_path), data, out)
    output = Path(argv[0] if name == "linum-make-demo-data" else argv[-1])
    error = _exit_2(name, argv, capsys)
    assert repr(str(output)) in error and ".linumpy-staging" not in error, error


@pytest.mark.parametrize("name", [n for n in OUTPUT_SCRIPTS if n != "linum-make-demo-data"])
def test_output_is_the_input(
    name: str, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    image = _image(name, data, tmp_path)
    before = sorted(p.relative_to(image) for p in image.rglob("*"))
    argv = [*_argv(name, image, data, tmp_path)[:-1], str(image), "-f"]
    assert "is the input" in _exit_2(name, argv, capsys)
    assert sorted(p.relative_to(image) for p in image.rglob("*")) == before


OPTION_CASES = [
    ("linum-stitch-3d", ["--zstd-level", "99"], "argument --zstd-level"),
    ("linum-stitch-3d", ["--n-levels", "0"], "argument --n-levels"),
    ("linum-stitch-3d", ["--chunks", "0", "8", "8"], "argument --chunks"),
    ("linum-stitch-2d", ["--zstd-level", "0"], "argument --zstd-level"),
    ("linum-convert-to-omezarr", ["--zstd-level", "99"], "argument --zstd-level"),
    ("linum-convert-to-omezarr", ["--n-levels", "-1"], "argument --n-levels"),
    ("linum-convert-to-omezarr", ["--voxel-size", "1", "0", "1"], "voxel"),
    ("linum-gpu-info", ["--level", "99"], "argument --level"),
    ("linum-gpu-info", ["--level", "-1"], "argument --level"),
    ("linum-aip", ["--n-levels", "0"], "argument --n-levels"),
    ("linum-aip", ["--png", "{out}/aip.jpg"], "argument --png"),
    ("linum-aip", ["--png", "{out}/folder.png", "-f"], "folder.png"),
    ("linum-estimate-transform", ["--tile-shape", "0", "32"], "tile"),
    ("linum-estimate-transform", ["--min-score", "nan"], "argument --min-score"),
    ("linum-make-demo-data", ["--grid", "0", "2"], "argument --grid"),
    ("linum-make-demo-data", ["--tile-shape", "8", "0", "32"], "argument --tile-shape"),
    ("linum-make-demo-data", ["--overlap", "1.5"], "argument --overlap"),
]


@pytest.mark.parametrize(("name", "extra", "expected"), OPTION_CASES)
def test_bad_option_values_name_the_option(
    name: str,
    extra: list[str],
    expected: str,
    data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    (out / "folder.png").mkdir(parents=True)
    argv = _argv(name, _image(name, data, tmp_path), data, out)
    error = _exit_2(name, [*argv, *(e.format(out=out) for e in extra)], capsys)
    assert expected in error, error
    assert sorted(p.name for p in out.iterdir()) == ["folder.png"]  # nothing written
    assert not any((out / "folder.png").iterdir())


def test_failed_png_leaves_no_output(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PNG that cannot be written (the disk fills up as it is written) stops the run before the
    projection is moved into place, and the error names the PNG."""
    from linumpy.mosaic import pipeline

    def full(*_: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pipeline, "save_png", full)
    png = tmp_path / "preview.png"
    argv = [str(data / "grid.ome.zarr"), str(tmp_path / "aip.ome.zarr"), "--png", str(png)]
    error = _exit_2("linum-aip", argv, capsys)
    assert f"cannot write {str(png)!r}: No space left on device" in error, error
    assert not list(tmp_path.iterdir())


def _limited(limit: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_file_size_limit_names_the_output(tmp_path: Path) -> None:
    """A file size limit (``ulimit -f``) met while writing: exit 2 naming the output (the
    interpreter ignores SIGXFSZ, so the write fails with EFBIG), and nothing left behind."""
    volume = tmp_path / "noise.npy"
    np.save(volume, np.random.default_rng(0).integers(0, 2**16, (16, 64, 64), dtype=np.uint16))
    out = tmp_path / "out"
    out.mkdir()
    target = out / "noise.ome.zarr"
    argv = [str(volume), str(target), "--chunks", "16", "64", "64"]
    run = subprocess.run(
        [sys.executable, "-m", SCRIPTS["linum-convert-to-omezarr"], *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=_limited(64 * 1024),  # a chunk file of this volume is 128 KiB of noise
    )
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert "Traceback" not in run.stderr, run.stderr
    assert f"cannot write {str(target)!r}: File too large" in last, run.stderr
    assert list(out.iterdir()) == []


def test_outputs_of_one_run_never_collide(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    source = str(data / "grid.ome.zarr")
    same = str(out / "same.png")
    error = _exit_2("linum-aip", [source, same, "--png", same, "-f"], capsys)
    assert f"output {same!r} is the output {same!r}" in error, error
    inside = str(out / "aip.ome.zarr" / "p.png")
    error = _exit_2("linum-aip", [source, str(out / "aip.ome.zarr"), "--png", inside], capsys)
    assert "is inside the output" in error, error
    assert list(out.iterdir()) == []


def test_a_dangling_link_is_replaced_only_with_f(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    link = tmp_path / "aip.ome.zarr"
    link.symlink_to(tmp_path / "gone")
    argv = [str(data / "grid.ome.zarr"), str(link)]
    assert "exists; use -f" in _exit_2("linum-aip", argv, capsys)
    assert link.is_symlink()
    linum_aip.main([*argv, "-f"])
    assert not link.is_symlink() and read_volume(link).shape == (64, 64)


@pytest.mark.parametrize("length", [216, 240, 255])
def test_long_output_names_work(data: Path, tmp_path: Path, length: int) -> None:
    """Names up to the file system's 255 bytes: the staging folder's name stays short."""
    image = tmp_path / ("a" * (length - len(".ome.zarr")) + ".ome.zarr")
    png = tmp_path / ("p" * (length - len(".png")) + ".png")
    linum_aip.main([str(data / "grid.ome.zarr"), str(image), "--png", str(png)])
    assert read_volume(image).shape == (64, 64) and png.stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([image.name, png.name])
    linum_aip.main([str(data / "grid.ome.zarr"), str(image), "--png", str(png), "-f"])
    assert len(list(tmp_path.iterdir())) == 2


def test_huge_shape_is_refused_before_any_task(data: Path, tmp_path: Path) -> None:
    """A level-0 shape of 2**60 voxels once made linum-aip hang at its first task; it is refused
    when the image is opened (a hang fails here at the timeout instead of blocking the suite)."""
    image = _image("linum-aip", data, tmp_path)
    named = _corrupt("shape-2**60", image)
    run = subprocess.run(
        [sys.executable, "-m", SCRIPTS["linum-aip"], str(image), str(tmp_path / "aip.ome.zarr")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()
    assert len(last) == 1 and named in last[0] and "PiB" in last[0], run.stderr


def _staging(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(STAGING_SUFFIX)]


def test_ctrl_c_exits_130_with_one_line(tmp_path: Path) -> None:
    """SIGINT during a write: exit status 130, one line, the previous output kept, and nothing
    staged left behind once the script runs again."""
    volume = tmp_path / "noise.npy"
    np.save(volume, np.random.default_rng(1).integers(0, 4000, (64, 512, 512), dtype=np.uint16))
    target = tmp_path / "out.ome.zarr"
    save_omezarr(np.ones((4, 8, 8), np.uint16), target, voxel_size=(1, 1, 1))
    argv = [str(volume), str(target), "-f", "--chunks", "16", "64", "64", "--n-levels", "3"]
    proc = subprocess.Popen(
        [sys.executable, "-m", SCRIPTS["linum-convert-to-omezarr"], *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while not _staging(tmp_path) and proc.poll() is None:
            time.sleep(0.005)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "%|" not in line and line.strip()]
    assert lines == ["linum-convert-to-omezarr: interrupted"], err
    assert (read_volume(target) == 1).all()
    # A write zarr's own thread was still finishing can outlive the abort; the next run of the
    # script removes what is left, as documented.
    if _staging(tmp_path):
        small = tmp_path / "small.npy"
        np.save(small, np.ones((4, 8, 8), np.uint16))
        done = subprocess.run(
            [sys.executable, "-m", SCRIPTS["linum-convert-to-omezarr"], str(small), str(target),
             "-f"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    assert _staging(tmp_path) == []


_CUT_SHORT_BY_CTRL_C = """
import sys

from linumpy.cli import build_parser, fail_on_errors, parse_args
from linumpy.io.staging import StagedWrite

parser = build_parser("Demo.", prog="linum-demo")
parser.add_argument("mode", choices=["command", "main"])
parser.add_argument("target")
as_command = sys.argv[1] == "command"  # else as main(argv) called from Python
args = parse_args(parser, None if as_command else sys.argv[1:])


class HalfMade:  # as an event loop whose constructor the interrupt cut short
    def __del__(self):
        raise AttributeError("half made")


def work():
    half = HalfMade()
    write = StagedWrite(args.target)  # as a write interrupted before its caller could abort it
    raise KeyboardInterrupt


try:
    with fail_on_errors(parser):
        work()
except SystemExit as exc:
    if as_command:
        raise
    print("exit", exc.code)
"""


def _cut_short_by_ctrl_c(
    tmp_path: Path, mode: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run the script above as ``mode``; return its run and the folder its write was in."""
    script = tmp_path / "cut_short.py"
    script.write_text(_CUT_SHORT_BY_CTRL_C)
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(
        [sys.executable, str(script), mode, str(out / "result.ome.zarr")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, out


def test_ctrl_c_keeps_to_one_line_when_what_it_cut_short_goes(tmp_path: Path) -> None:
    """Objects the interrupt cut short go at exit: a failing ``__del__`` and a write never
    committed. After Ctrl-C neither is reported, so the run still ends with its one line, and
    the write's staged content is deleted."""
    done, out = _cut_short_by_ctrl_c(tmp_path, "command")
    assert done.returncode == 130, done.stderr
    assert done.stderr.splitlines() == ["linum-demo: interrupted"], done.stderr
    assert list(out.iterdir()) == []


def test_ctrl_c_in_main_called_from_python_leaves_the_process_reporting(tmp_path: Path) -> None:
    """``main(argv)`` called from Python goes on after Ctrl-C: failed clean-ups still reach the
    unraisable hook and a write dropped uncommitted still warns."""
    done, out = _cut_short_by_ctrl_c(tmp_path, "main")
    assert done.stdout == "exit 130\n", done.stderr
    assert "AttributeError: half made" in done.stderr, done.stderr
    assert "a write never committed" in done.stderr, done.stderr
    assert list(out.iterdir()) == []


def test_verbose_reports_staging_that_cannot_be_cleaned(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-v tells what an earlier write left that cannot be cleaned (here: a writer on another
    host, which cannot be checked from this one)."""
    remote = tmp_path / f".aip.ome.zarr.1234abcd{STAGING_SUFFIX}"
    (remote / "new").mkdir(parents=True)
    (remote / "owner").write_text(json.dumps({"target": "aip.ome.zarr", "pid": 1, "host": "far"}))
    linum_aip.main([str(data / "grid.ome.zarr"), str(tmp_path / "aip.ome.zarr"), "-v"])
    err = capsys.readouterr().err
    assert f"{remote}: left alone: its writer runs on far" in err, err
    assert remote.exists()


def test_gpu_info_takes_v_and_checks_its_level_first(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main = importlib.import_module(SCRIPTS["linum-gpu-info"]).main
    main(["-v"])
    assert "settings" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        main([str(data / "grid.ome.zarr"), "--level", "1"])
    printed = capsys.readouterr()
    assert stop.value.code == 2 and "argument --level" in printed.err, printed.err
    assert printed.out == ""  # no report before the error


def test_progress_bars_start_with_their_task_count(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    linum_aip.main([str(data / "grid.ome.zarr"), str(tmp_path / "aip.ome.zarr")])
    err = capsys.readouterr().err
    # a bar without its total reads "projection: 0task [00:00, ?task/s]"
    assert "projection:" in err and re.search(r"projection:\s*\d+task", err) is None, err


def test_readme_reading_example_runs_on_the_demo(tmp_path: Path) -> None:
    """The README's reading example, on what ``make demo`` writes (the GPU line left out)."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Reading volumes", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    lines = [line for line in block.splitlines() if "gpu=True" not in line]
    demo = tmp_path / "demo_output"
    make_demo_data(demo / "mosaic.ome.zarr", grid_shape=(2, 2), tile_shape=(16, 32, 32))
    read_demo_truth(demo / "mosaic.ome.zarr").save(demo / "transform.json")
    from linumpy.scripts import linum_stitch_3d

    names = ("mosaic.ome.zarr", "transform.json", "stitched.ome.zarr")
    linum_stitch_3d.main([str(demo / name) for name in names])
    namespace: dict[str, object] = {}
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        exec("\n".join(lines), namespace)
    finally:
        os.chdir(cwd)
    assert namespace["small"].ndim == 3  # type: ignore[union-attr]


def test_small_library_cases(tmp_path: Path) -> None:
    """region=(None,) is an error (as in zarr); empty shapes and non-number dtypes are refused
    when written, not written unreadable."""
    path = tmp_path / "v.ome.zarr"
    save_omezarr(np.arange(64, dtype=np.uint8).reshape(4, 4, 4), path, voxel_size=(1, 1, 1))
    with pytest.raises(LinumpyError, match="must be a slice"):
        read_volume(path, region=(None,))
    assert read_volume(path, region=(slice(1, 2),)).shape == (1, 4, 4)
    with pytest.raises(ValueError, match="empty axis"):
        save_omezarr(np.zeros((0, 4, 4), np.uint8), tmp_path / "e.ome.zarr", voxel_size=(1, 1, 1))
    with pytest.raises(ValueError, match="not a number type"):
        save_omezarr(np.full((2, 4, 4), "ab"), tmp_path / "u.ome.zarr", voxel_size=(1, 1, 1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.ome.zarr"]


def test_verbose_shows_the_traceback(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    image = _image("linum-aip", data, tmp_path)
    _corrupt("level-json-broken", image)
    with pytest.raises(SystemExit) as stop:
        linum_aip.main([str(image), str(tmp_path / "aip.ome.zarr"), "-v"])
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("linum-aip: error: ")


@pytest.mark.parametrize(
    ("name", "case"),
    [
        ("linum-aip", "chunk-flipped"),
        ("linum-convert-to-omezarr", "level-json-broken"),
        ("linum-gpu-info", "zarr-json-list"),
        ("linum-stitch-3d", "no-dataset-path"),
    ],
)
def test_no_traceback_reaches_the_terminal(
    name: str, case: str, data: Path, tmp_path: Path
) -> None:
    image = _image(name, data, tmp_path)
    named = _corrupt(case, image)
    argv = _argv(name, image, data, tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", SCRIPTS[name], *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{name}: error: ") and named in last, run.stderr


@pytest.mark.parametrize(
    ("file", "text", "named"),
    [
        (".zattrs", "[1]", ".zattrs"),
        (os.path.join("0", ".zarray"), '{"zarr_format": 2, "sha', os.path.join("0", ".zarray")),
        (".zattrs", '{"multiscales": [{"datasets": [{"scale": 1}]}]}', ".zattrs"),
    ],
)
def test_malformed_ngff_04_metadata(
    file: str, text: str, named: str, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same for an OME-NGFF 0.4 image (zarr v2: .zattrs, .zgroup, .zarray)."""
    image = tmp_path / "v04.ome.zarr"
    save_omezarr(
        read_volume(data / "grid.ome.zarr"), image, voxel_size=(1, 1, 1), ngff_version="0.4"
    )
    (image / file).write_text(text)
    error = _exit_2("linum-aip", [str(image), str(tmp_path / "aip.ome.zarr")], capsys)
    assert os.path.join(image.name, named) in error, error


def test_other_errors_are_bugs() -> None:
    """Only linumpy's errors, OS errors and ValueErrors become exit status 2: anything else is a
    bug, which keeps its traceback (exit status 1)."""
    parser = build_parser("Demo.", prog="linum-demo")
    with pytest.raises(ZeroDivisionError), fail_on_errors(parser):
        _ = 1 / 0
    with pytest.raises(SystemExit) as stop, fail_on_errors(parser):
        raise LinumpyError("a user mistake")
    assert stop.value.code == 2


# -- names holding characters that URLs, shells or terminals treat apart -------------------------

NAME_CHARACTERS = {
    "hash": "#",
    "question-mark": "?",
    "percent": "%20",
    "space": " ",
    "unicode": "é水",
    "newline": "\n",
}
NAMED_SCRIPTS = [name for name in SCRIPTS if name not in NO_IMAGE]


def _named_argv(name: str, source: Path, transform: Path, out: Path, c: str) -> tuple[list, Path]:
    """A run of ``name`` on ``source`` whose outputs hold ``c``; and the output it writes."""
    image = out / f"o{c}ut.ome.zarr"
    runs = {
        "linum-aip": ([source, image, "--png", out / f"p{c}.png"], image),
        "linum-estimate-transform": ([source, out / f"t{c}.json"], out / f"t{c}.json"),
        "linum-stitch-3d": ([source, transform, image], image),
        "linum-stitch-2d": ([source, transform, image], image),
        "linum-convert-to-omezarr": ([source, image], image),
        "linum-rechunk": ([source, image], image),
        "linum-benchmark-io": ([out / f"b{c}", "--input", source, *TINY_BENCH], out / f"b{c}"),
        "linum-gpu-info": ([source], source),
        "linum-mosaic-pipeline": ([source, out / f"j{c}ob"], out / f"j{c}ob" / "stitched.ome.zarr"),
        "linum-make-demo-data": (
            [image, "--grid", "2", "2", "--tile-shape", "8", "32", "32"],
            image,
        ),
    }
    argv, output = runs[name]
    return [str(a) for a in argv], output


# zarr would parse a string as a URL ("#" and "?" start a fragment and a query, newlines are
# dropped): local paths reach zarr as stores, never as strings.
@pytest.mark.parametrize("character", list(NAME_CHARACTERS))
@pytest.mark.parametrize("name", NAMED_SCRIPTS)
def test_names_with_special_characters(
    name: str, character: str, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Input and output names (and their folders) holding ``#``, ``?``, ``%``, a space, non-ASCII
    letters or a newline are paths like any other."""
    c = NAME_CHARACTERS[character]
    inputs = tmp_path / f"i{c}n"
    inputs.mkdir()
    plain = _image(name, data, tmp_path)
    source = Path(shutil.move(plain, inputs / f"s{c}rc.ome.zarr"))
    transform = Path(shutil.copy(data / "t.json", inputs / f"t{c}.json"))
    out = tmp_path / f"o{c}ut"
    out.mkdir()
    argv, output = _named_argv(name, source, transform, out, c)
    importlib.import_module(SCRIPTS[name]).main(argv)
    printed = capsys.readouterr()
    assert ": error:" not in printed.err, printed.err
    assert output.exists(), printed
    if output.name.endswith(".ome.zarr"):
        assert read_volume(output).size > 0
    assert not [p for p in out.iterdir() if p.name.endswith(STAGING_SUFFIX)]
