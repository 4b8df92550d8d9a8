"""The fetch stage for remote stores (HTTP, S3, GCS): ranged GETs, many in flight, read ahead.

Fetching a group only when the run loop asks would leave the link idle between groups, so
:class:`ReadAhead` lays out the requests of the whole read on its first group and keeps them in
flight, within the client's ``requests`` and ``readahead`` bytes. Chunks of one object closer
than :data:`REMOTE_MERGE_GAP` share a request (a round trip costs more than those bytes).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from linumpy.errors import ChunkDecodeError, UnsupportedLayoutError
from linumpy.io.engine.fetch import Layout, chunk_sizes, layout_group, parse_shard_index
from linumpy.settings import available_cpus

__all__: list[str] = []

#: Bytes between two chunks of one object below which they are fetched in one request.
REMOTE_MERGE_GAP = 1024 * 1024
#: Size past which a run of chunks is cut (at a chunk's end) into another request.
REMOTE_PIECE_BYTES = 8 * 1024 * 1024
#: Seconds without a group asked of a read ahead after which its requests stop and its data
#: go (a read that failed elsewhere never asks again).
IDLE_SECONDS = 120.0


def remote_root(array: Any, settings: Any = None) -> tuple[str, Any]:
    """The URL of a remote array's folder and the client that fetches from its store, with
    ``settings``' requests and retries (by default the settings in force).
    """
    from linumpy.io.remote_client import range_client

    client = range_client(array.store, settings)
    if client is None:
        name = type(array.store).__name__
        raise UnsupportedLayoutError(f"store {name} is not a local directory or a remote store")
    return (client.key_url(array.path) if array.path else client.url), client


def remote_shard_indexes(
    client: Any, urls: Sequence[str], n_chunks: int, *, at_start: bool, crc32c: bool
) -> list[np.ndarray | None]:
    """The checked index of each shard (see :func:`~linumpy.io.engine.fetch.read_shard_index`),
    all fetched at once; None for a shard that is not stored.
    """
    nbytes = n_chunks * 16 + (4 if crc32c else 0)
    keys = [client.key_of(url) for url in urls]
    parts = client.heads(keys, nbytes) if at_start else client.tails(keys, nbytes)
    indexes: list[np.ndarray | None] = []
    for url, part in zip(urls, parts):
        if part is None:
            indexes.append(None)
            continue
        raw, size = part
        if size < nbytes or len(raw) != nbytes:
            raise ChunkDecodeError(url, f"shard of {size} bytes is shorter than its index")
        indexes.append(parse_shard_index(raw, size, n_chunks, crc32c=crc32c, name=url))
    return indexes


@dataclass(frozen=True, slots=True)
class Requests:
    """The requests that fetch a set of a plan's chunks, and where each chunk lies in them."""

    keys: list[str]
    starts: np.ndarray
    nbytes: np.ndarray
    request: np.ndarray
    at: np.ndarray
    count: np.ndarray


def read_order(plan: Any, sizes: np.ndarray | None = None) -> np.ndarray:
    """The plan's stored entries in the order the run loop reads them: by object and offset."""
    sizes = chunk_sizes(plan) if sizes is None else sizes
    stored = np.flatnonzero(sizes >= 0)
    return stored[np.lexsort((plan.offsets[stored], plan.file_index[stored]))]


def remote_requests(plan: Any, order: np.ndarray) -> Requests:
    """Requests fetching the plan's entries ``order`` (stored ones), in that order.

    Consecutive entries of one object, each starting at most :data:`REMOTE_MERGE_GAP` bytes after
    the previous one ends, share a request until it reaches :data:`REMOTE_PIECE_BYTES`; an
    unsharded chunk is one request for its whole object.
    """
    client, n_entries = plan.remote, plan.n_entries
    request = np.full(n_entries, -1, dtype=np.int64)
    at = np.zeros(n_entries, dtype=np.int64)
    file_index = plan.file_index[order]
    if plan.chunks_per_shard is None:
        request[order] = np.arange(len(order))
        keys = [client.key_of(plan.files[f]) for f in file_index.tolist()]
        ones = np.ones(len(order), dtype=np.int64)
        return Requests(keys, 0 * ones, -_stored_bound(plan) * ones, request, at, ones)
    starts = plan.offsets[order].astype(np.int64)
    ends = starts + plan.nbytes[order].astype(np.int64)
    new = np.ones(len(order), dtype=bool)
    new[1:] = (
        (file_index[1:] != file_index[:-1])
        | (starts[1:] < ends[:-1])
        | (starts[1:] - ends[:-1] > REMOTE_MERGE_GAP)
    )
    run = np.cumsum(new) - 1
    bucket = (starts - starts[new][run]) // REMOTE_PIECE_BYTES  # long runs cut into pieces
    new[1:] |= bucket[1:] != bucket[:-1]
    first = np.flatnonzero(new)
    which = np.cumsum(new) - 1
    request[order] = which
    at[order] = starts - starts[first][which]
    stops = np.maximum.reduceat(ends, first) if len(first) else ends[:0]
    keys = [client.key_of(plan.files[f]) for f in file_index[first].tolist()]
    count = np.diff(np.append(first, len(order)))
    return Requests(keys, starts[first], stops - starts[first], request, at, count)


def _stored_bound(plan: Any) -> int:
    """The most bytes a chunk of the plan takes stored: one zstd frame of a chunk (zstd's
    compress bound) and its crc32c."""
    n = plan.chunk_nbytes
    return n + (n >> 8) + max(0, (128 * 1024 - n) >> 11) + 64 + (4 if plan.crc32c else 0)


class ReadAhead:
    """Fetches a read's requests ahead of the groups that need them, within a byte budget.

    Requests start in the read's order, at most the client's ``requests`` in flight and its
    ``readahead`` bytes of data started and not yet handed on; a group's own requests start
    when it asks, whatever the budget. A request's data go once every chunk it holds was handed
    on.
    """

    def __init__(self, plan: Any, order: np.ndarray, start: int = 0) -> None:
        client = plan.remote
        self.plan, self.client, self.order = plan, client, order
        self.requests = remote_requests(plan, order)
        count = len(self.requests.keys)
        self.left = self.requests.count.copy()
        self.cost = np.abs(self.requests.nbytes)
        self.futures: list[Any] = [None] * count
        self.budget, self.held = client.readahead, 0
        self.next = int(self.requests.request[order[start]]) if start < len(order) else count
        self.lock = threading.Lock()
        self.used = time.monotonic()
        self.closed = False

    @property
    def done(self) -> bool:
        """Whether every chunk of the read was handed on."""
        return not np.any(self.left > 0)

    def _start(self, which: Sequence[int]) -> None:
        which = [r for r in which if self.futures[r] is None]
        if not which:
            return
        r = self.requests
        batch = [(r.keys[i], int(r.starts[i]), int(r.nbytes[i])) for i in which]
        for i, future in zip(which, self.client.submit(batch)):
            self.futures[i] = future
            self.held += int(self.cost[i])

    def _top_up(self) -> None:
        which, held, count = [], self.held, len(self.futures)
        while self.next < count and (held + self.cost[self.next] <= self.budget or not held):
            if self.futures[self.next] is None and self.left[self.next] > 0:
                which.append(self.next)
                held += int(self.cost[self.next])
            self.next += 1
        self._start(which)

    def close(self) -> None:
        """Stop the requests in flight and drop what arrived."""
        with self.lock:
            futures = [f for f in self.futures if f is not None]
            self.futures = [None] * len(self.futures)
            self.left[:] = 0
            self.held = 0
            self.closed = True
        self.client.cancel(futures)

    def start(self, entries: np.ndarray) -> dict[int, Any]:
        """Start the requests holding ``entries`` (whatever the budget) and top up the read
        ahead; the future of each of those requests, by request."""
        with self.lock:
            self.used = time.monotonic()
            needed = np.unique(self.requests.request[entries]).tolist()
            if needed and needed[0] < 0:
                raise ValueError("chunks were asked for that the read does not fetch")
            if self.closed:  # the read failed: no more requests
                raise concurrent.futures.CancelledError
            self._start(needed)
            self._top_up()
            return {r: self.futures[r] for r in needed}

    def release(self, entries: np.ndarray) -> None:
        """Count ``entries`` handed on: a request's data go once every chunk it holds was."""
        with self.lock:
            used = np.bincount(self.requests.request[entries], minlength=len(self.left))
            self.left -= used
            for r in np.flatnonzero(used).tolist():
                if self.left[r] <= 0 and self.futures[r] is not None:
                    self.futures[r] = None
                    self.held -= int(self.cost[r])
            self._top_up()

    def group(
        self, entries: np.ndarray, staging: Callable[[int], np.ndarray]
    ) -> tuple[np.ndarray, Layout, np.ndarray, np.ndarray, np.ndarray]:
        """Fetch a group's chunks into ``staging(n)``: see :func:`fetch_remote_group`."""
        futures = self.start(entries)
        try:
            arrived = {r: f.result() for r, f in futures.items()}
        except BaseException:
            self.close()
            raise
        result = self._stage(entries, arrived, staging)
        self.release(entries)
        return result

    def _stage(
        self, entries: np.ndarray, arrived: dict[int, Any], staging: Callable[[int], np.ndarray]
    ) -> tuple[np.ndarray, Layout, np.ndarray, np.ndarray, np.ndarray]:
        plan, request = self.plan, self.requests.request
        if plan.chunks_per_shard is None:
            stored = np.array([arrived[int(r)] is not None for r in request[entries]], dtype=bool)
            present, missing = entries[stored], entries[~stored]
            sizes = np.array([len(arrived[int(r)]) for r in request[present]], dtype=np.int64)
            starts = np.zeros(len(present), dtype=np.int64)
        else:
            present, missing = entries, entries[:0]
            sizes, starts = plan.nbytes[entries].astype(np.int64), plan.offsets[entries]
        layout = layout_group(plan.files, plan.file_index[present], starts, sizes, 0)
        buffer = staging(layout.nbytes)
        # Chunks next to each other both in a request and in the buffer are copied at once.
        source, target, request = self.requests.at[present], layout.offsets, request[present]
        order = np.argsort(target, kind="stable")
        source, target, request, n = source[order], target[order], request[order], sizes[order]
        new = np.ones(len(order), dtype=bool)
        new[1:] = (
            (request[1:] != request[:-1])
            | (source[1:] != source[:-1] + n[:-1])
            | (target[1:] != target[:-1] + n[:-1])
        )
        first = np.flatnonzero(new)
        lengths = np.add.reduceat(n, first) if len(first) else n
        copies = list(
            zip(
                request[first].tolist(),
                source[first].tolist(),
                target[first].tolist(),
                lengths.tolist(),
            )
        )

        def copy(part: list[tuple[int, int, int, int]]) -> None:
            for r, src, dst, length in part:
                data = np.frombuffer(arrived[r], dtype=np.uint8, count=length, offset=src)
                buffer[dst : dst + length] = data  # numpy copies without the GIL

        threads = _copy_threads(layout.nbytes)
        if threads > 1:  # a fast link fills memory faster than one thread copies
            list(_copy_pool().map(copy, [copies[i::threads] for i in range(threads)]))
        else:
            copy(copies)
        return present, layout, buffer, sizes, missing


#: Bytes of a group from which its copy into the staging buffer is shared between threads.
PARALLEL_COPY_BYTES = 32 * 1024 * 1024
_pool_lock = threading.Lock()
_pool: list[ThreadPoolExecutor] = []


def _copy_threads(nbytes: int) -> int:
    """Threads copying a group of ``nbytes`` into staging: one per 16 MiB, at most 4 (and a
    quarter of the CPUs)."""
    if nbytes < PARALLEL_COPY_BYTES:
        return 1
    return max(1, min(4, available_cpus() // 4, nbytes // (16 * 1024 * 1024)))


def _copy_pool() -> ThreadPoolExecutor:
    with _pool_lock:
        if not _pool:
            _pool.append(ThreadPoolExecutor(4, thread_name_prefix="linumpy-remote-copy"))
        return _pool[0]


#: Reads ahead in progress, by the id of their plan.
_reads: dict[int, ReadAhead] = {}
_reads_lock = threading.Lock()


def _read_ahead(plan: Any, entries: np.ndarray) -> ReadAhead:
    """The read ahead of ``plan``, started on its first group (the run loop's order guessed
    from it: by object and offset, or best-compressed first)."""
    with _reads_lock:
        ahead = _reads.get(id(plan))
        if ahead is not None and ahead.plan is plan and not ahead.done:
            return ahead
    sizes = chunk_sizes(plan)
    order = read_order(plan, sizes)
    by_size = order[np.argsort(sizes[order], kind="stable")]
    for guess in (order, by_size):
        where = np.flatnonzero(guess == entries[0]) if len(entries) else []
        if len(where) and np.array_equal(guess[where[0] : where[0] + len(entries)], entries):
            order, start = guess, int(where[0])
            break
    else:
        start = 0
    ahead = ReadAhead(plan, order, start)
    with _reads_lock:
        _reads[id(plan)] = ahead
    plan.remote.later(IDLE_SECONDS, lambda: _expire(ahead))
    return ahead


def _forget(ahead: ReadAhead) -> None:
    with _reads_lock:
        if _reads.get(id(ahead.plan)) is ahead:
            del _reads[id(ahead.plan)]


def _expire(ahead: ReadAhead) -> None:
    """Close a read ahead idle for :data:`IDLE_SECONDS` (on the client's event loop)."""
    idle = time.monotonic() - ahead.used
    if ahead.done:
        _forget(ahead)
    elif idle >= IDLE_SECONDS:
        _forget(ahead)
        ahead.close()
    else:
        ahead.client.later(IDLE_SECONDS - idle, lambda: _expire(ahead))


def fetch_remote_group(
    plan: Any,
    entries: np.ndarray,
    staging: Callable[[int], np.ndarray],
) -> tuple[np.ndarray, Layout, np.ndarray, np.ndarray, np.ndarray]:
    """Fetch a group of a remote plan's chunks into a staging buffer (reading ahead)."""
    ahead = _read_ahead(plan, entries)
    try:
        return ahead.group(entries, staging)
    finally:
        if ahead.done:
            _forget(ahead)
