# ruff: noqa: B023  (closures are timed at once, inside the loop)
"""Dev benchmark: cost of nvCOMP zstd decode calls, Python Codec vs the C API layer.

Run on a GPU host: python3 benchmarks/nvcomp_calls.py  (prints a table last).
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import cupy
import numpy as np
from numcodecs import Zstd

from linumpy.gpu import nvcomp as layer


def volume(shape: tuple[int, int, int]) -> np.ndarray:
    rng = cupy.random.default_rng(0)
    z = cupy.arange(shape[0], dtype=cupy.float32)[:, None, None]
    atten = cupy.exp(-z / shape[0] * 3)
    speckle = rng.exponential(1.0, shape).astype(cupy.float32)
    noise = rng.standard_normal(shape, dtype=cupy.float32) * 20 + 100
    return cupy.clip(speckle * 2000 * atten + noise, 0, 65535).astype(cupy.uint16).get()


def frames(vol: np.ndarray, c: int) -> list[bytes]:
    z, y, x = vol.shape
    chunks = [
        np.ascontiguousarray(vol[i : i + c, j : j + c, k : k + c])
        for i in range(0, z, c)
        for j in range(0, y, c)
        for k in range(0, x, c)
    ]
    codec = Zstd(level=3)
    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(codec.encode, chunks))


def timeit(fn, repeat=5) -> float:
    fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        cupy.cuda.Device().synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    vol = volume((512, 1024, 1024))
    print("alignments", layer.alignments())
    rows = []
    for c in (128, 64):
        fr = frames(vol, c)
        chunk_nbytes = c**3 * 2
        sizes = np.array([len(f) for f in fr], dtype=np.int64)
        offsets = np.zeros(len(fr), dtype=np.int64)
        offsets[1:] = np.cumsum((sizes + 15) // 16 * 16)[:-1]
        total = int(offsets[-1] + sizes[-1])
        host = np.zeros(total, dtype=np.uint8)
        for o, f in zip(offsets, fr):
            host[o : o + len(f)] = np.frombuffer(f, np.uint8)
        dev_in = cupy.asarray(host)
        dev_out = cupy.empty(len(fr) * chunk_nbytes, dtype=np.uint8)
        n = len(fr)
        src = dev_in.data.ptr + offsets
        dst = dev_out.data.ptr + np.arange(n, dtype=np.int64) * chunk_nbytes
        caps = np.full(n, chunk_nbytes, dtype=np.int64)
        ratio = vol.nbytes / sizes.sum()
        streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(8)]

        def lowlevel(k: int, s: int) -> None:
            pend = []
            for g, idx in enumerate(np.array_split(np.arange(n), k)):
                st = streams[g % s]
                pend.append(layer.decode(src[idx], sizes[idx], dst[idx], caps[idx], stream=st))
            for st in streams[:s]:
                st.synchronize()
            for p in pend:
                p.check()

        t = timeit(lambda: lowlevel(1, 1))
        # correctness
        ref = np.frombuffer(Zstd().decode(fr[n // 2]), np.uint8)
        got = dev_out[(n // 2) * chunk_nbytes : (n // 2 + 1) * chunk_nbytes].get()
        assert np.array_equal(ref, got), "wrong decode"
        rows.append((c, "C API, 1 call", n, t))
        for k, s in ((2, 1), (4, 1), (8, 1), (16, 1), (2, 2), (4, 4), (8, 4), (8, 8)):
            rows.append((c, f"C API, {k} calls on {s} streams", n, timeit(lambda: lowlevel(k, s))))
        try:
            from nvidia import nvcomp

            codec = nvcomp.Codec(algorithm="Zstd", bitstream_kind=nvcomp.BitstreamKind.RAW)

            def python_api(k: int) -> None:
                for idx in np.array_split(np.arange(n), k):
                    codec.decode(
                        nvcomp.as_arrays(dev_in, offsets[idx].tolist(), sizes[idx].tolist()),
                        out=nvcomp.as_arrays(
                            dev_out, (idx * chunk_nbytes).tolist(), caps[idx].tolist()
                        ),
                    )

            for k in (1, 4):
                rows.append((c, f"Python Codec, {k} calls", n, timeit(lambda: python_api(k))))
        except Exception as exc:  # noqa: BLE001
            print("python api failed", exc)
        print(f"chunks {c}^3: {n} frames, ratio {ratio:.2f}")
    print()
    print("| chunks | how | frames | ms | GB/s |")
    print("| --- | --- | --- | --- | --- |")
    for c, how, n, t in rows:
        print(f"| {c}^3 | {how} | {n} | {t * 1e3:.1f} | {vol.nbytes / t / 1e9:.1f} |")


if __name__ == "__main__":
    main()
