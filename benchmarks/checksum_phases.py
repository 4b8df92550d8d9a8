"""Dev check on a GPU: where ``read_volume(gpu=True)`` spends the time that checksums add.

One 1 GiB uint16 volume (OCT-like speckle) written with and without linumpy's checksums (zstd
content checksum + crc32c), as 64^3 chunks in 128x512x512 shards and as 128^3 chunk files;
each read 5 times (page cache warm), median seconds and the read engine's phases of the last
run; then the checksum work alone: the crc32c check of the stored chunks on 32 threads and the
XXH64 kernel over the decoded chunks. ``python benchmarks/checksum_phases.py [--folder DIR]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np


def write(path: Path, chunks: int, shards: tuple[int, ...] | None, checksum: bool) -> None:
    from linumpy.io import OmeZarrWriter

    shape = (512, 1024, 1024)
    writer = OmeZarrWriter(path, shape, np.uint16, voxel_size=(1, 1, 1), chunks=(chunks,) * 3,
                           shards=shards, checksum=checksum)  # fmt: skip
    rng = np.random.default_rng(0)
    slab = np.clip(rng.gamma(2.0, 300.0, size=(128, 1024, 1024)), 0, 65535).astype(np.uint16)
    for z0 in range(0, shape[0], 128):
        writer.array[z0 : z0 + 128] = np.roll(slab, z0 // 128 * 37, axis=2)


def main() -> None:
    import cupy

    from linumpy.gpu._xxhash import xxh64_batch
    from linumpy.gpu.zarr_io import last_read_report
    from linumpy.io import read_volume
    from linumpy.io.engine.crc import strip_crc32c_many

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(dir=args.folder))
    rows = []
    for name, chunks, shards in (("sharded 64^3", 64, (128, 512, 512)), ("128^3", 128, None)):
        for checksum in (False, True):
            path = folder / f"{chunks}-{shards is not None}-{checksum}.ome.zarr"
            write(path, chunks, shards, checksum)
            times = []
            for _ in range(6):
                start = time.perf_counter()
                volume = read_volume(path, gpu=True)
                cupy.cuda.Device().synchronize()
                times.append(time.perf_counter() - start)
            report = last_read_report()
            seconds = statistics.median(times[1:])
            row = {"layout": name, "checksums": checksum, "s": round(seconds, 4),
                   "GB/s": round(volume.nbytes / seconds / 1e9, 2),
                   "phases": report.phases, "batches": report.n_batches,
                   "cpu decoded": report.n_cpu_decoded}  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
            if checksum:
                files = sorted(p for p in (path / "0").rglob("*") if p.is_file()
                               and p.name != "zarr.json")  # fmt: skip
                data = [np.fromfile(p, np.uint8) for p in files]
                print(f"{len(files)} files, {sum(d.nbytes for d in data) / 1e6:.0f} MB", flush=True)
                if shards is None:
                    buffer = np.concatenate(data)
                    sizes = np.array([d.nbytes for d in data])
                    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
                    with ThreadPoolExecutor(32) as pool:
                        for _ in range(2):
                            start = time.perf_counter()
                            strip_crc32c_many(buffer, offsets, sizes, str, pool)
                            crc = time.perf_counter() - start
                    print(f"crc32c of {len(sizes)} chunks, 32 threads: {crc * 1e3:.1f} ms")
                n = volume.nbytes // (chunks**3 * 2)
                offsets = [i * chunks**3 * 2 for i in range(n)]
                flat = volume.reshape(-1).view(cupy.uint8)
                stream = cupy.cuda.get_current_stream()
                for _ in range(3):
                    cupy.cuda.Device().synchronize()
                    start = time.perf_counter()
                    xxh64_batch(flat, offsets, [chunks**3 * 2] * n, stream=stream).get()
                    xxh = time.perf_counter() - start
                print(f"XXH64 kernel over {n} chunks of {chunks}^3: {xxh * 1e3:.1f} ms", flush=True)
    print("| layout | checksums | s | GB/s |\n| --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['layout']} | {r['checksums']} | {r['s']:.4f} | {r['GB/s']:.2f} |")


if __name__ == "__main__":
    main()
