"""open_volume, dask writes, pyramids and clusters, with real dask (threads and a LocalCluster)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from zarr_layouts import LAYOUTS, make_array, sample_data

from linumpy.errors import ChunkDecodeError, ClusterError, LinumpyError, MemoryLimitError
from linumpy.io import OmeZarrWriter, downsample_mean, open_volume, save_omezarr
from linumpy.io.blocks import host_decoded, storage_unit
from linumpy.io.dask_write import align_blocks, store_dask, store_graph, write_pyramid
from linumpy.mosaic.out_of_core import plan_stitch_block
from linumpy.mosaic.transform import TileTransform
from linumpy.parallel import Cluster, dask_cluster, parse_size
from linumpy.parallel.block_sizes import (
    BLOCKS_PER_SLOT,
    DEFAULT_GPU_TASK_BYTES,
    DEFAULT_GPU_THREADS,
    DEFAULT_TASK_BYTES,
    GPU_BLOCKS_PER_SLOT,
    GPU_DEVICE_SHARE,
    SPLIT_FLOOR_BYTES,
    SPLIT_SLACK,
)

HAS_DASK_CUDA = importlib.util.find_spec("dask_cuda") is not None


def _edges(chunks: tuple[int, ...], start: int = 0) -> list[int]:
    return [start + int(e) for e in np.cumsum(chunks)[:-1]]


# --- open_volume --------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_open_volume_equals_zarr(tmp_path: Path, layout: str) -> None:
    data = sample_data((37, 45, 50), "uint16")
    array = make_array(tmp_path / "a.zarr", layout, data, chunks=(8, 16, 16))
    unit = storage_unit(array)
    for chunks in (None, (1, 1, 1), (20, -1, 33), "64KiB"):
        lazy = open_volume(tmp_path / "a.zarr", chunks=chunks, settings={"io_threads": 1})
        np.testing.assert_array_equal(lazy.compute(), array[...])
        # blocks cut at whole chunks (shards): no stored chunk is read by two tasks
        for axis_chunks, u in zip(lazy.chunks, unit):
            assert all(edge % u == 0 for edge in _edges(axis_chunks))


@pytest.mark.parametrize(
    "region",
    [
        (slice(3, 30), slice(None), slice(7, 41)),
        (slice(-10, None),),
        (slice(5, 6), slice(0, 1), slice(49, 50)),
        slice(0, 0),
    ],
)
def test_open_volume_regions_are_cut_at_the_stored_grid(tmp_path: Path, region) -> None:
    data = sample_data((37, 45, 50), "float32")
    array = make_array(tmp_path / "a.zarr", "v3-sharded", data, chunks=(4, 8, 8))
    lazy = open_volume(tmp_path / "a.zarr", region=region, chunks=(8, 16, 16))
    np.testing.assert_array_equal(lazy.compute(), array[region])
    starts = [s.indices(n)[0] for s, n in zip(lazy_region(region, 3), data.shape)]
    for axis_chunks, start, block in zip(lazy.chunks, starts, (8, 16, 16)):
        assert all(edge % block == 0 for edge in _edges(axis_chunks, start))


def lazy_region(region, ndim: int) -> tuple[slice, ...]:
    region = (region,) if isinstance(region, slice) else tuple(region)
    return region + (slice(None),) * (ndim - len(region))


def test_open_volume_levels_of_an_ome_zarr_image(tmp_path: Path) -> None:
    data = sample_data((20, 33, 40), "uint16")
    path = tmp_path / "image.ome.zarr"
    save_omezarr(data, path, voxel_size=(1, 1, 1), chunks=(8, 8, 8), shards=(8, 16, 16), n_levels=3)
    for level in range(3):
        expected = zarr.open_array(str(path / str(level)), mode="r")[...]
        np.testing.assert_array_equal(open_volume(path, level=level).compute(), expected)
    with pytest.raises(LinumpyError, match="level 3 out of range"):
        open_volume(path, level=3)


def test_open_volume_graph_has_one_task_per_block(tmp_path: Path) -> None:
    array = zarr.create_array(
        str(tmp_path / "big.zarr"),
        shape=(4096, 4096, 4096),
        chunks=(64, 64, 64),
        shards=(128, 256, 256),
        dtype="uint16",
    )  # 128 GiB, nothing stored: opening must not read anything
    lazy = open_volume(tmp_path / "big.zarr")
    assert lazy.npartitions == 16 * 8 * 8  # 128 GiB in blocks of 128 MiB
    assert all(c % s == 0 for c, s in zip(lazy.chunksize, array.shards))
    assert len(dict(lazy.__dask_graph__())) == lazy.npartitions
    small = open_volume(tmp_path / "big.zarr", region=(slice(0, 128), slice(0, 512)))
    (optimized,) = dask.optimize(small.sum())
    graph = dict(optimized.__dask_graph__())
    readers = [k for k in graph if isinstance(k, tuple) and "open-volume" in str(k[0])]
    assert len(readers) <= small.npartitions


def test_open_volume_reads_no_data_until_computed(tmp_path: Path) -> None:
    data = sample_data((16, 16, 16), "uint16")
    make_array(tmp_path / "a.zarr", "v3", data, chunks=(8, 8, 8))
    chunk = next(p for p in (tmp_path / "a.zarr").rglob("*") if p.is_file() and "c" in p.parts)
    chunk.write_bytes(b"not zstd at all")
    lazy = open_volume(tmp_path / "a.zarr", chunks=8)  # metadata only: no error here
    with pytest.raises(ChunkDecodeError):
        lazy.compute()


@pytest.mark.parametrize(
    ("chunks", "message"),
    [((0, 8, 8), "positive integers"), ((8, 8), "3 positive"), ("lots", "not a size")],
)
def test_open_volume_rejects_nonsense_chunks(tmp_path: Path, chunks, message) -> None:
    make_array(tmp_path / "a.zarr", "v3", sample_data((8, 8, 8), "uint8"), chunks=(4, 4, 4))
    with pytest.raises(LinumpyError, match=message):
        open_volume(tmp_path / "a.zarr", chunks=chunks)


def test_open_volume_rejects_regions_outside(tmp_path: Path) -> None:
    make_array(tmp_path / "a.zarr", "v3", sample_data((8, 8, 8), "uint8"), chunks=(4, 4, 4))
    with pytest.raises(LinumpyError, match="region"):
        open_volume(tmp_path / "a.zarr", region=(slice(0, 9),))
    with pytest.raises(LinumpyError, match="no such file"):
        open_volume(tmp_path / "missing.zarr")


# --- writing ------------------------------------------------------------------------------------


def test_store_dask_writes_whole_shards_per_task(tmp_path: Path) -> None:
    data = sample_data((30, 50, 70), "float32")
    target = zarr.create_array(
        str(tmp_path / "t.zarr"),
        shape=data.shape,
        chunks=(5, 10, 10),
        shards=(10, 20, 20),
        dtype="float32",
    )
    lazy = da.from_array(data, chunks=(7, 13, 70))  # not aligned to anything
    graph = store_graph(lazy, target)
    aligned = align_blocks(lazy, (10, 20, 20))
    for axis_chunks, u in zip(aligned.chunks, (10, 20, 20)):
        assert all(edge % u == 0 for edge in _edges(axis_chunks))
    assert graph.numblocks == aligned.numblocks
    assert store_dask(lazy, target) == data.nbytes
    np.testing.assert_array_equal(target[...], data)
    with pytest.raises(LinumpyError, match="shape"):
        store_dask(lazy[:-1], target)


@pytest.mark.parametrize("dtype", ["uint16", "float32"])
def test_write_pyramid_equals_the_writer_pyramid(tmp_path: Path, dtype: str) -> None:
    data = sample_data((21, 37, 53), dtype)
    paths = {}
    for name in ("finalize", "dask"):
        paths[name] = tmp_path / f"{name}.ome.zarr"
        writer = OmeZarrWriter(
            paths[name],
            data.shape,
            dtype,
            voxel_size=(1, 1, 1),
            chunks=(4, 8, 8),
            shards=(8, 16, 16),
            n_levels=4,
        )
        writer.array[...] = data
        if name == "finalize":
            writer.finalize()
        else:
            write_pyramid(writer.arrays, cluster=Cluster(memory_limit=2**21, threads=2))
    expected = data
    for level in range(1, 4):
        expected = downsample_mean(expected)
        for path in paths.values():
            stored = zarr.open_array(str(path / str(level)), mode="r")[...]
            np.testing.assert_array_equal(stored, expected)


# --- clusters -----------------------------------------------------------------------------------


def test_parse_size() -> None:
    assert parse_size("2GiB") == 2**31 and parse_size("1.5 MB") == 1_500_000
    for bad in ("lots", "-1GiB", "0", ""):
        with pytest.raises(LinumpyError, match="not a size"):
            parse_size(bad)


def test_memory_limit_smaller_than_one_block_says_the_smallest_that_works() -> None:
    cluster = Cluster(memory_limit=2**20, threads=4)
    with pytest.raises(MemoryLimitError, match=r"use at least 5\.33 MiB") as error:
        cluster.task_bytes(4 * 2**20, "stitching")
    assert error.value.needed == int(4 * 2**20 / 0.75) + 1
    assert Cluster(memory_limit=error.value.needed, threads=4).task_bytes(4 * 2**20) >= 4 * 2**20
    # local threads: fewer run when the limit holds fewer blocks
    cluster = Cluster(memory_limit=16 * 2**20, threads=4)  # 12 MiB for the blocks
    assert cluster.task_bytes(4 * 2**20) == 4 * 2**20 and cluster.threads == 3
    assert cluster.task_bytes(2**20) == 3 * 2**20 and cluster.threads == 4


def test_gpu_jobs_on_local_threads_use_fewer_threads_and_larger_blocks() -> None:
    cluster = Cluster(threads=8)
    assert cluster.task_bytes(2**20) == DEFAULT_TASK_BYTES and cluster.threads == 8
    # threads the caller set are kept
    assert cluster.task_bytes(2**20, gpu=True) == DEFAULT_GPU_TASK_BYTES and cluster.threads == 8
    default = Cluster()
    default.max_threads = 8  # as on an 8-CPU machine
    assert default.task_bytes(2**20, gpu=True) == DEFAULT_GPU_TASK_BYTES
    assert default.threads == DEFAULT_GPU_THREADS
    # a GPU job is not split below DEFAULT_GPU_TASK_BYTES for parallelism...
    assert default.task_bytes(2**20, total=2**34, gpu=True) == DEFAULT_GPU_TASK_BYTES
    assert default.task_bytes(2**20, total=2**40, gpu=True) == DEFAULT_GPU_TASK_BYTES
    # ... and the next CPU job gets every thread back
    assert default.task_bytes(2**20) == DEFAULT_TASK_BYTES and default.threads == 8


def test_unreachable_scheduler_fails_fast() -> None:
    with (
        pytest.raises(ClusterError, match="cannot reach the dask scheduler at 'tcp://127.0.0.1:9'"),
        dask_cluster(scheduler="tcp://127.0.0.1:9"),
    ):
        pass


def test_cluster_option_errors() -> None:
    with pytest.raises(ClusterError, match="positive number of GPUs"), dask_cluster(gpus=0):
        pass
    both = {"gpus": 1, "scheduler": "tcp://127.0.0.1:9"}
    with pytest.raises(ClusterError, match="not both"), dask_cluster(**both):
        pass


@pytest.mark.skipif(HAS_DASK_CUDA, reason="dask-cuda is installed here")
def test_gpus_without_dask_cuda_names_the_extra() -> None:
    extra = r"pip install -e '\.\[gpu-cu13\]'"
    with pytest.raises(ClusterError, match=extra) as error, dask_cluster(gpus=1):
        pass
    assert "pip install linumpy" not in str(error.value)


@pytest.mark.skipif(not HAS_DASK_CUDA, reason="needs dask-cuda")
def test_more_gpus_than_visible() -> None:
    with pytest.raises(ClusterError, match="GPU\\(s\\) are visible"), dask_cluster(gpus=1024):
        pass


@pytest.fixture(scope="module")
def local_cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        memory_limit="1GiB",
    ) as cluster:
        yield cluster


def test_local_cluster_reads_and_writes_the_same_bytes(tmp_path: Path, local_cluster) -> None:
    data = sample_data((24, 40, 40), "uint16")
    source = tmp_path / "in.ome.zarr"
    save_omezarr(data, source, voxel_size=(1, 1, 1), chunks=(8, 8, 8), shards=(8, 16, 16))
    outputs = {}
    for name, scheduler in (("threads", None), ("distributed", local_cluster.scheduler_address)):
        with dask_cluster(scheduler=scheduler, memory_limit="64MiB") as cluster:
            outputs[name] = tmp_path / f"{name}.zarr"
            target = zarr.create_array(
                str(outputs[name]),
                shape=data.shape,
                chunks=(4, 8, 8),
                shards=(8, 16, 16),
                dtype="uint16",
            )
            lazy = open_volume(source, chunks=(8, 16, 16)) + 1
            assert store_dask(lazy, target, cluster=cluster) == data.nbytes
            if scheduler:
                assert cluster.client is not None and cluster.threads == 1
                assert int(cluster.compute(open_volume(source).sum())) == int(data.sum())
    files = {
        name: {p.relative_to(path): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}
        for name, path in outputs.items()
    }
    assert files["threads"] == files["distributed"]
    np.testing.assert_array_equal(zarr.open_array(str(outputs["distributed"]))[...], data + 1)


def test_a_large_memory_limit_still_gives_every_worker_blocks(local_cluster) -> None:
    # The regression: a stitch planned from a 128 GiB worker limit was one block, so a second
    # GPU worker had nothing to do.
    step = 0.9 * 256
    transform = TileTransform([[step, 0.0], [0.0, step]], (0.0, 0.0), (256, 256), (4, 4))
    out_shape = (1024, *transform.output_shape())
    with dask_cluster(scheduler=local_cluster.scheduler_address, memory_limit="128GiB") as cluster:
        assert cluster.slots == 2
        block = plan_stitch_block((1024, 1024, 1024), 2, transform, (64, 128, 128), cluster)
    blocks = math.prod(math.ceil(n / b) for n, b in zip(out_shape, block))
    assert blocks >= BLOCKS_PER_SLOT * 2
    # ... but a small job is not cut into blocks smaller than the floor
    small = Cluster(memory_limit=2**40, threads=64)
    assert small.task_bytes(2**20, total=2**30) == SPLIT_FLOOR_BYTES


def test_the_split_does_not_halve_blocks_that_miss_an_even_share_by_a_hair(local_cluster) -> None:
    # The 2-GPU stitch's regression: the block of a quarter of a slot's share cost a hair more
    # than that (a tile and a plane of weights do not shrink with the block), so each slot got 8
    # blocks of half the depth, which on the GPU took 1.6x as long (docs/gpu_guide.md, SPLIT_SLACK).
    # A GPU job is cut into GPU_BLOCKS_PER_SLOT blocks per slot, not BLOCKS_PER_SLOT.
    step = 0.9 * 256
    transform = TileTransform([[step, 0.0], [0.0, step]], (0.0, 0.0), (256, 256), (4, 4))
    out_shape = (1024, *transform.output_shape())
    with dask_cluster(scheduler=local_cluster.scheduler_address, memory_limit="128GiB") as cluster:
        slots = cluster.slots
        block = plan_stitch_block(
            (1024, 1024, 1024), 2, transform, (64, 128, 128), cluster, (64, 64, 64), gpu=True
        )
    blocks = math.prod(math.ceil(n / b) for n, b in zip(out_shape, block))
    assert block == (1024 // (GPU_BLOCKS_PER_SLOT * slots), *out_shape[1:])
    assert blocks == GPU_BLOCKS_PER_SLOT * slots


def test_a_gpu_task_stays_within_its_share_of_the_device() -> None:
    # One block per GPU task (GPU_BLOCKS_PER_SLOT) makes blocks as large as the host's limit
    # allows; the device's memory bounds them too, shared by the tasks that run on it at once.
    device = 8 * 2**30
    two_threads = Cluster(memory_limit=2**40, threads=2, device_bytes=device)
    budget = two_threads.task_bytes(2**20, total=2**36, gpu=True)
    assert budget == int(device * GPU_DEVICE_SHARE) // two_threads.threads
    assert two_threads.threads == 2
    # the host's limit alone without a known device (a scheduler elsewhere), or for CPU jobs
    assert Cluster(memory_limit=2**40, threads=2, device_bytes=0).task_bytes(
        2**20, total=2**36, gpu=True
    ) == int(2**36 * SPLIT_SLACK) // (GPU_BLOCKS_PER_SLOT * 2)
    assert Cluster(memory_limit=2**40, threads=2, device_bytes=device).task_bytes(
        2**20, total=2**36
    ) == int(2**36 * SPLIT_SLACK) // (BLOCKS_PER_SLOT * 2)
    # a block's smallest working set is kept even when the device's share is below it
    tiny = Cluster(memory_limit=2**40, threads=2, device_bytes=2**20)
    assert tiny.task_bytes(2**22, total=2**36, gpu=True) == 2**22


# --- GPU ----------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_gpu_open_volume_equals_zarr_with_cupy_meta(tmp_path: Path, layout: str) -> None:
    import cupy

    data = sample_data((37, 45, 50), "uint16")
    array = make_array(tmp_path / "a.zarr", layout, data, chunks=(8, 16, 16))
    lazy = open_volume(tmp_path / "a.zarr", gpu=True, chunks=(16, 32, -1))
    assert isinstance(lazy._meta, cupy.ndarray)
    result = lazy.compute()
    assert isinstance(result, cupy.ndarray)
    np.testing.assert_array_equal(result.get(), array[...])
    total = lazy.sum(dtype="float64").compute()
    assert float(total) == float(data.sum(dtype="float64"))


@pytest.mark.gpu
def test_gpu_store_dask_encodes_cupy_blocks(tmp_path: Path) -> None:
    import cupy

    data = sample_data((32, 48, 48), "float32")
    target = zarr.create_array(
        str(tmp_path / "t.zarr"),
        shape=data.shape,
        chunks=(8, 16, 16),
        shards=(16, 48, 48),
        dtype="float32",
    )
    lazy = da.from_array(data, chunks=(16, 48, 48)).map_blocks(
        cupy.asarray, meta=cupy.empty((0, 0, 0), "float32")
    )
    assert store_dask(lazy, target) == data.nbytes
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "t.zarr"))[...], data)


@pytest.mark.gpu
def test_gpu_local_cuda_cluster_on_two_gpus(tmp_path: Path) -> None:
    from linumpy.parallel.gpu_devices import visible_gpus

    if not HAS_DASK_CUDA or visible_gpus() < 2:
        pytest.skip("needs dask-cuda and 2 visible GPUs")
    data = sample_data((64, 64, 64), "uint16")
    source = tmp_path / "in.ome.zarr"
    save_omezarr(data, source, voxel_size=(1, 1, 1), chunks=(16, 16, 16), shards=(16, 64, 64))
    with dask_cluster(gpus=2) as cluster:
        assert len(cluster.client.scheduler_info()["workers"]) == 2
        total = cluster.compute(open_volume(source, gpu=True, chunks=(16, -1, -1)).sum())
    assert int(total) == int(data.sum())


def test_scripts_on_a_local_cluster_write_the_same_bytes(tmp_path: Path, local_cluster) -> None:
    from linumpy.mosaic.demo import make_demo_data, read_demo_truth
    from linumpy.scripts import linum_aip, linum_convert_to_omezarr, linum_stitch_3d

    mosaic = tmp_path / "mosaic.ome.zarr"
    make_demo_data(mosaic, grid_shape=(2, 3), tile_shape=(8, 48, 48))
    read_demo_truth(mosaic).save(tmp_path / "transform.json")
    where = {"threads": [], "cluster": ["--scheduler", local_cluster.scheduler_address]}
    for name, options in where.items():
        stitched = tmp_path / name / "stitched.ome.zarr"
        stitched.parent.mkdir()
        linum_stitch_3d.main(
            [str(mosaic), str(tmp_path / "transform.json"), str(stitched), *options]
        )
        linum_aip.main([str(stitched), str(tmp_path / name / "aip.ome.zarr"), *options])
        np.save(tmp_path / name / "aip.npy", zarr.open_array(str(stitched / "0"))[:, :40])
        linum_convert_to_omezarr.main(
            [str(tmp_path / name / "aip.npy"), str(tmp_path / name / "c.ome.zarr"), *options]
        )
    for image in ("stitched.ome.zarr", "aip.ome.zarr", "c.ome.zarr"):
        trees = [
            {
                p.relative_to(tmp_path / n): p.read_bytes()
                for p in (tmp_path / n / image).rglob("*")
                if p.is_file()
            }
            for n in where
        ]
        assert trees[0] == trees[1], image


def test_gpu_reads_of_large_chunks_decode_on_the_host() -> None:
    def array(shape: tuple[int, ...], dtype: str) -> zarr.Array:
        return zarr.create_array({}, shape=shape, chunks=shape, dtype=dtype)

    assert not host_decoded(array((32, 32), "uint16"))
    assert host_decoded(array((4096, 4096), "float32"))
