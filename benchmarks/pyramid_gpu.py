"""Dev check on a GPU: the pyramid of the notebook's stitched mosaic (levels 1 and 2 from level
0, float32, (32, 128, 128) chunks) on the CPU and on the GPU against local threads and the block
budget. ``python benchmarks/pyramid_gpu.py``."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path


def main() -> None:
    import cupy
    import zarr

    import linumpy.parallel as parallel
    from linumpy.io.dask_write import write_pyramid
    from linumpy.io.demo import make_demo_data, read_demo_truth
    from linumpy.mosaic.pipeline import stitch_omezarr
    from linumpy.parallel import Cluster

    folder = Path(tempfile.mkdtemp())
    mosaic, out = folder / "mosaic.ome.zarr", folder / "out.ome.zarr"
    make_demo_data(mosaic, grid_shape=(6, 6), tile_shape=(96, 512, 512), xp=cupy)
    stitch_omezarr(mosaic, out, read_demo_truth(mosaic), gpu=True, n_levels=3,
                   cluster=Cluster(threads=4))  # fmt: skip
    group = zarr.open_group(str(out), mode="r+")
    arrays = [group[str(i)] for i in range(3)]
    print("levels", [a.shape for a in arrays], "chunks", arrays[0].chunks, flush=True)
    rows = []
    runs = [(False, 16, None, 4)]
    runs += [(True, t, b, 4) for t in (2, 4, 16) for b in (None, 2**30)]
    runs += [(True, 4, 2**30, 1), (True, 2, 2**30, 1)]
    for gpu, threads, task, per_slot in runs + [(False, 16, None, 4)]:
        parallel.BLOCKS_PER_SLOT = parallel.GPU_BLOCKS_PER_SLOT = per_slot
        limit = None if task is None else int(task * threads / parallel.TASK_SHARE)
        start = time.perf_counter()
        write_pyramid(arrays, axes=(0, 1, 2), gpu=gpu,
                      cluster=Cluster(threads=threads, memory_limit=limit))  # fmt: skip
        rows.append((gpu, threads, task, per_slot, time.perf_counter() - start))
        print(rows[-1], flush=True)
    print(
        "| device | threads | task bytes | blocks per slot | s |\n| --- | --- | --- | --- | --- |"
    )
    for gpu, threads, task, per_slot, seconds in rows:
        size = "128 MiB (default)" if task is None else f"{task / 2**30:.0f} GiB"
        print(f"| {'GPU' if gpu else 'CPU'} | {threads} | {size} | {per_slot} | {seconds:.2f} |")


if __name__ == "__main__":
    main()
