"""Where an image is: local paths, ``file://``, ``http(s)://``, ``s3://``, ``gs://``, zarr objects.
A string is a URL only when it starts with ``scheme://``: ``#``, ``?``, ``%`` in local names are
just characters.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zarr
from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, Store
from zarr.storage import LocalStore, ObjectStore

from linumpy import settings as _settings
from linumpy.errors import LinumpyError, RemoteNotFoundError, RemotePermissionError
from linumpy.io.remote import (
    local_path,
    object_store,
    remote_errors,
    store_url,
    url_scheme,
)

__all__: list[str] = []

#: What the readers accept as a source.
SourceLike = str | os.PathLike[str] | zarr.Array | zarr.Group | Store


@dataclass(frozen=True, slots=True)
class Source:
    """A resolved source."""

    name: str
    local: Path | None = None
    url: str | None = None
    node: zarr.Array | zarr.Group | None = None
    store: Store | None = None
    storage_options: Mapping[str, Any] | None = None


def parse_source(source: SourceLike, storage_options: Mapping[str, Any] | None = None) -> Source:
    """Tell what ``source`` is: a local path, a remote URL, a zarr node or a zarr store."""
    if isinstance(source, zarr.Array | zarr.Group):
        return Source(str(source.store_path), node=source)
    if isinstance(source, Store):
        return Source(str(source), store=source)
    if isinstance(source, str):
        scheme = url_scheme(source)
        if scheme == "file":
            path = local_path(source)
            return Source(os.fspath(path), local=path)
        if scheme is not None:
            object_store(source, storage_options)  # the scheme and options checked at once
            return Source(
                source.rstrip("/"), url=source.rstrip("/"), storage_options=storage_options
            )
        return Source(source, local=Path(source))
    if isinstance(source, os.PathLike):
        path = Path(source)
        return Source(os.fspath(path), local=path)
    raise LinumpyError(
        f"cannot read a {type(source).__name__}: pass a path, a URL, a zarr.Array, a zarr.Group "
        "or a zarr store"
    )


def open_store(source: Source, *, writable: bool = False) -> Store:
    """The zarr store of a source that is not a zarr node (a local folder or a URL)."""
    if source.store is not None:
        return source.store
    if source.local is not None:
        return LocalStore(source.local, read_only=not writable)
    if source.url is None:
        raise LinumpyError(f"{source.name}: a zarr node has no store of its own to open")
    scheme = url_scheme(source.url)
    if writable and scheme in ("http", "https"):
        raise RemotePermissionError(
            source.url, "HTTP servers are read-only; write to s3://, gs:// or a local path"
        )
    with remote_errors(source.url):
        store = object_store(source.url, source.storage_options, _settings.get())
        return MetadataOnceStore(store, read_only=not writable)


def describe(source: Any) -> str:
    """The name of a source for messages: its path or URL, or the zarr object's store path."""
    if isinstance(source, zarr.Array | zarr.Group):
        return str(source.store_path)
    return os.fspath(source) if isinstance(source, str | os.PathLike) else str(source)


def open_node(source: Source) -> zarr.Array | zarr.Group:
    """The zarr array or group of a source that is not on the local file system (read-only)."""
    if source.node is not None:
        return source.node
    store = open_store(source)
    once = isinstance(store, MetadataOnceStore)
    with remote_errors(source.name), store.metadata_once() if once else contextlib.nullcontext():
        try:
            return zarr.open(store=store, mode="r")
        except (FileNotFoundError, zarr.errors.NodeNotFoundError):
            raise RemoteNotFoundError(
                source.name,
                "no zarr array or OME-Zarr image here (no zarr.json, .zarray or .zgroup)",
            ) from None


#: The names of zarr metadata objects, v3 and v2.
METADATA_NAMES = ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata")


class MetadataOnceStore(ObjectStore):
    """zarr's :class:`~zarr.storage.ObjectStore`, which can fetch a node's metadata in one go:
    inside :meth:`metadata_once`, the first read of a folder's metadata object fetches all five
    names at once (zarr alone asks for seven in two round trips to open an image)."""

    def __init__(self, store: Any, *, read_only: bool = False) -> None:
        super().__init__(store, read_only=read_only)
        self._memo: dict[str, asyncio.Future] | None = None
        #: The metadata keys fetched inside the last :meth:`metadata_once`.
        self.fetched: list[str] = []

    @contextlib.contextmanager
    def metadata_once(self) -> Iterator[None]:
        """While the block runs, each metadata object is fetched once, with its folder's."""
        self._memo, self.fetched = {}, []
        try:
            yield
        finally:
            # Prefetches never read (a group's names when the node is an array) finish on zarr's
            # event loop, where they run; nothing here may touch them from this thread.
            self._memo = None

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """The object ``key`` (or a range of it), as zarr's ObjectStore reads it."""
        memo = self._memo
        folder, _, name = key.rpartition("/")
        if memo is None or byte_range is not None or name not in METADATA_NAMES:
            return await self._limited_get(key, prototype, byte_range)
        if key not in memo:
            for other in METADATA_NAMES:
                sibling = f"{folder}/{other}" if folder else other
                if sibling not in memo:
                    memo[sibling] = asyncio.ensure_future(self._limited_get(sibling, prototype))
                    memo[sibling].add_done_callback(_retrieved)
                    self.fetched.append(sibling)
        return await asyncio.shield(memo[key])

    async def _limited_get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """zarr's read of ``key``, one of the host's requests in flight (those of the engine's
        fetches included: see :func:`~linumpy.io.remote_client.host_limit`)."""
        from linumpy.io.remote_client import host_limit

        url = store_url(self.store)
        if url is None:
            return await super().get(key, prototype, byte_range)
        async with host_limit(url):
            return await super().get(key, prototype, byte_range)

    def __getstate__(self) -> dict[Any, Any]:
        state = super().__getstate__()
        state["_memo"] = None
        return state


def _retrieved(future: asyncio.Future) -> None:
    """Take a prefetch's error, if any, so that asyncio does not log it as never retrieved
    (a read of that key raises it)."""
    if not future.cancelled():
        future.exception()


class UrlPath(str):
    """The location of a remote object, for messages: a string that joins with ``/`` like a
    :class:`pathlib.Path` and is never a local file (``is_file()`` is False)."""

    __slots__ = ()

    @property
    def name(self) -> str:
        """The last part of the URL (as :attr:`pathlib.Path.name`)."""
        return self.rstrip("/").rsplit("/", 1)[-1]

    def __truediv__(self, part: object) -> UrlPath:
        return UrlPath(f"{self.rstrip('/')}/{part}")

    def is_file(self) -> bool:
        """False: a remote object is not a local file."""
        return False


def location(name: str | os.PathLike[str], *parts: str) -> Path | UrlPath:
    """``Path(name, *parts)`` for a local name, a :class:`UrlPath` for a URL or a zarr object's
    store path (``memory://...``), so that messages keep the URL as it was given."""
    if url_scheme(name) is None:
        return Path(name, *parts)
    found = UrlPath(os.fspath(name))
    for part in parts:
        found = found / part
    return found
