"""The CPU back end's file reads: a thread's chunk bytes, read into a buffer it keeps.

Shards stay open for a thread's batch (:class:`OpenShards`: one ``preadv`` per chunk); remote
chunks are decoded from the read ahead's responses themselves (:class:`RemoteChunkReads`), with
no copy into staging and no hand-over between threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from linumpy.errors import ChunkDecodeError
from linumpy.io.engine.crc import CRC32C_BYTES, crc32c_matches, strip_crc32c
from linumpy.io.engine.fetch import ALIGN, open_chunk_file, read_chunk_file, read_exactly
from linumpy.io.engine.fetch_remote import ReadAhead
from linumpy.io.engine.plan import ReadPlan

__all__: list[str] = []


class ChunkReads:
    """A plan's chunks read by the threads that decode them, each into a buffer it keeps, with
    their crc32c checked (see :meth:`linumpy.io.engine.cpu.CpuBackend.read_files`).
    """

    def __init__(self, plan: ReadPlan) -> None:
        self.plan = plan
        self._file_index = plan.file_index.tolist()
        self._offsets, self._nbytes = plan.offsets.tolist(), plan.nbytes.tolist()
        self._local = threading.local()

    def read(self, entry: int, shards: OpenShards | None) -> tuple[int, int, Any] | None:
        """Read an entry's chunk (its file, or its bytes in a shard held open in ``shards``)
        into this thread's reusable buffer, checking its crc32c; the chunk is named only for an
        error.
        """
        plan = self.plan
        file, offset, nbytes = self._file_index[entry], self._offsets[entry], self._nbytes[entry]
        key = lambda: plan.key(entry)  # noqa: E731
        if shards is None:
            data = read_chunk_file(plan.files[file], key, self._buffer)
        else:
            data = shards.read(file, offset, nbytes, key, self._buffer)
        if data is None:
            return None
        local = self._local
        if plan.crc32c:
            nbytes = len(data)
            if not crc32c_matches(local.read_view, nbytes):
                strip_crc32c(data, key)  # raises, saying what is wrong
            data = data[: nbytes - CRC32C_BYTES]
        return local.read_address, len(data), data  # data starts the buffer

    def begin(self, entries: Sequence[int]) -> None:
        """Nothing to start ahead of a batch of local chunks (see :class:`RemoteChunkReads`)."""

    def end(self, entries: Sequence[int]) -> None:
        """Nothing to let go after a batch of local chunks."""

    def close(self) -> None:
        """Nothing to stop."""

    def _buffer(self, nbytes: int) -> np.ndarray:
        """This thread's read buffer, grown to hold ``nbytes``."""
        buffer = getattr(self._local, "read", None)
        if buffer is None or buffer.nbytes < nbytes:
            buffer = self._local.read = np.empty(max(nbytes, 2 * ALIGN), dtype=np.uint8)
            self._local.read_address = buffer.ctypes.data
            self._local.read_view = memoryview(buffer)
        return buffer


class OpenShards:
    """Shard files opened once for a batch of inner chunks, closed with :meth:`close`."""

    __slots__ = ("_fds", "_files")

    def __init__(self, files: Sequence[str]) -> None:
        self._files = files
        self._fds: dict[int, int] = {}

    def __enter__(self) -> OpenShards:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(
        self,
        file: int,
        offset: int,
        nbytes: int,
        key: Callable[[], str],
        buffer: Callable[[int], np.ndarray],
    ) -> np.ndarray:
        """Read ``nbytes`` at ``offset`` of file ``file`` into ``buffer(nbytes)``."""
        fd = self._fds.get(file)
        if fd is None:
            try:
                fd = open_chunk_file(self._files[file], key)
            except FileNotFoundError:
                raise ChunkDecodeError(key(), "the shard vanished while reading") from None
            self._fds[file] = fd
        data = buffer(nbytes)[:nbytes]
        try:
            read_exactly(fd, memoryview(data), offset, key)
        except IsADirectoryError:
            raise ChunkDecodeError(key(), "the shard is a directory, not a file") from None
        return data

    def close(self) -> None:
        """Close the files opened."""
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)


class RemoteChunkReads:
    """A remote plan's chunks, as :class:`ChunkReads` gives local ones, from the responses of
    the engine's read ahead (:class:`~linumpy.io.engine.fetch_remote.ReadAhead`, in ``order``).

    A thread calls :meth:`begin` with its batch of chunks (their requests start, whatever the
    read ahead's budget), :meth:`read` for each (waiting for its response, checking its crc32c,
    giving the chunk's bytes where they arrived) and :meth:`end` once it decoded them (a
    response goes once every chunk it holds was decoded). :meth:`close` stops the requests.
    """

    def __init__(self, plan: ReadPlan, order: np.ndarray) -> None:
        self.plan = plan
        self.ahead = ReadAhead(plan, order)
        requests = self.ahead.requests
        self._request, self._at = requests.request.tolist(), requests.at.tolist()
        self._nbytes = plan.nbytes.tolist()
        self._sharded = plan.chunks_per_shard is not None
        self._local = threading.local()

    def begin(self, entries: Sequence[int]) -> None:
        """Start the requests of a thread's batch of chunks."""
        self._local.futures = self.ahead.start(np.asarray(entries, dtype=np.int64))
        self._local.arrived = {}

    def read(self, entry: int, shards: OpenShards | None) -> tuple[int, int, Any] | None:
        """An entry's chunk where its response holds it, its crc32c checked (``shards`` is not
        used); None for a chunk object that does not exist.
        """
        local, request = self._local, self._request[entry]
        found = local.arrived.get(request)
        if found is None:
            data = local.futures[request].result()
            if data is None:  # a chunk object not stored
                return None
            array = np.frombuffer(data, dtype=np.uint8)
            found = local.arrived[request] = (array, array.ctypes.data if array.size else 0)
        array, address = found
        start = self._at[entry]
        nbytes = self._nbytes[entry] if self._sharded else array.size
        if self.plan.crc32c:
            view = memoryview(array)[start : start + nbytes]
            if not crc32c_matches(view, nbytes):
                strip_crc32c(array[start : start + nbytes], lambda: self.plan.key(entry))
            nbytes -= CRC32C_BYTES
        return address + start, nbytes, array[start : start + nbytes]

    def end(self, entries: Sequence[int]) -> None:
        """Let the responses of a thread's batch go, once every chunk they hold was decoded."""
        self._local.futures, self._local.arrived = {}, {}
        self.ahead.release(np.asarray(entries, dtype=np.int64))

    def close(self) -> None:
        """Stop the requests in flight and drop what arrived."""
        self.ahead.close()
