"""Dev benchmark: when zarr's store reads and the GPU codec's calls happen in a codec-path read.

Writes the 1 GiB OCT-like volume (zstd level 3) in one layout, reads it whole with zarr inside
``gpu_zarr_context`` (after a warm-up read), and prints, in ms from the start of the read: each
store read's start and end (key, MiB), each codec ``decode`` call's arrival (chunks), each merged
nvCOMP batch's start and end, stalls of zarr's event loop and of a plain Python thread over 4
ms, and the end of the read. ``--threads`` sets zarr's
``threading.max_workers`` (the pool its store reads run on) for the whole process.

    python3 benchmarks/codec_timeline.py --layout "sharded 128^3"
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import cupy
import numpy as np
import zarr
from codec_calls import LAYOUTS  # benchmarks/, the script's folder
from zarr.codecs import ZstdCodec
from zarr.core.sync import _get_loop
from zarr.storage import LocalStore

from linumpy.bench import oct_volume, write_volume
from linumpy.gpu import codec_batches, codec_staging, nvcomp_zstd
from linumpy.gpu.zarr_context import gpu_zarr_context

EVENTS: list[tuple[float, str]] = []
LOCK = threading.Lock()


def note(what: str) -> None:
    with LOCK:
        EVENTS.append((time.perf_counter(), what))


def patch() -> None:
    """Record store reads, codec calls and merged batches (wrapping, not changing, them)."""
    get = LocalStore.get

    @functools.wraps(get)
    async def timed_get(self, key, prototype=None, byte_range=None):  # type: ignore[no-untyped-def]
        note(f"get start {key}")
        result = await get(self, key, prototype, byte_range)
        size = 0 if result is None else len(result) / 2**20
        note(f"get end   {key} ({size:.1f} MiB, {type(result).__name__})")
        return result

    LocalStore.get = timed_get  # type: ignore[method-assign]
    decode = nvcomp_zstd.NvcompZstdCodec.decode

    async def timed_decode(self, chunks_and_specs):  # type: ignore[no-untyped-def]
        items = list(chunks_and_specs)
        note(f"codec call ({len(items)} chunks)")
        return await decode(self, items)

    nvcomp_zstd.NvcompZstdCodec.decode = timed_decode  # type: ignore[method-assign]
    prepare = codec_batches._prepare

    async def timed_prepare(stream, items, pinned):  # type: ignore[no-untyped-def]
        note(f"prepare start ({len(items)} chunks)")
        result = await prepare(stream, items, pinned)
        note(f"prepare end   ({len(items)} chunks)")
        return result

    codec_batches._prepare = timed_prepare
    batch = codec_batches._decode_prepared

    async def timed_batch(stream, chunks):  # type: ignore[no-untyped-def]
        note(f"batch start ({len(chunks)} chunks)")
        result = await batch(stream, chunks)
        note(f"batch end   ({len(chunks)} chunks)")
        return result

    codec_batches._decode_prepared = timed_batch


def heartbeats(stop: threading.Event) -> None:
    """Note every gap over 4 ms in ticks of 1 ms: of zarr's event loop (busy loop) and of a plain
    Python thread (another thread holding the GIL). While the loop is stalled over 15 ms, the
    plain thread notes where the loop's thread is (its innermost Python frames)."""
    loop = _get_loop()
    last_loop = [time.perf_counter()]

    async def loop_ticks() -> int:
        while not stop.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            if now - last_loop[0] > 0.004:
                note(f"event loop stalled {1e3 * (now - last_loop[0]):.1f} ms")
            last_loop[0] = now
        return 0

    async def ident() -> int:
        return threading.get_ident()

    loop_thread = asyncio.run_coroutine_threadsafe(ident(), loop).result()

    def thread_ticks() -> None:
        last = time.perf_counter()
        sampled = 0.0
        while not stop.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            if now - last > 0.004:
                note(f"python thread stalled {1e3 * (now - last):.1f} ms")
            last = now
            stalled_since = last_loop[0]
            if now - stalled_since > 0.015 and sampled != stalled_since:
                sampled = stalled_since
                frame = sys._current_frames().get(loop_thread)
                stack = traceback.extract_stack(frame)[-4:] if frame is not None else []
                where = " <- ".join(
                    f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(stack)
                )
                note(f"event loop thread at: {where}")

    asyncio.run_coroutine_threadsafe(loop_ticks(), loop)
    threading.Thread(target=thread_ticks, daemon=True).start()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout", default="sharded 128^3", choices=list(LAYOUTS))
    parser.add_argument("--threads", type=int, default=None, help="threading.max_workers")
    parser.add_argument("--workdir", default=None)
    parser.add_argument(
        "--pinned-room", type=int, default=None, help="codec_staging.PINNED_ROOM (0: exact sizes)"
    )
    args = parser.parse_args()
    if args.threads is not None:  # before zarr makes its pool (once per process)
        zarr.config.set({"threading.max_workers": args.threads})
    if args.pinned_room is not None:
        codec_staging.PINNED_ROOM = args.pinned_room
    volume = oct_volume((512, 1024, 1024))
    patch()
    with tempfile.TemporaryDirectory(dir=args.workdir) as folder:
        path = Path(folder) / "v.zarr"
        write_volume(path, volume, LAYOUTS[args.layout], ZstdCodec(level=3))
        for _attempt in range(2):
            EVENTS.clear()
            stop = threading.Event()
            heartbeats(stop)
            with gpu_zarr_context():
                start = time.perf_counter()
                out = zarr.open_array(path, mode="r")[...]
                cupy.cuda.Device().synchronize()
                end = time.perf_counter()
            stop.set()
            assert np.array_equal(cupy.asnumpy(out), volume)
            del out
        took = 1e3 * (end - start)
        print(f"{args.layout}, threading.max_workers {args.threads}: read {took:.1f} ms")
        for at, what in sorted(EVENTS):
            print(f"  {1e3 * (at - start):7.1f}  {what}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
