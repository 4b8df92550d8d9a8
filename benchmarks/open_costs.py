"""Dev benchmark: what sizing and opening chunk files costs one thread, per file (kvikio, os).

Writes ``--files`` files of ``--kib`` KiB in a temporary directory, then times, in one thread:
``os.stat`` of each, ``kvikio.CuFile`` open + close, the same with ``os.fstat`` of its
``fileno()``, ``os.open`` + ``os.fstat`` + ``os.close``. Medians of ``--rounds``; prints a table.

    python3 benchmarks/open_costs.py --files 2048 --kib 300
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def _time(paths: list[str], one: Callable[[str], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        for path in paths:
            one(path)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=2048)
    parser.add_argument("--kib", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import kvikio

    root = Path(tempfile.mkdtemp())
    payload = os.urandom(args.kib * 1024)
    paths = []
    for i in range(args.files):
        path = root / f"c{i}"
        path.write_bytes(payload)
        paths.append(str(path))

    def cufile(path: str) -> None:
        kvikio.CuFile(path, "r").close()

    def cufile_fstat(path: str) -> None:
        handle = kvikio.CuFile(path, "r")
        os.fstat(handle.fileno())
        handle.close()

    def os_open_fstat(path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        os.fstat(fd)
        os.close(fd)

    cases = {
        "os.stat": os.stat,
        "CuFile open+close": cufile,
        "CuFile open+fstat+close": cufile_fstat,
        "os.open+fstat+close": os_open_fstat,
    }
    print(f"| {args.files} files of {args.kib} KiB, one thread | ms in all | us per file |")
    print("| --- | ---: | ---: |")
    for name, one in cases.items():
        seconds = _time(paths, one, args.rounds)
        print(f"| {name} | {seconds * 1e3:.2f} | {seconds / args.files * 1e6:.2f} |")


if __name__ == "__main__":
    main()
