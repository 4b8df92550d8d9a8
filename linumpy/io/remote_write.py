"""Writing an image to an object store so that it never reads as a valid image before it is whole.

Object stores cannot rename a folder, so an image is written in place, in an order that stands in
for the local swap: an overwrite deletes the old image's top-level metadata first, then the rest
of it; the new chunks come next, and the metadata last (:class:`MetadataLastStore` holds it back
until :meth:`~MetadataLastStore.flush`). An interrupted write leaves the old image whole or no
image, never one that reads as zeros or a mix of old and new chunks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.storage import WrapperStore

__all__ = ["METADATA_NAMES", "MetadataLastStore", "remove_image"]

#: The names of zarr's metadata objects (v3 and v2).
METADATA_NAMES = ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata")


def _is_metadata(key: str) -> bool:
    return key.rsplit("/", 1)[-1] in METADATA_NAMES


class MetadataLastStore(WrapperStore[Any]):
    """A writable zarr store that holds metadata back until :meth:`flush`: chunks go to the
    wrapped store at once, metadata objects stay here (and are read from here) until then."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self._pending: dict[str, Buffer] = {}

    def _with_store(self, store: Any) -> MetadataLastStore:
        clone = type(self)(store)
        clone._pending = self._pending  # one image, one set of metadata held back
        return clone

    @property
    def pending(self) -> list[str]:
        """The metadata keys held back, in the order :meth:`flush` writes them."""
        return sorted(self._pending, key=lambda key: (-key.count("/"), key))

    async def set(self, key: str, value: Buffer) -> None:
        if _is_metadata(key):
            self._pending[key] = value
        else:
            await self._store.set(key, value)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        if _is_metadata(key):
            self._pending.setdefault(key, value)
        else:
            await self._store.set_if_not_exists(key, value)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if key in self._pending:
            value = self._pending[key]
            if byte_range is None:
                return value
            data = value.to_bytes()
            if isinstance(byte_range, RangeByteRequest):
                data = data[byte_range.start : byte_range.end]
            elif isinstance(byte_range, OffsetByteRequest):
                data = data[byte_range.offset :]
            elif isinstance(byte_range, SuffixByteRequest):
                data = data[-byte_range.suffix :]
            return prototype.buffer.from_bytes(data)
        return await self._store.get(key, prototype, byte_range)

    async def exists(self, key: str) -> bool:
        return key in self._pending or await self._store.exists(key)

    async def delete(self, key: str) -> None:
        self._pending.pop(key, None)
        await self._store.delete(key)

    async def delete_dir(self, prefix: str) -> None:
        prefix = prefix.rstrip("/")
        for key in [k for k in self._pending if not prefix or k.startswith(prefix + "/")]:
            del self._pending[key]
        await self._store.delete_dir(prefix)

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        seen = set()
        async for key in self._store.list_dir(prefix):
            seen.add(key)
            yield key
        start = prefix.rstrip("/") + "/" if prefix.rstrip("/") else ""
        for key in self._pending:
            if key.startswith(start):
                child = key[len(start) :].split("/", 1)[0]
                if child not in seen:
                    seen.add(child)
                    yield child

    def flush(self) -> None:
        """Write the metadata held back: the deepest first, the top-level group's last."""

        async def write() -> None:
            for key in self.pending:  # one at a time: the top-level group's last
                await self._store.set(key, self._pending[key])

        with ThreadPoolExecutor(1) as thread:  # an event loop of its own, whoever calls
            thread.submit(asyncio.run, write()).result()
        self._pending.clear()


def remove_image(store: Any, url: str) -> None:
    """Delete an image from an obstore store: its top-level metadata first, so that it no longer
    opens as an image, then every other object under the store's root."""
    from linumpy.io.remote import _obstore, delete_all, remote_errors

    obstore = _obstore()
    with remote_errors(url):
        for key in METADATA_NAMES:
            try:
                obstore.delete(store, key)
            except FileNotFoundError:  # some stores refuse to delete what is not there
                continue
    delete_all(store, url)
