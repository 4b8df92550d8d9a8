"""Dev check on a GPU: do corrupted (bit-flipped) zstd frames crash nvCOMP's decode?

python3 benchmarks/corrupt_frames.py            # runs each method in a subprocess, prints a table
Each method decodes N frames, each with one random bit flipped inside its compressed blocks (the
headers stay valid, as check_frames would see them), and stops at the first CUDA error.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np

N = 200


def frames() -> tuple[list[bytes], int]:
    from numcodecs import Zstd

    from linumpy.bench import oct_volume

    vol = oct_volume((64, 64, 64))
    good = Zstd(level=3).encode(np.ascontiguousarray(vol))
    rng = np.random.default_rng(1)
    out = []
    for _ in range(N):
        raw = bytearray(good)
        pos = int(rng.integers(20, len(raw) - 8))
        raw[pos] ^= 1 << int(rng.integers(0, 8))
        out.append(bytes(raw))
    return out, vol.nbytes


def run(method: str) -> None:
    import cupy

    from linumpy.io.engine.frames import FRAME_NEEDS_CHECK, check_frames

    data, size = frames()
    ok = wrong = checked_out = 0
    for frame in data:
        host = np.frombuffer(frame, np.uint8)
        if check_frames(host, np.array([0]), np.array([len(frame)]), size)[0] == FRAME_NEEDS_CHECK:
            checked_out += 1
            continue
        dev = cupy.asarray(host)
        out = cupy.empty(size, dtype=np.uint8)
        stream = cupy.cuda.Stream(non_blocking=True)
        if method == "c-api":
            from linumpy.gpu import nvcomp

            pending = nvcomp.decode(
                np.array([dev.data.ptr]), np.array([len(frame)]), np.array([out.data.ptr]),
                np.array([size]), stream=stream,
            )  # fmt: skip
            stream.synchronize()
            try:
                pending.check()
                ok += 1
            except Exception:
                wrong += 1
        else:
            from nvidia import nvcomp as pynv

            codec = pynv.Codec(algorithm="Zstd", bitstream_kind=pynv.BitstreamKind.RAW,
                               cuda_stream=stream.ptr)  # fmt: skip
            codec.decode(pynv.as_arrays(dev, [0], [len(frame)], stream.ptr),
                         out=pynv.as_arrays(out, [0], [size], stream.ptr))  # fmt: skip
            stream.synchronize()
            ok += 1
        done = f"{ok + wrong} decoded ({wrong} flagged)"
        print(f"{method}: {done}, {checked_out} refused by the check", flush=True)


def main() -> None:
    if len(sys.argv) > 1:
        run(sys.argv[1])
        return
    print("| method | last line before exit | exit code |")
    print("| --- | --- | --- |")
    for method in ("c-api", "python-codec"):
        try:
            proc = subprocess.run([sys.executable, __file__, method], capture_output=True,
                                  text=True, timeout=60)  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
            last = (out.strip().splitlines() or ["(none)"])[-1]
            print(f"| {method} | {last} | killed after 60 s |")
            continue
        last = (proc.stdout.strip().splitlines() or ["(none)"])[-1]
        err = proc.stderr.strip().splitlines()[-1:] if proc.returncode else []
        print(f"| {method} | {last} {err} | {proc.returncode} |")


if __name__ == "__main__":
    main()
