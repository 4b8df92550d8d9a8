"""Fetching byte ranges from a remote store, many requests in flight on one event loop (a
daemon thread) over obstore; a response cut short is fetched again here. The requests in flight
to one host are bounded for the whole process (:func:`host_requests`): a small web server serves
a few connections at a time, and more lose their SYNs and are tried again seconds later.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import os
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from linumpy import settings as _settings
from linumpy.errors import (
    ChunkDecodeError,
    RemoteConnectionError,
    RemoteError,
    RemoteNotFoundError,
)
from linumpy.io.remote import _obstore, _reason, is_remote_failure, remote_errors, store_url

__all__ = ["RangeClient", "host_limit", "host_requests", "range_client"]


#: Expected sizes from which a whole object is asked for as a range (below, a plain GET).
SMALLEST_GUESS = 4096


def _backoff(attempt: int) -> float:
    return min(5.0, 0.1 * 2**attempt)


class _Loop:
    """One event loop in a daemon thread per process, running the requests of every read."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None
    _pid = -1

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None or cls._pid != os.getpid():  # a forked child needs its own
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="linumpy-remote", daemon=True
                ).start()
                cls._loop, cls._pid = loop, os.getpid()
            return cls._loop


class HostLimit:
    """At most ``requests`` holders at once, awaited from any event loop or thread, in turn: the
    engine's fetches (this module's loop) and zarr's reads (its own) share one bound, which no
    loop's semaphore can be; a waiting holder is woken on its own loop."""

    #: Seconds a place stays taken after its request ended.
    GRACE = 0.002

    def __init__(self, requests: int) -> None:
        self._lock = threading.Lock()
        self._free = requests
        self._waiting: collections.deque[asyncio.Future] = collections.deque()

    async def __aenter__(self) -> None:
        with self._lock:
            if self._free > 0 and not self._waiting:
                self._free -= 1
                return
            turn = asyncio.get_running_loop().create_future()
            self._waiting.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            with self._lock:
                if turn in self._waiting:  # cancelled before its turn: it holds nothing
                    self._waiting.remove(turn)
                    raise
            self._release()  # its turn came as it was cancelled: pass it on
            raise

    async def __aexit__(self, *exc: object) -> None:
        # The transport puts a connection back in its pool just after the last bytes it read:
        # a request started at once could find none free and open one more. The timer runs on
        # this module's loop, which outlives the loop of any caller.
        RangeClient.later(self.GRACE, self._release)

    def _release(self) -> None:
        with self._lock:
            if not self._waiting:
                self._free += 1
                return
            turn = self._waiting.popleft()  # the place is the next waiter's from here
        try:
            turn.get_loop().call_soon_threadsafe(_wake, turn)
        except RuntimeError:  # its loop is closed: the place goes to the next
            self._release()


def _wake(turn: asyncio.Future) -> None:
    if not turn.done():  # a waiter cancelled meanwhile passes its place on itself
        turn.set_result(None)


_limits: dict[tuple[int, str, int], HostLimit] = {}
_limits_lock = threading.Lock()


def host_limit(url: str, requests: int | None = None) -> HostLimit:
    """The bound on the requests in flight to the host of ``url`` (``requests`` at once, by
    default :func:`host_requests`), shared by every read of the process."""
    requests = host_requests(url) if requests is None else requests
    key = (os.getpid(), _host(url), requests)  # a forked child counts its own requests
    with _limits_lock:
        found = _limits.get(key)
        if found is None:
            found = _limits[key] = HostLimit(requests)
        return found


@dataclass(frozen=True, slots=True)
class RangeClient:
    """Fetches objects and byte ranges of one remote store, many requests at once."""

    url: str
    store: Any
    requests: int = 4
    retries: int = 3
    readahead: int = 256 * 2**20

    def key_url(self, key: str) -> str:
        """The URL of ``key``."""
        return f"{self.url.rstrip('/')}/{key}"

    def key_of(self, url: str) -> str:
        """The key of a URL under the store's root (the inverse of :meth:`key_url`)."""
        return url[len(self.url.rstrip("/")) + 1 :]

    def ranges(self, ranges: Sequence[tuple[str, int, int]]) -> list[memoryview]:
        """The bytes of each ``(key, start, nbytes)``, exactly ``nbytes`` each."""
        return self._run([self._range(key, start, n) for key, start, n in ranges])

    def submit(self, requests: Sequence[tuple[str, int, int]]) -> list[concurrent.futures.Future]:
        """Start fetching each ``(key, start, nbytes)``, as many at once as the host allows, and
        return the futures at once; ``nbytes < 0`` asks for the whole object, expected to be at most
        ``-nbytes`` bytes (None when it does not exist)."""
        loop = _Loop.get()
        futures = [concurrent.futures.Future() for _ in requests]

        def start() -> None:
            for (key, first, nbytes), future in zip(requests, futures):
                if not future.set_running_or_notify_cancel():
                    continue
                task = loop.create_task(self._fetch(key, first, nbytes))
                future.task = task  # type: ignore[attr-defined]  # for cancel()
                task.add_done_callback(lambda done, future=future: _settle(future, done))

        loop.call_soon_threadsafe(start)
        return futures

    @staticmethod
    def cancel(futures: Sequence[concurrent.futures.Future]) -> None:
        """Stop the requests of :meth:`submit`'s ``futures`` still queued or in flight."""
        started = [future for future in futures if not future.cancel()]

        def stop() -> None:  # on the loop, after the start of every batch submitted before
            for future in started:
                task = getattr(future, "task", None)
                if task is not None:
                    task.cancel()

        if started:
            _Loop.get().call_soon_threadsafe(stop)

    @staticmethod
    def later(seconds: float, callback: Callable[[], Any]) -> None:
        """Call ``callback()`` on the client's event loop in ``seconds``."""
        loop = _Loop.get()
        loop.call_soon_threadsafe(loop.call_later, seconds, callback)

    async def _fetch(self, key: str, start: int, nbytes: int) -> Any:
        if nbytes < 0:
            return await self._object(key, -nbytes)
        return await self._range(key, start, nbytes)

    def _run(self, coroutines: list[Any]) -> list[Any]:
        if not coroutines:
            return []
        future = asyncio.run_coroutine_threadsafe(self._gather(coroutines), _Loop.get())
        try:
            return future.result()
        except BaseException:
            future.cancel()  # Ctrl-C or an error: the requests still in flight stop
            raise

    async def _gather(self, coroutines: list[Any]) -> list[Any]:
        tasks = [asyncio.ensure_future(c) for c in coroutines]  # each waits on the host's limit
        try:
            return await asyncio.gather(*tasks)
        finally:
            for task in tasks:  # the first failure ends the read: stop the others
                task.cancel()

    async def _retrying(self, key: str, request: Any) -> Any:
        """``await request()``, again after a response cut short (obstore retries the rest);
        each try one of the host's requests in flight."""
        host = host_limit(self.url, self.requests)
        for attempt in range(self.retries + 1):
            try:
                async with host:
                    return await request()
            except Exception as exc:
                if not is_remote_failure(exc):
                    raise
                kind, _ = _reason(exc)
                if kind is not RemoteConnectionError or attempt == self.retries:
                    with remote_errors(self.key_url(key)):
                        raise
                await asyncio.sleep(_backoff(attempt))
        raise AssertionError("unreachable")

    async def _range(self, key: str, start: int, nbytes: int) -> memoryview:
        obstore = _obstore()
        if nbytes == 0:
            return memoryview(b"")
        data = await self._retrying(
            key, lambda: obstore.get_range_async(self.store, key, start=start, length=nbytes)
        )
        view = memoryview(data)
        if len(view) != nbytes:
            raise ChunkDecodeError(
                self.key_url(key),
                f"the object ends after {start + len(view)} bytes; {nbytes} were asked for "
                f"at offset {start}",
            )
        return view

    def tails(self, keys: Sequence[str], nbytes: int) -> list[tuple[memoryview, int] | None]:
        """The last ``nbytes`` of each object (fewer if shorter) and its size; None if missing."""
        return self._run([self._part(key, {"suffix": nbytes}) for key in keys])

    def heads(self, keys: Sequence[str], nbytes: int) -> list[tuple[memoryview, int] | None]:
        """The first ``nbytes`` of each object (fewer if shorter) and its size; None if missing."""
        return self._run([self._part(key, (0, nbytes)) for key in keys])

    async def _part(self, key: str, part: Any) -> tuple[memoryview, int] | None:
        obstore = _obstore()

        async def get() -> tuple[Any, int]:
            result = await obstore.get_async(self.store, key, options={"range": part})
            return await result.bytes_async(), int(result.meta["size"])

        try:
            data, size = await self._retrying(key, get)
        except RemoteNotFoundError:
            return None
        return memoryview(data), size

    async def _object(self, key: str, most: int = 0) -> memoryview | None:
        """The whole object, None when it does not exist. One expected to be at most ``most`` bytes
        is asked for as a range of one byte more (obstore answers it in one step, a plain GET in
        two); one longer, or empty, is fetched again whole."""
        obstore = _obstore()

        async def whole() -> Any:
            result = await obstore.get_async(self.store, key)
            return await result.bytes_async()

        async def head() -> Any:
            return await obstore.get_range_async(self.store, key, start=0, length=most + 1)

        try:
            if most >= SMALLEST_GUESS:
                try:
                    data = memoryview(await self._retrying(key, head))
                except RemoteError as exc:
                    # Another answer than bytes (416 for an empty object): a plain GET tells.
                    if type(exc) is not RemoteError:  # not found, denied, timed out, cut off
                        raise
                else:
                    if len(data) <= most:
                        return data
            return memoryview(await self._retrying(key, whole))
        except RemoteNotFoundError:
            return None


def _settle(future: concurrent.futures.Future, task: asyncio.Task) -> None:
    """Hand a finished task's outcome to the future the caller holds."""
    if task.cancelled():
        future.set_exception(concurrent.futures.CancelledError())
    elif task.exception() is not None:
        future.set_exception(task.exception())
    else:
        future.set_result(task.result())


#: Requests in flight at once to one host by default (the ``remote_requests`` setting's
#: ``auto``): a plain HTTP server may be a small one, serving a few connections at a time;
#: object stores serve many, and a read of many small objects across a link needs that many.
HTTP_REQUESTS = 4
OBJECT_STORE_REQUESTS = 64
# Compressed bytes a read holds fetched ahead of its decode: the memory that keeps its requests
# busy across groups.
_READ_AHEAD_BYTES = 256 * 2**20


def _host(url: str) -> str:
    """The host a URL's requests go to (an S3 or GCS bucket's, by its name)."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def host_requests(url: str, settings: _settings.Settings | None = None) -> int:
    """The most requests in flight at once to the host of ``url``: the ``remote_requests``
    setting, by default :data:`HTTP_REQUESTS` over HTTP(S), :data:`OBJECT_STORE_REQUESTS` else."""
    settings = settings or _settings.get()
    if settings.remote_requests != "auto":
        return int(settings.remote_requests)
    http = urllib.parse.urlsplit(url).scheme in ("http", "https")
    return HTTP_REQUESTS if http else OBJECT_STORE_REQUESTS


def range_client(zarr_store: Any, settings: _settings.Settings | None = None) -> RangeClient | None:
    """A :class:`RangeClient` over the obstore store of a zarr ``ObjectStore``, else None."""
    try:
        from zarr.storage import ObjectStore
    except ImportError:  # zarr without obstore support
        return None
    if not isinstance(zarr_store, ObjectStore):
        return None
    store = zarr_store.store
    url = store_url(store)
    if url is None:
        return None
    settings = settings or _settings.get()
    requests = host_requests(url, settings)
    return RangeClient(url, store, requests, settings.remote_retries, _READ_AHEAD_BYTES)
