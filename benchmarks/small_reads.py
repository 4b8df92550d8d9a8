"""Dev benchmark: small regions read one after the other, arrays reopened or kept.

Writes a 64^3 uint16 OME-Zarr image (32^3 chunks) and times ``read_volume`` of an 8^3 region
``--reads`` times: with opened arrays kept (:mod:`linumpy.io.opened`) and with every read
opening its array afresh (``open_once`` patched out), interleaved. Prints the medians.

    python3 benchmarks/small_reads.py --reads 50
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np

from linumpy.io import read_volume, save_omezarr


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reads", type=int, default=50)
    parser.add_argument("--gpu", action="store_true")
    args = parser.parse_args()
    path = Path(tempfile.mkdtemp()) / "v.ome.zarr"
    save_omezarr(np.ones((64, 64, 64), np.uint16), path, voxel_size=(1, 1, 1), chunks=(32,) * 3)
    region = (slice(0, 8),) * 3
    afresh = mock.patch("linumpy.io.omezarr.open_once", lambda path, level, fresh: fresh()[0])
    times: dict[str, list[float]] = {"kept": [], "opened afresh": []}
    for _ in range(args.reads):
        for label, patch in (("kept", contextlib.nullcontext()), ("opened afresh", afresh)):
            with patch:
                started = time.perf_counter()
                read_volume(path, region=region, gpu=args.gpu)
                times[label].append(time.perf_counter() - started)
    print("| arrays | ms per 8^3 read (median) |\n| --- | ---: |")
    for label, seconds in times.items():
        print(f"| {label} | {statistics.median(seconds) * 1e3:.2f} |")


if __name__ == "__main__":
    main()
