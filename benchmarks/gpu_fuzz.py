"""Corruption fuzz of checksummed reads on the GPU (or the CPU with --cpu): no corrupt chunk
ever reads back as wrong values, every error names its chunk, and no failure leaks into the
next read.

An OCT-like uint16 volume is written with linumpy's checksums (zstd's content checksum, then
zarr's crc32c codec) in four layouts: 128^3 and 64^3 chunk files, and both as inner chunks of
shards. For each layout, ``--n`` corruptions (default 200) are applied one at a time, in turn:

- ``flip``: 1 to 3 bytes of one stored chunk changed;
- ``truncate``: a chunk file cut short (for shards: the shard file, whose index is at its end);
- ``append``: 1 to 64 random bytes appended to a chunk or shard file;
- ``swap``: equal-length byte ranges of two stored chunks exchanged (within one shard, or
  between two chunk files). Whole chunks exchanged between two positions are not fuzzed: each
  keeps a valid crc32c and content checksum (zarr's checksums do not cover a chunk's key), so no
  reader can tell; what is exchanged here is a piece of each.

After each corrupted read the file is restored; the volume is then read again and compared, to
catch a failure that leaks into the next read (a CUDA error left on a stream or the context).
Counted per layout: wrong reads (must be 0), errors, errors whose key names none of the
corrupted chunks or files, errors of other types (CUDA errors, ...), corruptions read back as
the original values (a swap of equal bytes), and leaks. Exit status 1 if any read was wrong,
unnamed, of another type, or leaked.

Usage::

    python benchmarks/gpu_fuzz.py                       # the GPU, 200 per layout, 64 MiB volume
    python benchmarks/gpu_fuzz.py --cpu --n 12 --shape 64 128 128   # a CPU smoke run
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from linumpy.bench.rows import Layout, write_volume
from linumpy.bench.volume import oct_volume
from linumpy.errors import ChunkDecodeError, LinumpyError
from linumpy.io import read_volume
from linumpy.io.engine.fetch import chunk_sizes
from linumpy.io.engine.plan import plan_read

KINDS = ("flip", "truncate", "append", "swap")


@dataclass(frozen=True)
class Stored:
    """Where one stored chunk's bytes are: file, offset, size, and its name in errors."""

    path: Path
    offset: int
    nbytes: int
    key: str


def layouts(shard: tuple[int, ...], checksum: bool = True) -> list[Layout]:
    """The four fuzzed layouts."""
    return [
        Layout.cubic(128, checksum=checksum),
        Layout.cubic(64, checksum=checksum),
        Layout.cubic(128, shard, checksum=checksum),
        Layout.cubic(64, shard, checksum=checksum),
    ]


def stored_chunks(path: Path) -> list[Stored]:
    """Every stored chunk of the array at ``path``, as the read engine plans it."""
    plan = plan_read(zarr.open_array(path, mode="r"))
    sizes = chunk_sizes(plan)
    return [
        Stored(
            Path(plan.files[plan.file_index[i]]), int(plan.offsets[i]), int(sizes[i]), plan.key(i)
        )
        for i in np.flatnonzero(sizes > 0).tolist()
    ]


def corrupt(chunks: list[Stored], kind: str, rng: np.random.Generator) -> tuple[dict, set[str]]:
    """Apply one corruption; return the original bytes of the files changed, and the names
    (chunk keys and file paths) an error may give."""
    first = chunks[int(rng.integers(len(chunks)))]
    originals = {first.path: first.path.read_bytes()}
    data = bytearray(originals[first.path])
    names = {first.key, str(first.path)}
    if kind == "flip":
        count = min(first.nbytes, int(rng.integers(1, 4)))
        for at in rng.choice(first.nbytes, size=count, replace=False).tolist():
            data[first.offset + at] ^= int(rng.integers(1, 256))
    elif kind == "truncate":
        del data[int(rng.integers(0, len(data))) :]
    elif kind == "append":
        data += rng.integers(0, 256, size=int(rng.integers(1, 65)), dtype=np.uint8).tobytes()
    else:  # within one shard, or between two chunk files
        others = [c for c in chunks if c.path == first.path and c.key != first.key]
        others = others or [c for c in chunks if c.key != first.key]
        second = others[int(rng.integers(len(others)))]
        length = int(rng.integers(1, min(first.nbytes, second.nbytes) + 1))
        a = first.offset + int(rng.integers(0, first.nbytes - length + 1))
        b = second.offset + int(rng.integers(0, second.nbytes - length + 1))
        names |= {second.key, str(second.path)}
        if second.path == first.path:  # two chunks' ranges never overlap
            data[a : a + length], data[b : b + length] = data[b : b + length], data[a : a + length]
        else:
            originals[second.path] = second.path.read_bytes()
            other = bytearray(originals[second.path])
            data[a : a + length], other[b : b + length] = (
                other[b : b + length],
                data[a : a + length],
            )
            second.path.write_bytes(bytes(other))
    first.path.write_bytes(bytes(data))
    return originals, names


def read(path: Path, gpu: bool) -> np.ndarray:
    """Read the whole array, as numpy."""
    result = read_volume(path, gpu=gpu)
    if gpu:
        import cupy

        cupy.cuda.Device().synchronize()
        return cupy.asnumpy(result)
    return result


def fuzz_layout(path: Path, volume: np.ndarray, n: int, gpu: bool, seed: int) -> Counter[str]:
    """Apply ``n`` corruptions to the array at ``path`` one at a time and count the outcomes."""
    chunks = stored_chunks(path)
    rng = np.random.default_rng(seed)
    outcomes: Counter[str] = Counter()
    for trial in range(n):
        kind = KINDS[trial % len(KINDS)]
        originals, names = corrupt(chunks, kind, rng)
        try:
            result = read(path, gpu)
        except (ChunkDecodeError, LinumpyError) as exc:
            named = getattr(exc, "key", None) in names or any(name in str(exc) for name in names)
            outcomes["error" if named else "UNNAMED error"] += 1
            if not named:
                print(f"  {kind}: unnamed error: {exc}", flush=True)
        except Exception as exc:  # CUDA errors and anything else a read must never raise
            outcomes["OTHER error"] += 1
            print(f"  {kind}: {type(exc).__name__}: {exc}", flush=True)
        else:
            same = np.array_equal(result, volume)
            outcomes["original" if same else "WRONG read"] += 1
            if not same:
                print(f"  {kind}: WRONG read (files {sorted(map(str, originals))})", flush=True)
        finally:
            for file, raw in originals.items():
                file.write_bytes(raw)
        outcomes[f"{kind}"] += 1
        try:
            leaked = not np.array_equal(read(path, gpu), volume)
        except Exception as exc:
            leaked = True
            print(f"  after {kind}: the clean read failed: {type(exc).__name__}: {exc}", flush=True)
        outcomes["LEAKED into the next read"] += int(leaked)
    return outcomes


BAD = ("WRONG read", "UNNAMED error", "OTHER error", "LEAKED into the next read")


def main(argv: list[str] | None = None) -> int:
    """Run the fuzz (see the module docstring); the exit status says whether it passed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="Read on the CPU, not the GPU.")
    parser.add_argument("--n", type=int, default=200, help="Corruptions per layout [200].")
    parser.add_argument(
        "--shape", type=int, nargs=3, default=[128, 512, 512], help="Volume shape [128 512 512]."
    )
    parser.add_argument(
        "--shard", type=int, nargs=3, default=[128, 256, 256], help="Shard shape [128 256 256]."
    )
    parser.add_argument("--layouts", default="0,1,2,3", help="Indices of the layouts [0,1,2,3].")
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument(
        "--no-checksums",
        action="store_true",
        help="Write plain zstd instead: wrong reads are then expected (what checksums prevent); "
        "with --cpu only, since nvCOMP may fault or hang on a damaged frame.",
    )
    parser.add_argument("--json", type=Path, help="Also write the counts here.")
    parser.add_argument("--workdir", type=Path, help="Where the arrays go [a temporary folder].")
    args = parser.parse_args(argv)
    gpu = not args.cpu
    if gpu and args.no_checksums:
        parser.error("--no-checksums needs --cpu: nvCOMP may fault or hang on a damaged frame")
    if gpu:
        from linumpy.gpu.zarr_io import gpu_unavailable_reason

        reason = gpu_unavailable_reason()
        if reason is not None:
            parser.error(f"no GPU ({reason}); use --cpu")
    shape = tuple(args.shape)
    volume = oct_volume(shape)
    workdir = Path(tempfile.mkdtemp(prefix="gpu_fuzz_", dir=args.workdir))
    codecs: Any = [zarr.codecs.ZstdCodec(level=3, checksum=True), zarr.codecs.Crc32cCodec()]
    if args.no_checksums:
        codecs = zarr.codecs.ZstdCodec(level=3)
    report: dict[str, Any] = {"device": "GPU" if gpu else "CPU", "shape": shape, "layouts": {}}
    failed = False
    try:
        for index in (int(i) for i in args.layouts.split(",")):
            layout = layouts(tuple(args.shard), not args.no_checksums)[index]
            path = workdir / f"layout-{index}.zarr"
            write_volume(path, volume, layout, codecs)
            started = time.perf_counter()
            counts = fuzz_layout(path, volume, args.n, gpu, args.seed + index)
            seconds = time.perf_counter() - started
            for name in BAD:
                counts.setdefault(name, 0)
            report["layouts"][layout.name] = dict(counts)
            failed |= any(counts[name] for name in BAD)
            cells = ", ".join(f"{name} {count}" for name, count in sorted(counts.items()))
            print(f"{layout.name}: {cells} ({seconds:.1f} s)", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    total = {name: sum(c.get(name, 0) for c in report["layouts"].values()) for name in BAD}
    print("total: " + ", ".join(f"{name} {count}" for name, count in total.items()))
    if args.json is not None:
        args.json.write_text(json.dumps(report | {"total": total}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
