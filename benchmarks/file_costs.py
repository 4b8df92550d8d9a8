"""Dev benchmark: where the time of reading many chunk files goes, on N threads.

The CPU reader's time on 64^3 chunk files is the decode ceiling's plus the file reads' (16-core
H200 host, eleventh session), and those reads cost far more per file there than one thread's
copy of the bytes would. This splits one pass over the chunk files of a zarr array (or of
``--files`` synthetic files laid out as zarr's ``c/z/y/x``) into: ``open`` + ``close`` only,
``preadv`` of files opened beforehand, and the reader's own ``open`` + ``preadv`` + ``close``,
each on every ``--threads`` count, the files split in contiguous parts per thread. Page cache
warm (one untimed pass first); medians of ``--rounds``; a table of ms, GB/s of compressed bytes
and microseconds per file per thread.

    python3 benchmarks/file_costs.py --threads 1 8 16 --array /tmp/cpuw/2048-1.zarr
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np


def chunk_files(array: str | None, count: int, kib: int, where: str | None) -> list[str]:
    """The chunk files of ``array``, or ``count`` new files of ``kib`` KiB in c/z/y/x folders
    under ``where``."""
    if array is not None:
        root = Path(array) / "c"
        return sorted(str(p) for p in root.rglob("*") if p.is_file())
    root = Path(tempfile.mkdtemp(prefix="file_costs_", dir=where)) / "c"
    payload = os.urandom(kib * 1024)
    side = max(1, round(count ** (1 / 3)))
    paths = []
    for i in range(count):
        z, y, x = i // (side * side), (i // side) % side, i % side
        path = root / str(z) / str(y) / str(x)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(payload)
        paths.append(str(path))
    return paths


def file_system(path: str) -> str:
    """The type and mount point of the file system holding ``path`` (from /proc/mounts)."""
    best = ("?", "")
    with open("/proc/mounts") as mounts:
        for line in mounts:
            _, point, kind = line.split()[:3]
            if os.path.realpath(path).startswith(point) and len(point) >= len(best[1]):
                best = (kind, point)
    return f"{best[0]} at {best[1]}"


def in_parts(paths: list[str], threads: int, work: Callable[[list[str], int], None]) -> float:
    """Seconds for ``work(part, k)`` on each of ``threads`` contiguous parts of ``paths``."""
    bounds = np.linspace(0, len(paths), threads + 1).astype(int)
    parts = [paths[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    with ThreadPoolExecutor(threads) as pool:
        start = time.perf_counter()
        for future in [pool.submit(work, part, k) for k, part in enumerate(parts)]:
            future.result()
        return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--array", default=None, help="a zarr array folder (its c/ files)")
    parser.add_argument("--files", type=int, default=2048)
    parser.add_argument("--kib", type=int, default=320)
    parser.add_argument("--threads", type=int, nargs="*", default=[1, os.cpu_count() or 1])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--dir", default=None, help="where the synthetic files go (default: TMPDIR)"
    )
    args = parser.parse_args()
    paths = chunk_files(args.array, args.files, args.kib, args.dir)
    sizes = {p: os.stat(p).st_size for p in paths}
    total = sum(sizes.values())
    largest = max(sizes.values())
    buffers = [np.empty(largest, np.uint8) for _ in range(max(args.threads))]

    def open_close(part: list[str], k: int) -> None:
        for path in part:
            os.close(os.open(path, os.O_RDONLY))

    def open_only(part: list[str], k: int) -> None:
        fds = []
        started[k] = time.perf_counter()
        for path in part:
            fds.append(os.open(path, os.O_RDONLY))
        ended[k] = time.perf_counter()
        for fd in fds:
            os.close(fd)

    def close_only(part: list[str], k: int) -> None:
        fds = [os.open(path, os.O_RDONLY) for path in part]
        started[k] = time.perf_counter()
        for fd in fds:
            os.close(fd)
        ended[k] = time.perf_counter()

    def read_open(part: list[str], k: int) -> None:
        view = memoryview(buffers[k])
        fds = [os.open(path, os.O_RDONLY) for path in part]
        try:
            started[k] = time.perf_counter()
            for fd, path in zip(fds, part, strict=True):
                os.preadv(fd, [view[: sizes[path]]], 0)
            ended[k] = time.perf_counter()
        finally:
            for fd in fds:
                os.close(fd)

    def reader(part: list[str], k: int) -> None:
        view = memoryview(buffers[k])
        for path in part:
            fd = os.open(path, os.O_RDONLY)
            os.preadv(fd, [view[: sizes[path]]], 0)
            os.close(fd)

    started: list[float] = [0.0] * max(args.threads)
    ended: list[float] = [0.0] * max(args.threads)

    def opened_first(threads: int) -> float:
        """Every file opened in this thread, then read and closed on ``threads`` threads."""
        start = time.perf_counter()
        fds = {path: os.open(path, os.O_RDONLY) for path in paths}

        def read_close(part: list[str], k: int) -> None:
            view = memoryview(buffers[k])
            for path in part:
                os.preadv(fds[path], [view[: sizes[path]]], 0)
                os.close(fds[path])

        in_parts(paths, threads, read_close)
        return time.perf_counter() - start

    in_parts(paths, 1, reader)  # page cache warm
    print(
        f"{len(paths)} files, {total / 2**20:.0f} MiB, on {file_system(paths[0])}; "
        f"medians of {args.rounds} rounds\n\n"
        "| threads | what | ms | GB/s | us per file per thread |\n"
        "| ---: | --- | ---: | ---: | ---: |"
    )
    for threads in args.threads:
        for name, work in (
            ("open + close", open_close),
            ("open", open_only),
            ("close", close_only),
            ("preadv, files open", read_open),
            ("open + preadv + close", reader),
            ("open in one thread, then preadv + close", None),
        ):
            times = []
            for _ in range(args.rounds):
                if work is None:
                    times.append(opened_first(threads))
                    continue
                seconds = in_parts(paths, threads, work)
                if work in (read_open, open_only, close_only):  # first start to last end
                    seconds = max(ended[:threads]) - min(started[:threads])
                times.append(seconds)
            seconds = statistics.median(times)
            per_file = seconds * threads / len(paths) * 1e6
            rate = (
                "-"
                if work in (open_close, open_only, close_only)
                else f"{total / seconds / 1e9:.2f}"
            )
            print(f"| {threads} | {name} | {seconds * 1e3:.1f} | {rate} | {per_file:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
