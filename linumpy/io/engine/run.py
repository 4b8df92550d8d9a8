"""The engine's run loop: groups of chunks read into the back end's staging buffers and checked
on a producer thread while the back end decodes and scatters the previous group.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress

import numpy as np

from linumpy.io.engine.backend import Fetched, Group, ReadBackend, Stats
from linumpy.io.engine.codecs.protocol import FRAME_NEEDS_CHECK
from linumpy.io.engine.crc import CRC32C_BYTES, crc32c_bodies, strip_crc32c_many
from linumpy.io.engine.fetch import chunk_sizes, layout_group, read_group
from linumpy.io.engine.keys import EntryKeys
from linumpy.io.engine.plan import ReadPlan

__all__: list[str] = []


def make_groups(
    order: np.ndarray,
    sizes: np.ndarray,
    *,
    chunk_nbytes: int,
    max_compressed: int,
    max_total: int,
    min_groups: int = 1,
) -> list[np.ndarray]:
    """Split stored chunks, in ``order``, into consecutive groups that fit the back end's budgets:
    as few as the budgets and ``min_groups`` allow, of about equal sizes.

    Filling groups up to the budget one after the other leaves a small last group whenever the
    chunks do not divide evenly, and on the GPU that group waits behind the first on its stream,
    paying a whole nvCOMP call's latency alone.
    """
    n = len(order)
    if n == 0:
        return []
    weights = sizes[order].astype(np.int64)
    compressed = np.cumsum(weights)
    total = np.cumsum(weights + chunk_nbytes)
    count = max(
        min(min_groups, n),
        math.ceil(int(total[-1]) / max_total),
        math.ceil(int(compressed[-1]) / max_compressed),
    )
    groups: list[np.ndarray] = []
    start = 0
    while start < n:
        done_total = int(total[start - 1]) if start else 0
        done_compressed = int(compressed[start - 1]) if start else 0
        left = max(1, count - len(groups))
        target = done_total + (int(total[-1]) - done_total) / left
        end = int(np.searchsorted(total, target, side="right"))
        if end < n and (end == start or total[end] - target < target - total[end - 1]):
            end += 1  # the chunk that crosses the target lands nearer to it inside the group
        cap = min(
            np.searchsorted(compressed, done_compressed + max_compressed, side="right"),
            np.searchsorted(total, done_total + max_total, side="right"),
        )
        end = max(min(end, int(cap)), start + 1)
        groups.append(order[start:end])
        start = end
    return groups


def _fetch(
    plan: ReadPlan,
    backend: ReadBackend,
    group: Group,
    index: int,
    sizes: np.ndarray,
    *,
    reader: str,
    pool: ThreadPoolExecutor,
    threads: int,
) -> Fetched:
    """Read one group into its slot's staging buffer (on the producer thread)."""
    started = time.perf_counter()
    slot = index % backend.slots
    missing = None
    if plan.remote is not None:  # laid out in the staging buffer as the chunks arrive
        from linumpy.io.engine.fetch_remote import fetch_remote_group

        entries, layout, staging, nbytes, missing = fetch_remote_group(
            plan, group.entries, lambda n: backend.staging(slot, n)
        )
        group = Group(entries, layout, group.tail)
    else:
        staging = backend.staging(slot, group.layout.nbytes)
        entries = group.entries
        keys = EntryKeys(plan, entries)
        read_group(staging, group.layout, keys, reader=reader, pool=pool, threads=threads)
        nbytes = sizes[entries]
    # A back end may check the crc32c itself, before its decoder sees the chunks (the GPU's).
    on_device = plan.crc32c and getattr(backend, "crc32c_on_device", _never)(group)
    if on_device:
        nbytes = crc32c_bodies(nbytes, EntryKeys(plan, entries))
    elif plan.crc32c:  # before anything decodes them: nvCOMP trusts its input
        nbytes = strip_crc32c_many(
            staging, group.layout.offsets, nbytes, EntryKeys(plan, entries), pool
        )
    seconds = time.perf_counter() - started
    verdicts = np.full(len(entries), FRAME_NEEDS_CHECK, dtype=np.int8)
    return Fetched(index, slot, group, staging, nbytes, verdicts, [], seconds, on_device, missing)


def _never(group: Group) -> bool:
    return False


def _validate(
    plan: ReadPlan, backend: ReadBackend, fetched: Fetched, pool: ThreadPoolExecutor
) -> None:
    """Check a fetched group's frames; decode on the CPU what only libzstd decodes.

    Runs on the calling thread while the producer reads the next group.
    """
    staging, offsets, nbytes = fetched.staging, fetched.group.layout.offsets, fetched.sizes
    key = EntryKeys(plan, fetched.group.entries)
    codec = plan.codec  # the compressor's frame checks and CPU decoder
    verdicts = codec.check_frames(staging, offsets, nbytes, plan.chunk_nbytes)
    too_large = plan.chunk_nbytes > backend.max_decode_bytes
    # A tail group's sound frames are decoded by the back end itself (libzstd threads into its
    # own buffers), frames too large for nvCOMP included; otherwise those decode here.
    backend_decodes = not too_large or fetched.group.tail
    candidates = (
        np.flatnonzero(verdicts == FRAME_NEEDS_CHECK) if backend_decodes else range(len(verdicts))
    )
    if fetched.crc32c_on_device and len(candidates):  # these may not reach the device's check
        picked = np.asarray(candidates, dtype=np.int64)
        strip_crc32c_many(
            staging, offsets[picked], nbytes[picked] + CRC32C_BYTES, lambda i: key(int(picked[i]))
        )
    on_cpu = []
    for i in candidates:
        frame = staging[offsets[i] : offsets[i] + nbytes[i]]
        if verdicts[i] == FRAME_NEEDS_CHECK:
            info = codec.inspect_chunk(frame, key=key(i), expected_size=plan.chunk_nbytes)
            if info.verdict != FRAME_NEEDS_CHECK and backend_decodes:
                verdicts[i] = info.verdict
                continue
        on_cpu.append(int(i))

    def decode(i: int) -> tuple[int, np.ndarray]:
        frame = staging[offsets[i] : offsets[i] + nbytes[i]]
        return i, codec.decode(frame, key=key(i), expected_size=plan.chunk_nbytes)

    fetched.decoded = (
        list(pool.map(decode, on_cpu)) if len(on_cpu) > 1 else [decode(i) for i in on_cpu]
    )
    verdicts[on_cpu] = FRAME_NEEDS_CHECK
    fetched.verdicts = verdicts


def run(
    plan: ReadPlan,
    backend: ReadBackend,
    *,
    reader: str,
    threads: int,
) -> Stats:
    """Execute ``plan`` through ``backend``: fetch and check group k+1 while k is decoded."""
    stats = Stats()
    phases = stats.phases
    mark = time.perf_counter()
    sizes = chunk_sizes(plan)
    phases["sizes"] = time.perf_counter() - mark
    mark = time.perf_counter()
    stored = sizes >= 0
    missing = np.flatnonzero(~stored)
    stats.n_reads = int(stored.sum())
    stats.n_fill = len(missing)
    if len(missing):
        backend.fill(missing)
    # Read in file order: the inner chunks of a shard are stored back to back (in zarr's order,
    # not the grid's), so a group of whole shards reads each shard in one run.
    order = np.flatnonzero(stored)
    order = order[np.lexsort((plan.offsets[order], plan.file_index[order]))]
    if backend.size_order:
        order = order[np.argsort(sizes[order], kind="stable")]
    budget = backend.budget(sizes[order])
    head = len(order) - min(len(order), int(len(order) * budget.tail))
    budgets = {
        "chunk_nbytes": plan.chunk_nbytes,
        "max_compressed": budget.max_compressed,
        "max_total": budget.max_total,
    }
    split = [
        (entries, False)
        for entries in make_groups(order[:head], sizes, min_groups=budget.min_groups, **budgets)
    ]
    split += [(entries, True) for entries in make_groups(order[head:], sizes, **budgets)]
    groups = [
        Group(
            entries,
            layout_group(
                plan.files, plan.file_index[entries], plan.offsets[entries], sizes[entries]
            ),
            is_tail,
        )
        for entries, is_tail in split
    ]
    stats.n_groups = len(groups)
    stats.compressed_bytes = int(sizes[order].sum())
    phases["groups"] = time.perf_counter() - mark
    for name in ("fetch", "fetch_wait", "validate", "submit"):
        phases[name] = 0.0
    with (
        ThreadPoolExecutor(threads, thread_name_prefix="linumpy-read") as pool,
        ThreadPoolExecutor(1, thread_name_prefix="linumpy-fetch") as producer,
    ):

        def fetch(k: int) -> Fetched:
            return _fetch(
                plan, backend, groups[k], k, sizes, reader=reader, pool=pool, threads=threads
            )

        pending = producer.submit(fetch, 0) if groups else None
        for k in range(len(groups)):
            mark = time.perf_counter()
            fetched = pending.result()  # type: ignore[union-attr]
            phases["fetch_wait"] += time.perf_counter() - mark
            phases["fetch"] += fetched.seconds
            pending = producer.submit(fetch, k + 1) if k + 1 < len(groups) else None
            mark = time.perf_counter()
            try:
                if fetched.missing is not None and len(fetched.missing):
                    backend.fill(fetched.missing)
                if len(fetched.group.entries):
                    _validate(plan, backend, fetched, pool)
                    phases["validate"] += time.perf_counter() - mark
                    mark = time.perf_counter()
                    backend.submit(fetched)
            except BaseException:
                if pending is not None and not pending.cancel():
                    with suppress(BaseException):  # the first error is the one to report
                        pending.result()  # a running fetch finishes before buffers go back
                backend.synchronize()
                raise
            phases["submit"] += time.perf_counter() - mark
            # a tail group is decoded on the CPU whole, in the back end or here
            tail = fetched.group.tail
            stats.n_cpu_decoded += len(fetched.group.entries) if tail else len(fetched.decoded)
        mark = time.perf_counter()
        try:
            backend.finish()
        except BaseException:
            backend.synchronize()
            raise
        phases["final_sync"] = time.perf_counter() - mark
    return stats
