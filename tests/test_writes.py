"""Safe writes: staged replacement, recovery of interrupted replacements, writing an image from
itself, checksums by default, axes and units round trips, chunk shapes refused."""

from __future__ import annotations

import fcntl
import gc
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from ome_zarr.io import parse_url
from ome_zarr.reader import Reader
from zarr_layouts import sample_data

from linumpy import settings
from linumpy.errors import LinumpyError
from linumpy.io import OmeZarrWriter, open_array, read_omezarr, read_volume, save_omezarr
from linumpy.io import staging as staging_module
from linumpy.io.metadata import Axis
from linumpy.io.omezarr import read_axes
from linumpy.io.recovery import STAGING_SUFFIX, clean_staging, identity, recover_staging
from linumpy.io.staging import StagedWrite
from linumpy.scripts import linum_aip, linum_convert_to_omezarr

HOST = staging_module.HOST


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


def save(data: np.ndarray, path: Path, **kwargs: object) -> None:
    save_omezarr(data, path, voxel_size=(1,) * data.ndim, chunks=(8,) * data.ndim, **kwargs)


def chunk_files(array: Path) -> list[Path]:
    return sorted(p for p in array.rglob("*") if p.is_file() and p.name.isdigit())


@pytest.fixture
def old_and_new(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    path = tmp_path / "img.ome.zarr"
    old, new = sample_data((16, 24, 24), "uint16", seed=1), sample_data((16, 24, 24), "uint16")
    save(old, path, n_levels=2)
    return path, old, new


# -- staged replacement -------------------------------------------------------------------------


def test_replacement_is_staged_until_commit(old_and_new) -> None:
    path, old, new = old_and_new
    with OmeZarrWriter(
        path, new.shape, new.dtype, voxel_size=(1, 1, 1), chunks=(8, 8, 8), overwrite=True
    ) as writer:
        writer[...] = new
        assert writer.path != path and writer.path.parent.parent.name.endswith(STAGING_SUFFIX)
        np.testing.assert_array_equal(read_volume(path), old)  # the old image is untouched
        assert read_volume(path, level=1).shape == (8, 12, 12)
    assert writer.path == path
    np.testing.assert_array_equal(read_volume(path), new)
    assert read_omezarr(path)[0].shape == new.shape
    with pytest.raises(LinumpyError, match="level 1 out of range"):
        read_volume(path, level=1)  # the new image has one level: the old one is gone entirely
    assert hidden(path.parent) == []


def test_an_exception_keeps_the_old_image(old_and_new) -> None:
    path, old, new = old_and_new
    writer = OmeZarrWriter(path, new.shape, new.dtype, voxel_size=(1, 1, 1), overwrite=True)
    with pytest.raises(RuntimeError, match="stop"), writer:
        writer[:8] = new[:8]
        raise RuntimeError("stop")
    np.testing.assert_array_equal(read_volume(path), old)
    assert hidden(path.parent) == []


def test_a_new_image_is_deleted_on_an_exception(tmp_path: Path) -> None:
    path = tmp_path / "new.ome.zarr"
    writer = OmeZarrWriter(path, (8, 8), np.uint8, voxel_size=(1, 1))
    with pytest.raises(RuntimeError, match="stop"), writer:
        writer[...] = np.ones((8, 8), np.uint8)
        raise RuntimeError("stop")
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_save_omezarr_stages_a_new_image_too(tmp_path: Path) -> None:
    path = tmp_path / "new.ome.zarr"

    def block(index: int) -> np.ndarray:
        assert not path.exists()  # nothing appears under the name before the commit
        if index == 3:
            raise RuntimeError("stop")
        return np.full((8, 16), index, np.uint8)

    failing = da.concatenate(
        [da.from_delayed(dask.delayed(block)(i), (8, 16), np.uint8) for i in range(4)]
    )
    # one block at a time: with threads, blocks already running go on writing after the error
    # (into the staging directory the next write of the image removes)
    with pytest.raises(RuntimeError, match="stop"), dask.config.set(scheduler="synchronous"):
        save_omezarr(failing, path, voxel_size=(1, 1), chunks=(8, 16))
    assert list(tmp_path.iterdir()) == []
    save_omezarr(failing[:24], path, voxel_size=(1, 1), chunks=(8, 16))
    assert read_volume(path)[::8, 0].tolist() == [0, 1, 2]
    assert list(tmp_path.iterdir()) == [path]


def test_a_writer_never_committed_is_discarded(old_and_new, caplog) -> None:
    path, old, new = old_and_new
    writer = OmeZarrWriter(path, new.shape, new.dtype, voxel_size=(1, 1, 1), overwrite=True)
    writer[...] = new
    del writer
    gc.collect()
    np.testing.assert_array_equal(read_volume(path), old)
    assert hidden(path.parent) == []
    assert "never committed" in caplog.text


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
@pytest.mark.parametrize("kind", ["directory", "file", "file-over-directory"])
def test_commit_replaces_in_place(tmp_path: Path, monkeypatch, exchange: bool, kind: str) -> None:
    monkeypatch.setattr(staging_module, "_exchange_supported", exchange and sys.platform == "linux")
    target = tmp_path / "out"
    if kind == "file":
        target.write_text("old")
    else:
        target.mkdir()
        (target / "a").write_text("old")
    write = StagedWrite(target)
    if kind == "directory":
        write.path.mkdir()
        (write.path / "b").write_text("new")
    else:
        write.path.write_text("new")
    write.commit()
    if kind == "directory":
        assert [p.name for p in target.iterdir()] == ["b"]
    else:
        assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_commit_refuses_nothing_written(tmp_path: Path) -> None:
    write = StagedWrite(tmp_path / "out")
    with pytest.raises(LinumpyError, match="nothing was written"):
        write.commit()
    write.abort()
    assert list(tmp_path.iterdir()) == []


# -- recovery of interrupted replacements -------------------------------------------------------


def stale_staging(target: Path, pid: int, host: str = HOST, token: str = "abcd") -> Path:
    folder = target.parent / f".{target.name}.{token}{STAGING_SUFFIX}"
    (folder / "new").mkdir(parents=True)
    owner = {"target": target.name, "pid": pid, "host": host}
    (folder / "owner").write_text(json.dumps(owner))
    return folder


def swapping(folder: Path) -> None:
    """Record, as a commit does, that ``folder``'s ``ready`` is the complete new version."""
    (folder / "state").write_text(json.dumps({"new": identity(folder / "ready")}))


def image(path: Path, value: int) -> Path:
    save_omezarr(np.full((4, 8), value, np.uint8), path, voxel_size=(1, 1))
    return path


RECOVERIES = {
    "write": lambda target: save_omezarr(
        np.full((4, 8), 7, np.uint8), target, voxel_size=(1, 1), overwrite=True
    ),
    "clean_staging": lambda target: clean_staging(target.parent),
}


def test_a_reader_reports_an_interrupted_write_and_leaves_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Reading never writes: a missing target's staging folder is named (in the error and at
    INFO, which a script's -v shows) and left for the next write or clean_staging."""
    target = tmp_path / "img.ome.zarr"
    folder = stale_staging(target, dead_pid())
    image(folder / "ready", 2)
    image(folder / "old", 1)
    swapping(folder)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    with (
        caplog.at_level(logging.INFO, logger="linumpy.io.omezarr"),
        pytest.raises(LinumpyError) as caught,
    ):
        read_volume(target)
    message = str(caught.value)
    assert message.startswith(f"{target}: no such file or directory; an interrupted write left ")
    assert str(folder) in message and "clean_staging" in message
    assert str(folder) in caplog.text
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    clean_staging(tmp_path)  # the documented recovery: the completed new image wins
    assert (read_volume(target) == 2).all()
    assert hidden(tmp_path) == []


@pytest.mark.parametrize("trigger", RECOVERIES)
def test_killed_between_the_two_renames_rolls_forward(tmp_path: Path, trigger: str) -> None:
    # the state a replacement killed after "target -> old", before "ready -> target" leaves
    target = tmp_path / "img.ome.zarr"
    folder = stale_staging(target, dead_pid())
    image(folder / "ready", 2)
    image(folder / "old", 1)
    swapping(folder)
    RECOVERIES[trigger](target)
    expected = 7 if trigger == "write" else 2
    assert (read_volume(target) == expected).all()
    assert hidden(tmp_path) == []


@pytest.mark.parametrize("trigger", [*RECOVERIES, "open"])
def test_a_half_written_replacement_is_dropped(tmp_path: Path, trigger: str) -> None:
    target = image(tmp_path / "img.ome.zarr", 1)
    folder = stale_staging(target, dead_pid())
    image(folder / "new" / target.name, 2)  # incomplete as far as anyone can tell
    if trigger == "open":
        read_volume(target)
    else:
        RECOVERIES[trigger](target)
    assert (read_volume(target) == (7 if trigger == "write" else 1)).all()
    # reading an image that exists writes nothing: its stale staging waits for the next write
    assert hidden(tmp_path) == ([folder.name] if trigger == "open" else [])


def test_a_staging_folder_without_owner_is_left_while_young(tmp_path: Path) -> None:
    """A writer creates its owner file first: a folder without one is being created, unless
    it is old."""
    target = tmp_path / "img.ome.zarr"
    folder = tmp_path / f".{target.name}.abcd{STAGING_SUFFIX}"
    folder.mkdir()
    assert recover_staging(target) == [] and folder.exists()
    os.utime(folder, (0, 0))
    assert recover_staging(target) == [f"{folder}: removed"]


def test_a_half_written_new_image_is_never_restored(tmp_path: Path) -> None:
    target = tmp_path / "img.ome.zarr"
    folder = stale_staging(target, dead_pid())
    image(folder / "new" / target.name, 2)
    with pytest.raises(LinumpyError, match="no such file or directory; an interrupted write"):
        read_volume(target)
    assert hidden(tmp_path) == [folder.name]  # a reader leaves it
    clean_staging(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_staging_of_live_writers_is_left_alone(tmp_path: Path) -> None:
    target = image(tmp_path / "img.ome.zarr", 1)
    live = stale_staging(target, os.getpid(), token="0a")
    lock = os.open(live / "owner", os.O_RDWR)  # a writer holds its owner file's lock
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        remote = stale_staging(target, 1, host="another-host", token="0b")
        mine = StagedWrite(target)
        actions = recover_staging(target)
        assert live.exists() and remote.exists() and mine.staging.exists()
        assert actions == [f"{remote}: left alone: its writer runs on another-host"]
        mine.abort()
    finally:
        os.close(lock)
    recover_staging(target)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [remote.name]


# -- writing an image from itself ---------------------------------------------------------------


def test_save_a_dask_array_read_from_the_target(old_and_new) -> None:
    path, old, _ = old_and_new
    source = da.from_zarr(zarr.open_array(str(path / "0"), mode="r"))
    save_omezarr(source + 1, path, voxel_size=(1, 1, 1), chunks=(8, 8, 8), overwrite=True)
    np.testing.assert_array_equal(read_volume(path), old + 1)


def test_writer_reading_its_own_target(old_and_new) -> None:
    path, old, _ = old_and_new
    source = open_array(path)
    with OmeZarrWriter(
        path,
        old.shape,
        old.dtype,
        voxel_size=(2, 1, 1),
        chunks=(8, 8, 8),
        n_levels=2,
        overwrite=True,
    ) as writer:
        for z in range(0, old.shape[0], 8):
            writer[z : z + 8] = source[z : z + 8] * 2
    np.testing.assert_array_equal(read_volume(path), old * 2)
    assert read_omezarr(path, level=1)[1] == (4.0, 2.0, 2.0)


@pytest.mark.parametrize("output", ["same", "inside", "parent"])
def test_script_refuses_to_write_over_its_input(old_and_new, capsys, output: str) -> None:
    path, old, _ = old_and_new
    target = {"same": path, "inside": path / "aip.ome.zarr", "parent": path.parent}[output]
    with pytest.raises(SystemExit) as stop:
        linum_aip.main([str(path), str(target), "-f"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the input" in err[0] and "write to another path" in err[0], err
    np.testing.assert_array_equal(read_volume(path), old)
    assert hidden(path.parent) == []


# -- checksums ----------------------------------------------------------------------------------


def checksum_flag(path: Path, array: str = "0") -> bool:
    """Whether the first chunk's (or shard's first inner chunk's) zstd frame has a checksum."""
    frame = chunk_files(path / array)[0].read_bytes()
    assert frame[:4] == b"\x28\xb5\x2f\xfd"
    return bool(frame[4] & 0x04)  # Content_Checksum_flag of the frame header descriptor


@pytest.mark.parametrize("ngff_version", ["0.4", "0.5"])
def test_checksums_by_default(tmp_path: Path, ngff_version: str) -> None:
    data = sample_data((16, 16, 16), "uint16")
    save(data, tmp_path / "on.ome.zarr", ngff_version=ngff_version)
    save(data, tmp_path / "off.ome.zarr", ngff_version=ngff_version, checksum=False)
    assert checksum_flag(tmp_path / "on.ome.zarr")
    assert not checksum_flag(tmp_path / "off.ome.zarr")
    array = open_array(tmp_path / "on.ome.zarr")
    if ngff_version == "0.5":  # zstd with its content checksum, then a crc32c of the frame
        assert [type(c).__name__ for c in array.compressors] == ["ZstdCodec", "Crc32cCodec"]
        config = array.compressors[0].to_dict()["configuration"]
    else:  # the frames carry it; .zarray does not name it (older readers refuse the key)
        assert array.metadata.compressor.get_config().get("checksum") is None
        config = {"checksum": array.metadata.compressor.checksum}
    assert config["checksum"] is True
    np.testing.assert_array_equal(read_volume(tmp_path / "on.ome.zarr"), data)


def test_checksum_setting(tmp_path: Path) -> None:
    data = sample_data((16, 16), "uint8")
    with settings.set(write_checksum=False):
        save(data, tmp_path / "a.ome.zarr")
    assert not checksum_flag(tmp_path / "a.ome.zarr")
    env = {**os.environ, "LINUMPY_ZSTD_CHECKSUM": "0"}
    code = (
        "import numpy as np, sys; from linumpy.io import save_omezarr; "
        "save_omezarr(np.arange(256, dtype=np.uint8).reshape(16, 16), sys.argv[1], "
        "voxel_size=(1, 1), chunks=(8, 8))"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "b.ome.zarr")], env=env, check=True)
    assert not checksum_flag(tmp_path / "b.ome.zarr")


def test_a_corrupt_checksummed_chunk_is_an_error(tmp_path: Path) -> None:
    data = sample_data((16, 16, 16), "float32")
    path = tmp_path / "img.ome.zarr"
    save(data, path)
    chunk = next(p for p in (path / "0").rglob("*") if p.is_file() and p.name != "zarr.json")
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    chunk.write_bytes(bytes(raw))
    with pytest.raises(LinumpyError):
        read_volume(path)


# -- axes and units -----------------------------------------------------------------------------

AXES_CASES = {
    "zyx-nanometer": ((4, 8, 8), dict(unit="nanometer")),
    "cyx": ((3, 8, 8), dict(axes="cyx")),
    "tczyx": (
        (2, 3, 4, 8, 8),
        dict(axes=[Axis("t", "time", "second"), "c", "z", "y", "x"], unit="millimeter"),
    ),
    "custom": ((2, 8, 8), dict(axes=[Axis("angle", "angle", "degree"), "y", "x"])),
}


@pytest.mark.parametrize("ngff_version", ["0.4", "0.5"])
@pytest.mark.parametrize("case", AXES_CASES)
def test_axes_and_units_round_trip(tmp_path: Path, case: str, ngff_version: str) -> None:
    shape, kwargs = AXES_CASES[case]
    data = sample_data(shape, "uint16")
    path, copy = tmp_path / "a.ome.zarr", tmp_path / "b.ome.zarr"
    voxel = (1.0,) * (len(shape) - 2) + (0.5, 0.25)
    save_omezarr(data, path, voxel_size=voxel, n_levels=2, ngff_version=ngff_version, **kwargs)
    axes = read_axes(path)
    # saved again from what was read: names, types and units are kept
    array, voxel_size = read_omezarr(path)
    save_omezarr(array[...], copy, voxel_size=voxel_size, axes=axes, ngff_version=ngff_version)
    assert read_axes(copy) == axes
    names = [a.name for a in axes]
    if case == "zyx-nanometer":
        assert axes == tuple(Axis(n, "space", "nanometer") for n in "zyx")
    if case == "cyx":
        assert axes[0] == Axis("c", "channel", None)
    if case == "tczyx":
        assert axes[0] == Axis("t", "time", "second") and axes[-1].unit == "millimeter"
    if case == "custom":
        assert axes[0] == Axis("angle", "angle", "degree")
    # the pyramid shrinks the space axes only; other axes are never averaged together
    level1, voxel1 = read_omezarr(path, level=1)
    n_other = len(shape) - sum(a.type == "space" for a in axes)
    assert level1.shape[:n_other] == shape[:n_other]
    assert voxel1[:n_other] == voxel[:n_other]
    n_space = len(shape) - n_other
    first = read_volume(path, level=1)[(slice(None),) * n_other + (0,) * n_space]
    block = data[(slice(None),) * n_other + (slice(0, 2),) * n_space].astype(float)
    expected = block.mean(axis=tuple(range(n_other, len(shape)))).round()
    np.testing.assert_array_equal(first, expected)
    if ngff_version == "0.5":
        assert open_array(path).metadata.dimension_names == tuple(names)
    node = list(Reader(parse_url(str(path)))())[0]
    assert [a["name"] for a in node.metadata["axes"]] == names


@pytest.mark.parametrize(
    ("axes", "shape", "message"),
    [
        ("yxc", (4, 4, 2), "space axes must come last"),
        ("zz", (4, 4), "unique"),
        ("zyx", (4, 4), "3 axes for 2-D data"),
        ("cx", (2, 4), "2 or 3 space axes"),
        ("ctyx", (2, 2, 4, 4), "time axis must come first"),
    ],
)
def test_axes_are_checked(tmp_path: Path, axes: str, shape: tuple, message: str) -> None:
    data = np.zeros(shape, np.uint8)
    with pytest.raises(ValueError, match=message):
        save_omezarr(data, tmp_path / "bad.ome.zarr", voxel_size=(1,) * data.ndim, axes=axes)
    assert list(tmp_path.iterdir()) == []


# -- chunk shapes -------------------------------------------------------------------------------


def test_tiny_chunks_on_a_large_image_are_refused(old_and_new) -> None:
    path, old, _ = old_and_new
    with pytest.raises(LinumpyError, match=r"134,217,728 chunks of 2 bytes each"):
        OmeZarrWriter(
            path,
            (512, 512, 512),
            np.uint16,
            voxel_size=(1, 1, 1),
            chunks=(1, 1, 1),
            overwrite=True,
        )
    np.testing.assert_array_equal(read_volume(path), old)  # nothing was touched
    assert hidden(path.parent) == []


def test_a_script_stops_on_tiny_chunks_with_the_numbers(tmp_path: Path, capsys) -> None:
    source = tmp_path / "big.npy"  # 256 MiB of zeros, a sparse file
    np.lib.format.open_memmap(source, mode="w+", dtype=np.uint16, shape=(512, 512, 512)).flush()
    output = tmp_path / "out.ome.zarr"
    with pytest.raises(SystemExit) as stop:
        linum_convert_to_omezarr.main([str(source), str(output), "--chunks", "1", "1", "1"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "134,217,728 chunks of 2 bytes each" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.npy"]


def test_many_small_chunks_get_a_warning(tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="linumpy"):
        writer = OmeZarrWriter(
            tmp_path / "w.ome.zarr", (64, 64, 64), np.uint8, voxel_size=(1, 1, 1), chunks=(1, 1, 2)
        )
    writer.abort()
    assert "131,072 chunks of 2 bytes each" in caplog.text
    assert json.dumps(sorted(os.listdir(tmp_path))) == "[]"


@pytest.mark.gpu
@pytest.mark.parametrize("shards", [None, (32, 64, 64)], ids=["chunks", "sharded"])
def test_gpu_written_checksums_read_back_by_the_cpu_and_zarr(tmp_path: Path, shards) -> None:
    import cupy

    from linumpy.errors import ChunkDecodeError
    from linumpy.gpu import backend
    from linumpy.gpu.nvcomp_zstd import NvcompZstdCodec
    from linumpy.gpu.zarr_io import gpu_zarr_context

    data = sample_data((32, 64, 64), "uint16")
    plain = tmp_path / "plain.zarr"
    with gpu_zarr_context():
        array = zarr.create_array(
            str(plain),
            shape=data.shape,
            dtype=data.dtype,
            chunks=(16, 32, 32),
            shards=shards,
            compressors=NvcompZstdCodec(level=3, checksum=True),
            fill_value=0,
        )
        array[...] = cupy.asarray(data)
    # as linumpy's pipeline writes on the GPU: the writer's arrays reopened in the GPU context
    image = tmp_path / "image.ome.zarr"
    writer = OmeZarrWriter(
        image, data.shape, data.dtype, voxel_size=(1, 1, 1), chunks=(16, 32, 32), shards=shards
    )
    assert writer.checksum
    with gpu_zarr_context():
        zarr.open_array(store=str(writer.path / "0"), mode="r+")[...] = cupy.asarray(data)
    writer.commit()
    for path, array_dir in ((plain, "."), (image, "0")):
        assert checksum_flag(path, array_dir)
        np.testing.assert_array_equal(read_volume(path), data)
        np.testing.assert_array_equal(zarr.open_array(str(path / array_dir), mode="r")[...], data)
        chunk = chunk_files(path / array_dir)[0]
        raw = bytearray(chunk.read_bytes())
        raw[40] ^= 0x01  # inside the first frame's compressed data
        chunk.write_bytes(bytes(raw))
        with pytest.raises(ChunkDecodeError):
            read_volume(path)
        # A payload bit flip reaches nvCOMP (its headers are intact), whose decode of corrupt
        # input is undefined; libzstd rejects it (GPU guide).
        with mock.patch.object(backend, "CPU_SHARE", 1.0), pytest.raises(ChunkDecodeError):
            read_volume(path, gpu=True)


@pytest.mark.parametrize("ngff_version", ["0.5", "0.4"])
def test_writers_compress_at_the_zstd_level_setting(tmp_path: Path, ngff_version: str) -> None:
    volume = np.arange(4 * 8 * 8, dtype=np.uint16).reshape(4, 8, 8)

    def stored_level(name: str, **options: Any) -> int:
        path = tmp_path / f"{name}.ome.zarr"
        save_omezarr(volume, path, voxel_size=(1, 1, 1), ngff_version=ngff_version, **options)
        return zarr.open_group(path, mode="r")["0"].compressors[0].level

    assert stored_level("a") == 2
    with settings.set(zstd_level=7):
        assert stored_level("b") == 7
        assert stored_level("c", zstd_level=4) == 4
    np.testing.assert_array_equal(read_volume(tmp_path / "b.ome.zarr"), volume)


def test_every_writer_names_the_zstd_level_zstd_level(tmp_path: Path) -> None:
    """``zstd_level`` in every writer's signature (``level`` is a pyramid level in the
    readers)."""
    import inspect

    from linumpy.io.rechunk import rechunk
    from linumpy.mosaic.convert import convert_to_omezarr
    from linumpy.mosaic.job import run_mosaic_job
    from linumpy.mosaic.stitch_file import stitch_omezarr

    writers = (OmeZarrWriter, save_omezarr, rechunk, convert_to_omezarr, stitch_omezarr)
    for writer in (*writers, run_mosaic_job):
        parameters = inspect.signature(writer).parameters
        assert parameters["zstd_level"].default is None, writer
    for writer in writers:
        assert "level" not in inspect.signature(writer).parameters, writer
    source = image(tmp_path / "a.ome.zarr", 1)
    rechunk(source, tmp_path / "b.ome.zarr", zstd_level=6)
    assert zarr.open_group(tmp_path / "b.ome.zarr", mode="r")["0"].compressors[0].level == 6


def test_a_scripts_input_check_reports_an_interrupted_write_and_leaves_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from linumpy.cli import build_parser, check_input

    target = tmp_path / "img.ome.zarr"
    folder = stale_staging(target, dead_pid())
    image(folder / "ready", 2)
    image(folder / "old", 1)
    swapping(folder)
    with pytest.raises(SystemExit):
        check_input(build_parser("Demo.", prog="linum-demo"), target)
    assert f"does not exist; an interrupted write left {folder}" in capsys.readouterr().err
    assert hidden(tmp_path) == [folder.name] and not target.exists()
