"""The CPU back end's file reads: a thread's chunk bytes, read into a buffer it keeps.

Chunk files are read with :func:`~linumpy.io.engine.fetch.read_chunk_file` (one open per chunk,
each file read once; a missing file is a chunk not stored). The inner chunks of shards are read
from files that a thread keeps open for its batch of chunks (:class:`OpenShards`): one
``preadv`` per chunk, no open and close.
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
from linumpy.io.engine.plan import ReadPlan

__all__ = ["ChunkReads", "OpenShards"]


class ChunkReads:
    """A plan's chunks read by the threads that decode them, each into a buffer it keeps, with
    their crc32c checked (see :meth:`linumpy.io.engine.cpu.CpuBackend.read_files`).

    Examples
    --------
    >>> import tempfile, zarr
    >>> from linumpy.io.engine.plan import plan_read
    >>> array = zarr.create_array(tempfile.mkdtemp() + "/a.zarr", shape=(4,), chunks=(2,),
    ...                           dtype="uint8")
    >>> array[:2] = 1
    >>> reads = ChunkReads(plan_read(array))
    >>> reads.read(0, None)[1] > 0, reads.read(1, None)  # the second chunk is not stored
    (True, None)
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

        Returns
        -------
        tuple or None
            ``(address, size, frame)`` as ``CpuBackend.decode_entry`` takes it; None when a
            chunk file does not exist (a shard the plan found must exist).
        """
        plan = self.plan
        file, offset, nbytes = self._file_index[entry], self._offsets[entry], self._nbytes[entry]
        key = lambda: plan.key(entry)  # noqa: E731
        if shards is None:
            data = read_chunk_file(plan.files[file], offset, nbytes, key, self._buffer)
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

    def _buffer(self, nbytes: int) -> np.ndarray:
        """This thread's read buffer, grown to hold ``nbytes``."""
        buffer = getattr(self._local, "read", None)
        if buffer is None or buffer.nbytes < nbytes:
            buffer = self._local.read = np.empty(max(nbytes, 2 * ALIGN), dtype=np.uint8)
            self._local.read_address = buffer.ctypes.data
            self._local.read_view = memoryview(buffer)
        return buffer


class OpenShards:
    """Shard files opened once for a batch of inner chunks, closed with :meth:`close`.

    Parameters
    ----------
    files
        The plan's file paths.

    Examples
    --------
    >>> import tempfile
    >>> path = tempfile.mkdtemp() + "/s"
    >>> _ = open(path, "wb").write(b"0123456789")
    >>> with OpenShards([path]) as shards:
    ...     shards.read(0, 2, 3, lambda: "s/0", lambda n: np.zeros(8, np.uint8)).tobytes()
    b'234'
    """

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
        """Read ``nbytes`` at ``offset`` of file ``file`` into ``buffer(nbytes)``.

        Parameters
        ----------
        file
            Index into the files.
        offset, nbytes
            Where the inner chunk is in its shard (``nbytes`` >= 0).
        key
            Gives the chunk's name, called only for an error.
        buffer
            ``buffer(n)``: a 1-D uint8 array of at least ``n`` bytes to read into.

        Returns
        -------
        numpy.ndarray
            The first ``nbytes`` of ``buffer(nbytes)``.

        Raises
        ------
        ChunkDecodeError
            When the shard (whose index the plan read) is gone, is a directory, or ends before
            the chunk does.
        """
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
