"""Dev benchmark: one thread's libzstd decode of a 4 MiB chunk against placing it in a volume.

A 128^3 uint16 chunk of the OCT-like volume (zstd level 3) is decoded into a contiguous buffer,
then copied into its place in a (128, 1024, 1024) volume, as the CPU reader does for chunks that
are not contiguous in the output. Medians of 30; prints a table.

    python3 benchmarks/copy_cost.py
"""

from __future__ import annotations

import time

import numpy as np
from numcodecs import Zstd

from linumpy.bench import oct_volume
from linumpy.io.engine import libzstd


def median_ms(f: object, n: int = 30) -> float:
    f()  # type: ignore[operator]
    times = []
    for _ in range(n):
        started = time.perf_counter()
        f()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return float(np.median(times)) * 1e3


def main() -> None:
    volume = oct_volume((128, 1024, 1024))
    chunk = np.ascontiguousarray(volume[:, :128, :128])
    frame = np.frombuffer(Zstd(level=3).encode(chunk), np.uint8)
    out = np.zeros((128, 1024, 1024), np.uint16)
    scratch = np.empty(chunk.nbytes, np.uint8)
    source, target = frame.ctypes.data, scratch.ctypes.data
    decode = median_ms(lambda: libzstd.decode_into(source, frame.size, target, chunk.nbytes))
    view = scratch.view(np.uint16).reshape(128, 128, 128)
    copy = median_ms(lambda: out[:, 256:384, 512:640].__setitem__(Ellipsis, view))
    print(f"| one thread, 128^3 uint16 chunk (ratio {chunk.nbytes / frame.size:.2f}) | ms |")
    print("| --- | ---: |")
    print(f"| libzstd decode into a contiguous buffer | {decode:.2f} |")
    print(f"| copy of the decoded chunk into a (128, 1024, 1024) volume | {copy:.2f} |")


if __name__ == "__main__":
    main()
