"""The fetch stage for remote stores (HTTP, S3, GCS): ranged GETs, many in flight.

A remote plan names its chunks by URL (:attr:`~linumpy.io.engine.plan.ReadPlan.remote` holds the
:class:`~linumpy.io.remote.RangeClient`). Shard indexes are fetched together while planning (a
suffix or prefix range of each shard). A group's chunks are fetched at once: byte ranges of one
shard closer than :data:`REMOTE_MERGE_GAP` are merged into one request (a request's latency
costs more than that many bytes on most links), long runs cut into :data:`REMOTE_PIECE_BYTES`
pieces so that one shard still arrives over several connections, and unsharded chunks are
fetched whole (their size is unknown until then, so the group's layout in the staging buffer
is made from what arrived). The validate, decode and scatter stages that follow are the local
reads' own, on the CPU or the GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from linumpy.errors import ChunkDecodeError, UnsupportedLayoutError
from linumpy.io.engine.fetch import Layout, layout_group, parse_shard_index

__all__ = [
    "REMOTE_MERGE_GAP",
    "REMOTE_PIECE_BYTES",
    "fetch_remote_group",
    "range_requests",
    "remote_root",
    "remote_shard_indexes",
]

#: Bytes between two ranges of one object below which they are fetched in one request.
REMOTE_MERGE_GAP = 1024 * 1024
#: Largest range one request fetches; longer runs are cut into requests of this size.
REMOTE_PIECE_BYTES = 8 * 1024 * 1024
#: Smallest piece a group's runs are cut into for parallel requests.
MIN_PIECE_BYTES = 1024 * 1024


def remote_root(array: Any) -> tuple[str, Any]:
    """The URL of a remote array's folder and the client that fetches from its store.

    Raises
    ------
    UnsupportedLayoutError
        For a store the engine does not fetch from (then zarr reads the array itself).

    Examples
    --------
    >>> import zarr
    >>> remote_root(zarr.create_array({}, shape=(1,), dtype="u1"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    linumpy.errors.UnsupportedLayoutError: store MemoryStore is not a local directory or ...
    """
    from linumpy.io.remote import range_client

    client = range_client(array.store)
    if client is None:
        name = type(array.store).__name__
        raise UnsupportedLayoutError(f"store {name} is not a local directory or a remote store")
    return (client.key_url(array.path) if array.path else client.url), client


def remote_shard_indexes(
    client: Any, urls: Sequence[str], n_chunks: int, *, at_start: bool, crc32c: bool
) -> list[np.ndarray | None]:
    """The checked index of each shard (see :func:`~linumpy.io.engine.fetch.read_shard_index`),
    all fetched at once; None for a shard that is not stored.

    Raises
    ------
    ChunkDecodeError
        When a shard is shorter than its index, fails its crc32c, or points past its end.

    Examples
    --------
    >>> import tempfile, zarr
    >>> from linumpy.io import open_array
    >>> from linumpy.io.remote_server import serve_directory
    >>> folder = tempfile.mkdtemp()
    >>> array = zarr.create_array(folder + "/a.zarr", shape=(8,), chunks=(2,), shards=(4,),
    ...                           dtype="uint8")
    >>> array[:4] = 1
    >>> with serve_directory(folder) as url:
    ...     client = remote_root(open_array(url + "/a.zarr"))[1]
    ...     found = remote_shard_indexes(client, [client.key_url("c/0"), client.key_url("c/1")],
    ...                                  2, at_start=False, crc32c=True)
    >>> found[0].shape, found[1] is None  # the second shard is not stored
    ((2, 2), True)
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


def range_requests(layout: Layout, piece: int) -> list[tuple[str, int, int, int]]:
    """The layout's runs as requests ``(url, start, nbytes, buffer offset)``, none longer than
    ``piece``.

    Examples
    --------
    >>> layout = layout_group(["u"], np.array([0]), np.array([0]), np.array([10]))
    >>> range_requests(layout, 4)
    [('u', 0, 4, 0), ('u', 4, 4, 4), ('u', 8, 2, 8)]
    """
    requests = []
    for url, start, nbytes, at, _ in layout.runs:
        for done in range(0, nbytes, piece):
            requests.append((url, start + done, min(piece, nbytes - done), at + done))
    return requests


def fetch_remote_group(
    plan: Any,
    entries: np.ndarray,
    staging: Callable[[int], np.ndarray],
) -> tuple[np.ndarray, Layout, np.ndarray, np.ndarray, np.ndarray]:
    """Fetch a group of a remote plan's chunks into a staging buffer.

    Parameters
    ----------
    plan
        A remote read plan.
    entries
        The plan entries of the group.
    staging
        ``staging(n)``: the back end's buffer of at least ``n`` bytes for this group.

    Returns
    -------
    tuple
        ``(present, layout, buffer, sizes, missing)``: the entries that are stored, their
        layout in the buffer, the buffer, their compressed sizes, and the entries whose object
        does not exist (read as the fill value).

    Raises
    ------
    RemoteError
        For a failed request (after retries), naming its URL.
    ChunkDecodeError
        When an object is shorter than its shard index says.

    Examples
    --------
    >>> import tempfile, zarr
    >>> from linumpy.io import open_array
    >>> from linumpy.io.engine.plan import plan_read
    >>> from linumpy.io.remote_server import serve_directory
    >>> folder = tempfile.mkdtemp()
    >>> array = zarr.create_array(folder + "/a.zarr", shape=(6,), chunks=(2,), dtype="uint8")
    >>> array[:4] = 1
    >>> with serve_directory(folder) as url:
    ...     plan = plan_read(open_array(url + "/a.zarr"))
    ...     present, layout, buffer, sizes, missing = fetch_remote_group(
    ...         plan, np.arange(3), lambda n: np.empty(n, np.uint8))
    >>> present.tolist(), missing.tolist()  # chunk 2 was never written
    ([0, 1], [2])
    """
    client = plan.remote
    files, file_index = plan.files, plan.file_index[entries]
    if plan.chunks_per_shard is not None:
        sizes = plan.nbytes[entries]
        layout = layout_group(files, file_index, plan.offsets[entries], sizes, REMOTE_MERGE_GAP)
        buffer = staging(layout.nbytes)
        # cut so that a group of few shards still keeps many requests in flight
        piece = min(REMOTE_PIECE_BYTES, max(MIN_PIECE_BYTES, layout.nbytes // 16))
        requests = range_requests(layout, piece)
        parts = client.ranges([(client.key_of(url), start, n) for url, start, n, _ in requests])
        for (_, _, n, at), data in zip(requests, parts):
            buffer[at : at + n] = np.frombuffer(data, dtype=np.uint8)
        return entries, layout, buffer, sizes, entries[:0]
    urls = [files[i] for i in file_index.tolist()]
    found = client.objects([client.key_of(url) for url in urls])
    stored = np.array([data is not None for data in found], dtype=bool)
    present = entries[stored]
    sizes = np.array([len(data) for data in found if data is not None], dtype=np.int64)
    offsets = np.zeros(len(present), dtype=np.int64)
    layout = layout_group(files, plan.file_index[present], offsets, sizes)
    buffer = staging(layout.nbytes)
    arrived = [data for data in found if data is not None]
    for at, data in zip(layout.offsets.tolist(), arrived):
        buffer[at : at + len(data)] = np.frombuffer(data, dtype=np.uint8)
    return present, layout, buffer, sizes, entries[~stored]
