"""The scripts on a dask cluster of separate processes (a scheduler and two workers, each in a
working directory of its own, on 127.0.0.1): outputs equal to local runs, whatever the working
directories hold; failures fast and in one line; named timeouts."""

from __future__ import annotations

import _thread
import os
import re
import threading
import time
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
from cluster_processes import LoopbackCluster, sleep_a_second, slow_or_failing

from linumpy.errors import ClusterLostError, InputMismatchError
from linumpy.io import read_volume
from linumpy.mosaic.demo import make_demo_data, read_demo_truth
from linumpy.parallel import dask_cluster
from linumpy.parallel.task_inputs import check_same_input
from linumpy.scripts import linum_aip, linum_stitch_3d

distributed = pytest.importorskip("distributed")

WORKERS = ("worker-a", "worker-b")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    processes = LoopbackCluster(tmp_path_factory.mktemp("cluster"))
    try:
        for name in WORKERS:
            processes.start_worker(name, wait=False)
        for name in WORKERS:
            processes.wait_for(name)
        yield processes
    finally:
        processes.close()


@pytest.fixture(scope="module")
def stitched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stitched demo image (local run), in a folder the tests run the client from."""
    folder = tmp_path_factory.mktemp("client")
    grid = folder / "grid.ome.zarr"
    make_demo_data(grid, grid_shape=(2, 3), tile_shape=(16, 64, 64), seed=1)
    read_demo_truth(grid).save(folder / "transform.json")
    stitch = [str(grid), str(folder / "transform.json"), str(folder / "stitched")]
    linum_stitch_3d.main([*stitch, "--chunks", "8", "64", "64"])  # a few chunks, one shard
    return folder


def _one_line_exit(
    capsys: pytest.CaptureFixture[str], argv: list[str], main
) -> tuple[int, str, str]:
    """The exit status of ``main(argv)``, its message without the progress bar, and its stderr."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    # the progress bar's redraws end in carriage returns: what is left is the command's message
    lines = [line for line in err.split("\n") if line.strip()]
    lines = [line.rpartition("\r")[2] for line in lines]
    message = "\n".join(line for line in lines if not re.search(r"\d+/\d+ \[", line))
    return exit_info.value.code, message, err


def test_relative_paths_are_the_clients_and_both_workers_project(
    cluster: LoopbackCluster, stitched: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each worker's working directory holds another image of the same name
    for name in WORKERS:
        make_demo_data(cluster.folder(name) / "stitched", grid_shape=(1, 1), tile_shape=(8, 8, 8))
    monkeypatch.chdir(stitched)
    linum_aip.main(["stitched", "local.ome.zarr"])
    with (
        distributed.Client(cluster.address, set_as_default=False) as client,
        distributed.get_task_stream(client) as stream,
    ):
        linum_aip.main(["stitched", "remote.ome.zarr", "--scheduler", cluster.address])
    np.testing.assert_array_equal(
        read_volume("remote.ome.zarr"), read_volume("local.ome.zarr"), strict=True
    )
    workers = {task["worker"] for task in stream.data}
    assert len(workers) == 2, f"tasks ran on {workers} only"
    for name in WORKERS:  # nothing written in a worker's own directory
        assert sorted(p.name for p in cluster.folder(name).iterdir()) == ["dask-local", "stitched"]


def test_the_registration_projection_runs_on_the_workers(
    cluster: LoopbackCluster, stitched: Path
) -> None:
    from linumpy.mosaic.pipeline import estimate_transform_omezarr

    grid = stitched / "grid.ome.zarr"
    local, _ = estimate_transform_omezarr(grid, min_score=0.3)
    with (
        dask_cluster(scheduler=cluster.address, timeout=30) as on_workers,
        distributed.get_task_stream(on_workers.client) as stream,
    ):
        remote, _ = estimate_transform_omezarr(grid, min_score=0.3, cluster=on_workers)
    assert any("column" in task["key"][0] for task in stream.data), stream.data
    assert remote.to_dict() == local.to_dict()


def test_a_worker_seeing_another_input_fails_naming_itself(
    cluster: LoopbackCluster, stitched: Path
) -> None:
    path = str(stitched / "stitched")
    check_same_input(path, _digest(path))  # the client's own view agrees
    with distributed.Client(cluster.address, set_as_default=False) as client:
        future = client.submit(check_same_input, path, "0" * 64, pure=False)
        with pytest.raises(InputMismatchError, match=r"dask worker tcp://127\.0\.0\.1:\d+ sees"):
            future.result(timeout=30)
        missing = client.submit(check_same_input, path + "-gone", _digest(path), pure=False)
        with pytest.raises(InputMismatchError, match="cannot see the input"):
            missing.result(timeout=30)


def _digest(path: str) -> str:
    from linumpy.parallel.task_inputs import input_digest

    digest = input_digest(path)
    assert digest is not None and digest != "missing"
    return digest


def test_the_first_failed_task_stops_the_job(cluster: LoopbackCluster, tmp_path: Path) -> None:
    # the first of 20 tasks fails, the others take 1 s on 2 workers: 10 s unless it stops them
    marker = str(tmp_path / "first")
    work = da.ones(20, chunks=1).map_blocks(slow_or_failing, marker, meta=np.empty(0))
    with dask_cluster(scheduler=cluster.address, timeout=30) as on_workers:
        with pytest.raises(ValueError, match="the first task found a corrupt chunk"):
            on_workers.compute(work)
        # from the failing task's start (it created the marker) to the error here
        elapsed = time.time() - os.stat(marker).st_mtime
        assert elapsed < 3.0, f"the job went on for {elapsed:.1f} s after its first failure"
        processing = on_workers.client.processing()
    assert not any(processing.values())  # the other tasks were cancelled, none runs on


def test_ctrl_c_cancels_the_jobs_tasks(cluster: LoopbackCluster) -> None:
    # 20 tasks of 1 s on 2 workers; Ctrl-C after 1.5 s: the rest never run
    work = da.ones(20, chunks=1).map_blocks(sleep_a_second, meta=np.empty(0))
    interrupt_time: list[float] = []

    def interrupt_main() -> None:
        interrupt_time.append(time.monotonic())
        _thread.interrupt_main()

    with dask_cluster(scheduler=cluster.address, timeout=30) as on_workers:
        interrupt = threading.Timer(1.5, interrupt_main)
        interrupt.start()
        with pytest.raises(KeyboardInterrupt):
            on_workers.compute(work)
        elapsed = time.monotonic() - interrupt_time[0]
        processing = on_workers.client.processing()
        tasks = on_workers.client.who_has()
    assert elapsed < 4.0, f"Ctrl-C took {elapsed:.1f} s to stop the job"
    assert not any(processing.values())  # the tasks running then ended before the clean-up
    assert not tasks  # and nothing of the job stays on the workers


def test_each_task_flushes_its_files_on_its_host(cluster: LoopbackCluster, tmp_path: Path) -> None:
    from linumpy.io.durable import flush_on_worker

    with distributed.Client(cluster.address, set_as_default=False) as client:
        assert client.submit(flush_on_worker, str(tmp_path), pure=False).result(timeout=30)
    assert not flush_on_worker(tmp_path)  # the client's writes are flushed by its swap


def test_a_corrupt_chunk_exits_2_in_one_line(
    cluster: LoopbackCluster, stitched: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = tmp_path / "grid.ome.zarr"
    make_demo_data(grid, grid_shape=(2, 2), tile_shape=(16, 64, 64))
    chunk = next(p for p in sorted((grid / "0").rglob("*")) if p.is_file() and "c" in p.parts)
    chunk.write_bytes(b"not zstd at all" * 8)
    argv = [str(grid), str(tmp_path / "aip.ome.zarr"), "--scheduler", cluster.address]
    status, err, stderr = _one_line_exit(capsys, argv, linum_aip.main)
    assert "100%" not in stderr  # the bar stops where the job did
    assert status == 2
    assert len(err.splitlines()) == 1 and err.startswith("linum-aip: error:"), err
    assert not (tmp_path / "aip.ome.zarr").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["grid.ome.zarr"]  # no staging left


def test_use_gpu_asks_the_workers(
    cluster: LoopbackCluster, stitched: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("linumpy.gpu.zarr_io")
    from linumpy.cli.parser import gpu_reason

    if gpu_reason() is None:
        pytest.skip("this machine has a GPU: its workers would too")
    argv = [str(stitched / "stitched"), str(tmp_path / "aip.ome.zarr"), "--use-gpu"]
    status, err, _ = _one_line_exit(capsys, [*argv, "--scheduler", cluster.address], linum_aip.main)
    assert status == 2
    assert len(err.splitlines()) == 1, err
    assert "--use-gpu: dask worker tcp://127.0.0.1:" in err and "has no usable GPU" in err


def test_no_workers_is_a_named_timeout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    alone = LoopbackCluster(tmp_path / "alone")
    try:
        grid = tmp_path / "grid.ome.zarr"
        make_demo_data(grid, grid_shape=(1, 2), tile_shape=(8, 16, 16))
        argv = [str(grid), str(tmp_path / "aip.ome.zarr"), "--scheduler", alone.address]
        argv += ["--cluster-timeout", "1"]
        status, err, _ = _one_line_exit(capsys, argv, linum_aip.main)
        # the only worker leaves mid-job: the job fails once none is back within the timeout
        alone.start_worker("leaving")
        killer = threading.Timer(2.0, alone.kill, args=("leaving",))
        with (
            pytest.raises(ClusterLostError, match="every dask worker of the scheduler") as lost,
            dask_cluster(scheduler=alone.address, timeout=1.0) as waiting,
        ):
            killer.start()
            start = time.monotonic()
            waiting.compute(da.ones(60, chunks=1).map_blocks(sleep_a_second, meta=np.empty(0)))
        assert time.monotonic() - start < 30, "the job waited on without workers"
        assert f"at '{alone.address}' was lost" in str(lost.value)
        assert "within 1 s (--cluster-timeout)" in str(lost.value)
        # the scheduler itself dies mid-job: one line naming it, without waiting
        alone.start_worker("staying")
        with (
            pytest.raises(ClusterLostError, match="lost the dask scheduler at") as gone,
            dask_cluster(scheduler=alone.address, timeout=30) as orphan,
        ):
            threading.Timer(2.0, alone.scheduler.kill).start()
            orphan.compute(da.ones(60, chunks=1).map_blocks(sleep_a_second, meta=np.empty(0)))
        assert alone.address in str(gone.value)
    finally:
        alone.close()
    assert status == 1
    assert err == (
        f"linum-aip: error: no dask worker joined the scheduler at '{alone.address}' within 1 s "
        "(--cluster-timeout); are the workers' jobs running?"
    )


def test_killing_one_of_two_workers_mid_stitch_gives_the_local_output(
    cluster: LoopbackCluster, stitched: Path, tmp_path: Path
) -> None:
    grid = tmp_path / "grid.ome.zarr"
    make_demo_data(grid, grid_shape=(3, 3), tile_shape=(64, 128, 128), seed=3)
    read_demo_truth(grid).save(tmp_path / "transform.json")
    common = [str(grid), str(tmp_path / "transform.json")]
    linum_stitch_3d.main([*common, str(tmp_path / "local"), "--memory-limit", "96MiB"])
    killed: list[str] = []
    finished = threading.Event()

    def kill_the_first_busy_worker() -> None:
        with distributed.Client(cluster.address, set_as_default=False) as client:
            while not finished.is_set():
                workers = client.scheduler_info()["workers"]
                busy = [workers[w]["name"] for w, keys in client.processing().items() if keys]
                busy = [name for name in busy if name in WORKERS]
                if busy:
                    cluster.kill(busy[0])
                    killed.append(busy[0])
                    return
                time.sleep(0.01)

    killer = threading.Thread(target=kill_the_first_busy_worker)
    killer.start()
    try:
        linum_stitch_3d.main(
            [*common, str(tmp_path / "remote"), "--memory-limit", "96MiB"]
            + ["--scheduler", cluster.address]
        )
    finally:
        finished.set()
        killer.join()
    try:
        assert killed, "no worker was busy during the stitch"
        for level in range(2):
            np.testing.assert_array_equal(
                read_volume(tmp_path / "remote", level=level),
                read_volume(tmp_path / "local", level=level),
                strict=True,
            )
    finally:
        for name in killed:  # the cluster has its two workers again
            cluster.start_worker(name)


def test_task_paths_are_absolute_and_inputs_are_checked(tmp_path: Path, monkeypatch) -> None:
    from linumpy.parallel.task_inputs import input_digest, task_path

    monkeypatch.chdir(tmp_path)
    assert task_path("data/a.zarr") == str(tmp_path / "data" / "a.zarr")
    assert task_path("file://data/a.zarr") == f"file://{tmp_path / 'data' / 'a.zarr'}"
    assert task_path("s3://lab/a.zarr") == "s3://lab/a.zarr"
    assert input_digest("s3://lab/a.zarr") is None
    assert input_digest("file://data/a.zarr") == input_digest("data/a.zarr") == "missing"
    (tmp_path / "data" / "a.zarr").mkdir(parents=True)
    (tmp_path / "data" / "a.zarr" / "zarr.json").write_text('{"zarr_format": 3}')
    assert len(input_digest("file://data/a.zarr")) == 64
    with pytest.raises(InputMismatchError, match="this process sees another input at"):
        check_same_input("data/a.zarr", "0" * 64)
    with pytest.raises(InputMismatchError, match="this process cannot see the input"):
        check_same_input("data/b.zarr", "0" * 64)


def test_other_versions_on_a_worker_are_named() -> None:
    from linumpy.parallel.workers import version_mismatches

    versions = {
        "client": {"packages": {"zarr": "3.1"}},
        "scheduler": {"packages": {"zarr": "3.1"}},
        "workers": {"tcp://w:1": {"packages": {"zarr": "3.0"}}, "tcp://w:2": {"packages": {}}},
    }
    assert version_mismatches(versions, ("zarr",)) == [
        "worker tcp://w:1 has zarr 3.0, the client 3.1",
        "worker tcp://w:2 has zarr missing, the client 3.1",
    ]
