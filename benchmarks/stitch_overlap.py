"""Dev check on 2 GPUs: does the GPU stitch of dask_gpu.py's volume gain from more threads per
dask-cuda worker (the read, stitch, encode and write of one block overlap another's)? Medians of
3 ``stitch_omezarr(gpu=True)`` runs (one level) on local threads and on LocalCUDACluster with 1
or 2 threads per worker. ``python benchmarks/stitch_overlap.py``."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def main() -> None:
    from dask_cuda import LocalCUDACluster
    from dask_gpu import make_volume
    from distributed import Client

    from linumpy.mosaic.pipeline import stitch_omezarr
    from linumpy.mosaic.transform import TileTransform
    from linumpy.parallel import Cluster

    folder = Path(tempfile.mkdtemp(dir="/tmp"))
    path = folder / "volume.ome.zarr"
    make_volume(path, 2.0)
    step = 0.9 * 256
    transform = TileTransform([[step, 0.0], [0.0, step]], (0.0, 0.0), (256, 256), (4, 4))

    def timed(cluster: Cluster) -> float:
        times = []
        for _ in range(3):
            start = time.perf_counter()
            stitch_omezarr(path, folder / "out.ome.zarr", transform, gpu=True, n_levels=1,
                           chunks=(64, 128, 128), cluster=cluster, overwrite=True)  # fmt: skip
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    rows = [("local threads, 1 GPU, default", timed(Cluster()))]
    rows.append(("local threads, 1 GPU, 4 threads", timed(Cluster(threads=4))))
    print(rows, flush=True)
    for gpus in (1, 2):
        for threads in (1, 2, 4):
            with (
                LocalCUDACluster(
                    n_workers=gpus,
                    CUDA_VISIBLE_DEVICES=list(range(gpus)),
                    threads_per_worker=threads,
                ) as cuda,  # fmt: skip
                Client(cuda) as client,
            ):
                cluster = Cluster(client, memory_limit=64 * 2**30, gpus=gpus)
                timed(cluster)  # warm the workers
                rows.append((f"LocalCUDACluster, {gpus} GPU(s), {threads} thread(s)",
                             timed(cluster)))  # fmt: skip
                print(rows[-1], flush=True)
    print("| run | s (median of 3) |\n| --- | --- |")
    for what, seconds in rows:
        print(f"| {what} | {seconds:.2f} |")


if __name__ == "__main__":
    main()
