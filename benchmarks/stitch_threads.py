"""Dev check on a GPU: the 3-D stitch of the notebook's benchmark mosaic (6 x 6 tiles of
(96, 512, 512), 1.69 GiB uint16, 3 levels), on the CPU, and on the GPU with the local threaded
scheduler at several thread counts (``default``: what ``Cluster()`` picks).
``python benchmarks/stitch_threads.py [THREADS|default ...]``."""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    import cupy

    from linumpy.io.demo import make_demo_data, read_demo_truth
    from linumpy.mosaic.pipeline import stitch_omezarr
    from linumpy.parallel import Cluster

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("distributed").setLevel(logging.WARNING)
    counts = [None if n == "default" else int(n) for n in sys.argv[1:]] or [None, 16]
    folder = Path(tempfile.mkdtemp())
    mosaic = folder / "mosaic.ome.zarr"
    make_demo_data(mosaic, grid_shape=(6, 6), tile_shape=(96, 512, 512), xp=cupy)
    transform = read_demo_truth(mosaic)
    rows = []
    runs = [("CPU, default threads", False, None)]
    runs += [(f"GPU, {n or 'default'} threads", True, n) for n in counts]
    for what, gpu, threads in runs:
        start = time.perf_counter()
        stitch_omezarr(mosaic, folder / "out.ome.zarr", transform, gpu=gpu, n_levels=3,
                       overwrite=True, cluster=Cluster(threads=threads))  # fmt: skip
        rows.append((what, time.perf_counter() - start))
        print(f"{what}: {rows[-1][1]:.2f} s", flush=True)
    print("| run | s |\n| --- | --- |")
    for what, seconds in rows:
        print(f"| {what} | {seconds:.2f} |")


if __name__ == "__main__":
    main()
