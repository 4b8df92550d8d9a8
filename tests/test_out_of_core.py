"""Out-of-core stitching, projection and conversion: same bytes as in memory, bounded memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from linumpy.errors import MemoryLimitError
from linumpy.io import downsample_mean, read_volume, save_omezarr
from linumpy.mosaic.convert import convert_to_omezarr
from linumpy.mosaic.demo import make_demo_data, read_demo_truth
from linumpy.mosaic.out_of_core import plan_stitch_block, stitch_lazy
from linumpy.mosaic.pipeline import (
    average_intensity_projection,
    projection_omezarr,
    stitch_omezarr,
)
from linumpy.mosaic.stitch import BLENDING_MODES, stitch, stitch_region, tiles_in_region
from linumpy.mosaic.transform import TileTransform
from linumpy.parallel import Cluster

REPO = Path(__file__).resolve().parents[1]
SMALL = {"grid_shape": (3, 4), "tile_shape": (12, 48, 48), "seed": 3}


@pytest.fixture(scope="module")
def mosaic(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ooc") / "mosaic.ome.zarr"
    make_demo_data(path, **SMALL)
    return path


def _files(path: Path) -> dict[str, bytes]:
    """Every file of a zarr tree; the top group's metadata without the image's name."""
    files = {}
    for item in sorted(path.rglob("*")):
        if item.is_file():
            data = item.read_bytes()
            if item.parent == path and item.name == "zarr.json":
                meta = json.loads(data)
                for multiscale in meta["attributes"]["ome"]["multiscales"]:
                    multiscale.pop("name")
                data = json.dumps(meta, sort_keys=True).encode()
            files[str(item.relative_to(path))] = data
    return files


@pytest.mark.parametrize("blending", BLENDING_MODES)
def test_regions_stitched_apart_equal_the_whole(blending: str) -> None:
    rng = np.random.default_rng(0)
    transform = TileTransform([[27.3, 1.6], [-2.2, 25.1]], (0.0, 0.0), (32, 30), (3, 4))
    transform = transform.normalized()
    mosaic = rng.integers(0, 4000, size=(3, 96, 120)).astype(np.uint16)
    whole = stitch(mosaic, transform, blending)
    height, width = transform.output_shape()
    for by, bx in ((16, 16), (40, 24), (height, 7)):
        assembled = np.full_like(whole, np.nan)
        for y0 in range(0, height, by):
            for x0 in range(0, width, bx):
                shape = (min(by, height - y0), min(bx, width - x0))
                hit = tiles_in_region(transform, (y0, x0), shape)
                if hit is None:
                    assembled[:, y0 : y0 + shape[0], x0 : x0 + shape[1]] = 0
                    continue
                rows, cols = hit
                part = mosaic[:, rows.start * 32 : rows.stop * 32, cols.start * 30 : cols.stop * 30]
                assembled[:, y0 : y0 + shape[0], x0 : x0 + shape[1]] = stitch_region(
                    part,
                    transform,
                    blending,
                    origin=(y0, x0),
                    shape=shape,
                    grid_origin=(rows.start, cols.start),
                )
        np.testing.assert_array_equal(assembled, whole)  # bit for bit, NaN-free


def test_stitch_lazy_equals_stitch_for_2d_and_3d(tmp_path: Path, mosaic: Path) -> None:
    transform = read_demo_truth(mosaic).normalized()
    volume = read_volume(mosaic)
    lazy = stitch_lazy(mosaic, transform, "average", block=(4, 32, 64))
    expected = stitch(volume, transform, "average", dtype=volume.dtype)
    np.testing.assert_array_equal(lazy.compute(), expected)
    save_omezarr(volume.mean(axis=0), tmp_path / "aip.ome.zarr", voxel_size=(1, 1))
    flat = stitch_lazy(tmp_path / "aip.ome.zarr", transform, "linear", block=(32, 32))
    expected = stitch(read_volume(tmp_path / "aip.ome.zarr"), transform, "linear")
    np.testing.assert_array_equal(flat.compute(), expected)


def test_stitch_and_projection_tasks_open_nothing(
    tmp_path: Path, mosaic: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source is opened once, on the client: the tasks of a stitch, of a projection and of
    open_volume read it through the reference they are given (which pickles for a cluster's
    workers) and open nothing."""
    import pickle

    from linumpy.io import omezarr, open_volume
    from linumpy.io.array_ref import array_ref
    from linumpy.mosaic.projection import projection_lazy

    transform = read_demo_truth(mosaic).normalized()
    lazies = [
        stitch_lazy(mosaic, transform, block=(4, 64, 64)),
        projection_lazy(mosaic, cluster=Cluster(threads=2)),
        open_volume(mosaic, chunks=(4, 64, 64)),
    ]
    opened: list[object] = []
    original = omezarr._open_node

    def counted(*args: object, **kwargs: object) -> object:
        opened.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(omezarr, "_open_node", counted)
    stitched, projected, volume = (lazy.compute() for lazy in lazies)
    # many stitch and open_volume tasks
    assert opened == [] and lazies[0].npartitions > 1 and lazies[2].npartitions > 1
    grid = read_volume(mosaic)
    np.testing.assert_array_equal(stitched, stitch(grid, transform, dtype=grid.dtype))
    np.testing.assert_allclose(projected, grid.mean(axis=0), rtol=1e-6)
    np.testing.assert_array_equal(volume, grid)
    ref = pickle.loads(pickle.dumps(array_ref(mosaic)))  # as a worker process gets it
    opened.clear()
    np.testing.assert_array_equal(ref.read((slice(0, 2),)), grid[:2])
    assert opened == []


def test_stitch_under_a_memory_limit_writes_the_same_bytes(tmp_path: Path, mosaic: Path) -> None:
    transform = read_demo_truth(mosaic)
    # float32: averaging integers takes float64 temporaries, more than this limit holds
    options = {"n_levels": 3, "chunks": (4, 32, 32), "shards": (8, 64, 64), "dtype": np.float32}
    stitch_omezarr(mosaic, tmp_path / "a.ome.zarr", transform, **options)
    small = Cluster(memory_limit=4 * 2**20, threads=2)
    block = plan_stitch_block(
        read_volume(mosaic).shape, 2, transform.normalized(), (8, 64, 64), small
    )
    assert block[1:] < tuple(transform.normalized().output_shape())  # planes are split
    stitch_omezarr(mosaic, tmp_path / "b.ome.zarr", transform, cluster=small, **options)
    assert _files(tmp_path / "a.ome.zarr") == _files(tmp_path / "b.ome.zarr")
    level = stitch(read_volume(mosaic), transform.normalized(), "linear")
    for index in range(3):
        np.testing.assert_array_equal(read_volume(tmp_path / "b.ome.zarr", level=index), level)
        level = downsample_mean(level)
    with pytest.raises(MemoryLimitError, match="use at least"):
        stitch_omezarr(
            mosaic,
            tmp_path / "c.ome.zarr",
            transform,
            cluster=Cluster(memory_limit=2**16),
            **options,
        )


def test_stitch_blocks_cover_whole_source_chunks_when_memory_allows() -> None:
    # (96, 512, 512) single-chunk tiles: every block decodes the chunks it touches whole, so
    # (32, 256, 256) output blocks decoded each tile's chunk about 27 times.
    transform = TileTransform([[460.8, 0.0], [0.0, 460.8]], (0.0, 0.0), (512, 512), (6, 6))
    transform = transform.normalized()
    source, chunks, unit = (96, 3072, 3072), (96, 512, 512), (32, 256, 256)
    plain = plan_stitch_block(source, 2, transform, unit, Cluster(threads=16))
    assert plain == unit
    # room for it: 3 GiB per thread, though the parallel split alone would give 16 threads
    # 64 blocks of ~125 MB
    large = Cluster(memory_limit=64 * 2**30, threads=16)
    block = plan_stitch_block(source, 2, transform, unit, large, chunks)
    assert block[0] == 96 and min(block[1:]) >= 2 * 512
    # a limit that holds one chunk's reach but not two
    middle = Cluster(memory_limit=2**30, threads=1)
    assert plan_stitch_block(source, 2, transform, unit, middle, chunks) == (96, 512, 512)
    # a memory limit that cannot hold such a block keeps the small one, without an error
    small = Cluster(memory_limit=256 * 2**20, threads=1)
    assert plan_stitch_block(source, 2, transform, unit, small, chunks)[0] == 32


def test_projection_sums_slabs_in_z_order(tmp_path: Path, mosaic: Path) -> None:
    stitch_omezarr(
        mosaic,
        tmp_path / "s.ome.zarr",
        read_demo_truth(mosaic),
        n_levels=1,
        chunks=(4, 32, 32),
        shards=None,  # slabs of a chunk's depth (sharded volumes: a shard's, tested apart)
    )
    volume = read_volume(tmp_path / "s.ome.zarr")  # float32: the order of the sums shows
    total = np.zeros(volume.shape[1:], np.float64)
    for z0 in range(0, volume.shape[0], 4):
        total += volume[z0 : z0 + 4].sum(axis=0, dtype=np.float64)
    expected = (total / volume.shape[0]).astype(np.float32)
    small = Cluster(memory_limit=2**20, threads=2)
    for cluster in (None, small):
        aip = average_intensity_projection(tmp_path / "s.ome.zarr", cluster=cluster)
        np.testing.assert_array_equal(aip, expected)
    projection_omezarr(
        tmp_path / "s.ome.zarr", tmp_path / "aip.ome.zarr", n_levels=2, cluster=small
    )
    np.testing.assert_array_equal(read_volume(tmp_path / "aip.ome.zarr"), expected)
    np.testing.assert_array_equal(
        read_volume(tmp_path / "aip.ome.zarr", level=1), downsample_mean(expected)
    )


@pytest.mark.parametrize("kind", ["npy", "tiff", "zarr"])
def test_convert_under_a_memory_limit_writes_the_same_bytes(tmp_path: Path, kind: str) -> None:
    data = (np.random.default_rng(2).random((30, 40, 50)) * 1000).astype(np.uint16)
    if kind == "npy":
        source = tmp_path / "in.npy"
        np.save(source, data)
    elif kind == "tiff":
        import tifffile

        source = tmp_path / "in.tif"
        tifffile.imwrite(source, data)
    else:
        source = tmp_path / "in.zarr"
        zarr.create_array(source, data=data, chunks=(5, 40, 25))
    options = {"voxel_size": (2, 1, 1), "chunks": (4, 8, 8), "shards": (8, 16, 16), "n_levels": 3}
    convert_to_omezarr(source, tmp_path / "a.ome.zarr", **options)
    small = Cluster(memory_limit=2**20, threads=2)
    convert_to_omezarr(source, tmp_path / "b.ome.zarr", cluster=small, **options)
    assert _files(tmp_path / "a.ome.zarr") == _files(tmp_path / "b.ome.zarr")
    np.testing.assert_array_equal(read_volume(tmp_path / "b.ome.zarr"), data)


# --- scripts ------------------------------------------------------------------------------------


def _run(module: str, *args: object) -> None:
    __import__(f"linumpy.scripts.{module}", fromlist=["main"]).main([str(a) for a in args])


def _fails(module: str, capsys, *args: object) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        _run(module, *args)
    assert stop.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_scripts_under_a_memory_limit_write_the_same_bytes(tmp_path: Path, mosaic: Path) -> None:
    transform = tmp_path / "transform.json"
    read_demo_truth(mosaic).save(transform)
    for name, limit in (("a", []), ("b", ["--memory-limit", "3MiB"])):
        _run(
            "linum_stitch_3d",
            mosaic,
            transform,
            tmp_path / f"{name}.ome.zarr",
            "--chunks",
            4,
            32,
            32,
            "--no-shards",  # the default shards shrink to fit a memory limit
            *limit,
        )
        _run(
            "linum_aip",
            tmp_path / f"{name}.ome.zarr",
            tmp_path / f"{name}_aip.ome.zarr",
            "--n-levels",
            2,
            *limit,
        )
        _run(
            "linum_convert_to_omezarr",
            tmp_path / f"{name}.ome.zarr",
            tmp_path / f"{name}_c.ome.zarr",
            "--chunks",
            8,
            16,
            16,
            "--shards",  # the default shards shrink to fit a memory limit: the same both times
            8,
            32,
            32,
            "--n-levels",
            2,
            *limit,
        )
    for suffix in ("", "_aip", "_c"):
        a, b = _files(tmp_path / f"a{suffix}.ome.zarr"), _files(tmp_path / f"b{suffix}.ome.zarr")
        assert a == b, suffix


def test_script_errors_for_cluster_options(tmp_path: Path, mosaic: Path, capsys) -> None:
    transform = tmp_path / "transform.json"
    read_demo_truth(mosaic).save(transform)
    out = tmp_path / "s.ome.zarr"
    line = _fails("linum_stitch_3d", capsys, mosaic, transform, out, "--memory-limit", "64KiB")
    assert "--memory-limit" in line and "use at least" in line
    line = _fails("linum_aip", capsys, mosaic, out, "--memory-limit", "plenty")
    assert "argument --memory-limit: 'plenty' is not a size" in line
    line = _fails("linum_aip", capsys, mosaic, out, "--scheduler", "tcp://127.0.0.1:9")
    assert "cannot reach the dask scheduler" in line
    line = _fails("linum_aip", capsys, mosaic, out, "--gpus", "2", "--scheduler", "x")
    assert "not allowed with argument" in line
    assert not out.exists()


def test_memory_benchmark_stays_within_twice_the_limit(tmp_path: Path) -> None:
    """The issue's benchmark at a small size: a volume 4x the limit stitched and projected with
    a peak RSS within twice the limit above the interpreter and its imports."""
    figures = tmp_path / "figures.json"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "out_of_core.py"),
            "--memory-limit",
            "32MiB",
            "--chunk-depth",
            "8",
            "--folder",
            str(tmp_path),
            "--json",
            str(figures),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert figures.exists(), done.stderr[-3000:]
    result = json.loads(figures.read_text())
    limit = result["memory_limit"]
    assert result["mosaic"]["bytes"] >= 4 * limit
    assert [row["run"] for row in result["runs"]] == ["stitch", "aip"]
    for row in result["runs"]:
        assert row["input_bytes"] >= 4 * limit
        assert row["above_baseline"] <= 2 * limit, done.stdout
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]


def test_overwrite_replaces_the_image_once_complete(tmp_path: Path, mosaic: Path) -> None:
    transform = read_demo_truth(mosaic)
    target = tmp_path / "s.ome.zarr"
    stitch_omezarr(mosaic, target, transform, blending="none", n_levels=2)
    stitch_omezarr(mosaic, target, transform, blending="average", n_levels=2, overwrite=True)
    expected = stitch(read_volume(mosaic), transform.normalized(), "average", dtype=np.uint16)
    np.testing.assert_array_equal(read_volume(target), expected)
    np.testing.assert_array_equal(read_volume(target, level=1), downsample_mean(expected))
    assert [p.name for p in tmp_path.iterdir()] == ["s.ome.zarr"]  # no staging left behind


@pytest.mark.gpu
def test_gpu_out_of_core_pipeline(tmp_path: Path, mosaic: Path) -> None:
    transform = read_demo_truth(mosaic)
    options = {"n_levels": 2, "chunks": (4, 32, 32), "shards": (8, 64, 64)}
    small = Cluster(memory_limit=4 * 2**20, threads=2)
    stitch_omezarr(mosaic, tmp_path / "a.ome.zarr", transform, gpu=True, **options)
    stitch_omezarr(mosaic, tmp_path / "b.ome.zarr", transform, gpu=True, cluster=small, **options)
    for level in (0, 1):  # blocks stitched apart on the GPU: the same values
        np.testing.assert_array_equal(
            read_volume(tmp_path / "a.ome.zarr", level=level),
            read_volume(tmp_path / "b.ome.zarr", level=level),
        )
    # the output is in the tiles' dtype, rounded as the CPU rounds it
    cpu = stitch(read_volume(mosaic), transform.normalized(), "linear", dtype=np.uint16)
    np.testing.assert_array_equal(read_volume(tmp_path / "b.ome.zarr"), cpu)
    aip = average_intensity_projection(tmp_path / "b.ome.zarr", gpu=True, cluster=small)
    np.testing.assert_allclose(aip.get(), cpu.mean(axis=0), rtol=1e-5, atol=1e-4)
    convert_to_omezarr(
        tmp_path / "b.ome.zarr",
        tmp_path / "c.ome.zarr",
        gpu=True,
        cluster=small,
        chunks=(8, 16, 16),
        n_levels=2,
    )
    for level in (0, 1):
        np.testing.assert_array_equal(
            read_volume(tmp_path / "c.ome.zarr", level=level),
            read_volume(tmp_path / "b.ome.zarr", level=level),
        )


@pytest.mark.parametrize("blending", BLENDING_MODES)
def test_regions_stitched_in_bands_of_rows_equal_the_whole(blending: str) -> None:
    rng = np.random.default_rng(5)
    transform = TileTransform([[27.3, 1.6], [-2.2, 25.1]], (0.0, 0.0), (32, 30), (3, 4))
    transform = transform.normalized()
    mosaic = rng.integers(0, 4000, size=(3, 96, 120)).astype(np.uint16)
    whole = stitch(mosaic, transform, blending)
    for threads in (2, 3, 7):
        np.testing.assert_array_equal(
            stitch_region(mosaic, transform, blending, threads=threads), whole
        )
    # a part of the grid (the tiles of rows 1 and 2, columns 1 to 3), as a block reads it
    region, origin = (40, 50), (20, 30)
    part = mosaic[:, 32:, 30:]
    one = stitch_region(part, transform, blending, origin=origin, shape=region, grid_origin=(1, 1))
    banded = stitch_region(
        part, transform, blending, origin=origin, shape=region, grid_origin=(1, 1), threads=4
    )
    np.testing.assert_array_equal(banded, one)


def test_projection_of_a_sharded_volume_reads_slabs_a_shard_deep(tmp_path: Path) -> None:
    volume = np.random.default_rng(4).random((24, 64, 80)).astype(np.float32)
    # planes that cancel: 1e20 - 1e20 + 1 is 1 summed in one slab of 12 planes, 0 in slabs of 4
    volume[0], volume[4], volume[5] = 1e20, -1e20, 1
    path = tmp_path / "v.ome.zarr"
    save_omezarr(volume, path, voxel_size=(1, 1, 1), chunks=(4, 32, 32), shards=(12, 64, 96))
    expected = np.zeros(volume.shape[1:], np.float64)
    for z0 in (0, 12):
        expected += volume[z0 : z0 + 12].sum(axis=0, dtype=np.float64)
    expected = (expected / 24).astype(np.float32)
    np.testing.assert_array_equal(average_intensity_projection(path), expected)
    # a memory limit that cannot hold a shard-deep slab: slabs of a chunk's depth
    per_chunk = np.zeros(volume.shape[1:], np.float64)
    for z0 in range(0, 24, 4):
        per_chunk += volume[z0 : z0 + 4].sum(axis=0, dtype=np.float64)
    per_chunk = (per_chunk / 24).astype(np.float32)
    assert not np.array_equal(per_chunk, expected)  # the grouping shows
    small = Cluster(memory_limit=70_000, threads=1)
    np.testing.assert_array_equal(average_intensity_projection(path, cluster=small), per_chunk)


def test_integer_projections_are_exact(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    for dtype in (np.uint8, np.uint16, np.int16):
        info = np.iinfo(dtype)
        volume = rng.integers(info.min, info.max, (40, 48, 48), endpoint=True).astype(dtype)
        path = tmp_path / f"{np.dtype(dtype).name}.ome.zarr"
        save_omezarr(volume, path, voxel_size=(1, 1, 1), chunks=(8, 16, 16))
        expected = (volume.sum(axis=0, dtype=np.float64) / 40).astype(np.float32)
        np.testing.assert_array_equal(average_intensity_projection(path), expected)


@pytest.mark.gpu
def test_gpu_steps_on_the_default_layout(tmp_path: Path) -> None:
    """The GPU pipeline on a mosaic grid in the default layout (one tile per shard of small
    chunks): the same stitch, projection and rechunk as the CPU's."""
    from linumpy.io.rechunk import rechunk

    grid = tmp_path / "grid.ome.zarr"
    make_demo_data(grid, grid_shape=(3, 3), tile_shape=(64, 128, 128), seed=1, shards=None)
    rechunk(grid, tmp_path / "sharded.ome.zarr", gpu=True)
    sharded = tmp_path / "sharded.ome.zarr"
    assert read_volume(sharded).tobytes() == read_volume(grid).tobytes()
    assert zarr.open_array(sharded / "0").shards == (64, 128, 128)
    transform = read_demo_truth(grid)
    stitch_omezarr(sharded, tmp_path / "gpu.ome.zarr", transform, gpu=True)
    stitch_omezarr(sharded, tmp_path / "cpu.ome.zarr", transform)
    np.testing.assert_allclose(
        read_volume(tmp_path / "gpu.ome.zarr"), read_volume(tmp_path / "cpu.ome.zarr"), rtol=1e-5
    )
    aip = average_intensity_projection(sharded, gpu=True)
    np.testing.assert_array_equal(aip.get(), average_intensity_projection(sharded))


def test_stitch_output_shards_keep_one_chunk_per_tile_decoded_once(tmp_path: Path) -> None:
    """Over one chunk per tile, blocks over slabs of planes would decode whole tiles for a few
    planes at a time: the stitched output then gets a tile's footprint per shard, the blocks
    take whole tiles in depth, and the stitched values are the same."""
    from linumpy import settings
    from linumpy.io.layout import inner_chunks, slab_shards
    from linumpy.mosaic.stitch_file import _stitch_shards

    path = tmp_path / "tiles.ome.zarr"
    make_demo_data(path, grid_shape=(2, 6), tile_shape=(16, 64, 64), shards=None)
    transform = read_demo_truth(path).normalized()
    array = zarr.open_array(path / "0", mode="r")
    out_shape = (16, *transform.output_shape())
    cluster = Cluster(threads=2, memory_limit=8 * 2**20)
    f32 = np.dtype(np.float32)
    with settings.set(chunk_bytes=16 * 1024):
        chunks = inner_chunks(out_shape, f32)
    budget = 256 * 1024
    slabs = slab_shards(out_shape, chunks, np.float32, shard_bytes=budget)
    over_slabs = plan_stitch_block(array.shape, 2, transform, slabs, cluster, array.chunks)
    assert over_slabs[0] % 16  # each tile decoded for a few planes at a time
    shards = _stitch_shards(array, transform, out_shape, chunks, budget, cluster, False, f32)
    assert shards == (16, 64, 64)
    assert plan_stitch_block(array.shape, 2, transform, shards, cluster, array.chunks)[0] == 16

    # a grid in the default layout (chunks a slab deep) keeps slabs of whole planes
    grid = tmp_path / "grid.ome.zarr"
    with settings.set(chunk_bytes=2048):
        make_demo_data(grid, grid_shape=(2, 6), tile_shape=(16, 64, 64))
    default = zarr.open_array(grid / "0", mode="r")
    assert default.chunks[0] < 16
    assert (
        _stitch_shards(default, transform, out_shape, chunks, budget, cluster, False, f32) == "auto"
    )

    with settings.set(chunk_bytes=16 * 1024):
        stitch_omezarr(path, tmp_path / "s.ome.zarr", transform, n_levels=1, cluster=cluster)
    written = zarr.open_array(tmp_path / "s.ome.zarr" / "0", mode="r")
    assert written.shards is not None and written.shards[0] == 16
    expected = stitch(read_volume(path), transform, dtype=np.uint16)
    np.testing.assert_array_equal(written[...], expected)


def test_cpu_projection_blocks_are_whole_shards_read_with_a_share_of_the_threads(
    tmp_path: Path, monkeypatch
) -> None:
    """A shard split between tasks has its index read, and its reads threaded, by each of
    them; a task's reads with all of ``io_threads`` beside the other tasks' oversubscribe the
    cores."""
    from linumpy import settings
    from linumpy.io.array_ref import ArrayRef
    from linumpy.mosaic.projection import projection_lazy

    # metadata only: shards of 128 MiB, more than the split would give one task of 16
    empty = tmp_path / "empty.zarr"
    zarr.create_array(
        empty, shape=(256, 1024, 1024), chunks=(32, 128, 128), shards=(256, 512, 512), dtype="u2"
    )
    lazy = projection_lazy(empty, cluster=Cluster(threads=16))
    assert all(n % 512 == 0 for axis in lazy.chunks for n in axis), lazy.chunks

    volume = np.random.default_rng(5).integers(0, 4000, (16, 64, 96), dtype=np.uint16)
    path = tmp_path / "v.ome.zarr"
    save_omezarr(volume, path, voxel_size=(1, 1, 1), chunks=(8, 16, 16), shards=(16, 32, 32))
    calls: list[tuple[tuple[slice, ...], object]] = []
    read = ArrayRef.read

    def recorded(source, region, **kwargs):
        calls.append((region, kwargs.get("settings")))
        return read(source, region, **kwargs)

    monkeypatch.setattr(ArrayRef, "read", recorded)
    cluster = Cluster(memory_limit=200_000, threads=2)  # a shard per task, not two
    with settings.set(io_threads=8):
        aip = projection_lazy(path, cluster=cluster).compute()
    np.testing.assert_array_equal(aip, (volume.sum(axis=0) / 16).astype(np.float32))
    assert len(calls) == 2 * 6  # 6 shards, each in 2 slabs a chunk deep
    for region, overrides in calls:
        assert overrides == {"io_threads": 4}  # 8 threads shared by the 2 tasks at once
        assert all(s.start % 32 == 0 and s.stop - s.start == 32 for s in region[1:])  # a shard


@pytest.mark.parametrize("threads", [2, 16])
def test_uint16_stitch_blocks_decode_and_encode_each_chunk_once(tmp_path: Path, threads) -> None:
    """An 8 x 8 grid of (512, 256, 256) uint16 tiles in linumpy's layout, stitched to uint16:
    blocks take the grid's chunks whole in depth (each decoded once: whole planes on 2 threads;
    on 16, halves of planes, a row of tiles read by both halves), and each output shard lies in
    one block (each output chunk encoded once)."""
    from linumpy.io.dask_write import shard_budget
    from linumpy.io.layout import inner_chunks, slab_shards
    from linumpy.mosaic.stitch_file import _bytes_per_byte, _stitch_shards

    array = zarr.create_array(
        tmp_path / "grid.zarr",
        shape=(512, 2048, 2048),
        chunks=(32, 128, 128),
        shards=(512, 256, 256),
        dtype="uint16",
    )  # metadata only
    matrix = [[205.3, -7.2], [5.4, 203.7]]
    transform = TileTransform(matrix, (50.0, 0.0), (256, 256), (8, 8)).normalized()
    out_shape = (512, *transform.output_shape())
    cluster = Cluster(threads=threads)
    u16 = np.dtype(np.uint16)
    chunks = inner_chunks(out_shape, u16)
    budget = shard_budget(cluster, per_byte=_bytes_per_byte(u16, 3, 3))
    shards = _stitch_shards(array, transform, out_shape, chunks, budget, cluster, False, u16)
    if shards == "auto":
        shards = slab_shards(out_shape, chunks, u16, shard_bytes=budget)
    block = plan_stitch_block(
        array.shape, 2, transform, shards, cluster, array.chunks, source_shards=array.shards
    )
    assert chunks == (32, 128, 128) and block[0] % 32 == 0
    for size, unit, extent in zip(block, shards, out_shape):
        assert size % unit == 0 or size == extent
    if threads == 2:
        assert tuple(block[1:]) == tuple(out_shape[1:])


def test_tiles_in_region_names_the_overlapping_tiles_or_none() -> None:
    transform = TileTransform([[4.0, 0.0], [0.0, 4.0]], (0.0, 0.0), (6, 6), (3, 3))
    assert tiles_in_region(transform, (0, 9), (3, 5)) == (slice(0, 1), slice(1, 3))
    assert tiles_in_region(transform, (20, 0), (4, 4)) is None


def test_projection_depth_groups_and_read_threads() -> None:
    from linumpy.mosaic.projection import depth_groups, read_threads

    assert depth_groups(64, 8, plane_blocks=1, slots=2) == tuple(range(0, 65, 8))
    assert depth_groups(64, 16, plane_blocks=1, slots=2) == (0, 16, 32, 48, 64)
    assert depth_groups(64, 8, plane_blocks=16, slots=2) == (0, 64)
    from linumpy import settings

    with settings.set(io_threads=16):
        assert read_threads(36, 16) == 1
        assert read_threads(4, 16) == 4


def test_stitch_threads_share_the_cluster_among_the_blocks_running_at_once() -> None:
    from linumpy.mosaic.out_of_core import stitch_threads

    assert stitch_threads((96, 850, 850), (32, 850, 850), Cluster(threads=16)) == 6  # 3 blocks
    assert stitch_threads((96, 850, 850), (8, 256, 256), Cluster(threads=16)) == 1
