"""Dev benchmark: zarr's GPU write (nvCOMP encode) with host or device byte buffers.

Writes the 1 GiB OCT-like volume, held on the device, with zarr and ``NvcompZstdCodec`` inside
``gpu_zarr_context`` (host byte buffers: encoded frames go to the store from the host) and under
``enable_gpu()`` with the codec's config (device byte buffers: frames uploaded again, then
copied back by the store), in interleaved rounds, each into a new array (the previous one
removed first, outside the timing). The first write of each kind is read back and checked.

    python3 benchmarks/codec_writes.py --layouts "128^3" "sharded 64^3" --rounds 3
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import cupy
import numpy as np
import zarr
from codec_calls import LAYOUTS, codec_context

from linumpy.bench import oct_volume, write_volume
from linumpy.gpu.nvcomp_zstd import NvcompZstdCodec


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", nargs="*", default=list(LAYOUTS), choices=list(LAYOUTS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    volume = oct_volume((512, 1024, 1024))
    device = cupy.asarray(volume)
    table = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as folder:
        for name in args.layouts:
            times: dict[str, list[float]] = {"host": [], "device": []}
            for round_ in range(args.rounds + 1):  # the first round warms up and checks
                for where in times:
                    path = Path(folder) / f"{where}.zarr"
                    shutil.rmtree(path, ignore_errors=True)
                    start = time.perf_counter()
                    with codec_context(where):
                        write_volume(path, device, LAYOUTS[name], NvcompZstdCodec(level=3))
                    seconds = time.perf_counter() - start
                    if round_ == 0:
                        read = zarr.open_array(path, mode="r")[...]
                        assert np.array_equal(read, volume), f"{name}, {where}: wrong bytes"
                    else:
                        times[where].append(seconds)
            host, dev = (volume.nbytes / statistics.median(times[k]) / 1e9 for k in times)
            table.append((name, host, dev))
    print("\n| layout | host byte buffers GB/s | device byte buffers GB/s | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for name, host, dev in table:
        print(f"| {name} | {host:.2f} | {dev:.2f} | {host / dev:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
