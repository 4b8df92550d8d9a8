"""The CPU back end's file reads: a thread's chunk bytes, read into a buffer it keeps.

Chunk files are read with :func:`~linumpy.io.engine.fetch.read_chunk_file` (one open per chunk,
each file read once; a missing file is a chunk not stored). The inner chunks of shards are read
from files that a thread keeps open for its batch of chunks (:class:`OpenShards`): one
``preadv`` per chunk, no open and close.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np

from linumpy.errors import ChunkDecodeError
from linumpy.io.engine.fetch import open_chunk_file, read_exactly

__all__ = ["OpenShards"]


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
