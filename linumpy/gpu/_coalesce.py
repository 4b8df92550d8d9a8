"""Concurrent batch calls made on one event loop, merged into one call of the batch function.

zarr hands the codec one call per shard; an nvCOMP call takes about as long for a few chunks as
for a few hundred, so calls that arrive together (or while a merged call runs) are merged into one
call of the batch function, up to ``max_in_flight`` merged calls at once.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__: list[str] = []

# Event-loop iterations to wait for more calls after one arrives.
_SETTLE_ROUNDS = 2


@dataclass(slots=True)
class _Queue:
    """Calls of one event loop and one key waiting for the batch function."""

    pending: list[tuple[list[Any], asyncio.Future[list[Any]]]] = field(default_factory=list)
    drain: asyncio.Task[None] | None = None
    running: set[asyncio.Task[None]] = field(default_factory=set)


def _settle(
    future: asyncio.Future[Any], result: Any = None, error: BaseException | None = None
) -> None:
    if future.done():  # the caller was cancelled, or already has its answer
        return
    if isinstance(error, asyncio.CancelledError):
        future.cancel()
    elif error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class CallMerger[Item, Result]:
    """Merge concurrent ``await merger(items)`` calls into calls of ``run(all_items)``.

    ``run`` returns one result per item, in order; each caller gets its own items' results. When
    a merged call raises, its calls are run again one by one, so an error (a corrupt chunk) reaches
    only the caller whose items caused it. ``max_in_flight`` merged calls may run at once.
    """

    def __init__(
        self,
        run: Callable[[list[Item]], Awaitable[Sequence[Result]]],
        *,
        max_in_flight: int = 1,
    ) -> None:
        self._run = run
        self.max_in_flight = max_in_flight
        self._lock = threading.Lock()
        self._queues: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[Hashable, _Queue]
        ] = weakref.WeakKeyDictionary()

    async def __call__(self, items: Sequence[Item], key: Hashable = None) -> list[Result]:
        """Run ``items`` through the batch function, merged with calls of the same ``key``."""
        loop = asyncio.get_running_loop()
        with self._lock:
            queue = self._queues.setdefault(loop, {}).setdefault(key, _Queue())
        future: asyncio.Future[list[Any]] = loop.create_future()
        queue.pending.append((list(items), future))
        if queue.drain is None:
            queue.drain = loop.create_task(self._drain(queue))
        return await future

    async def _drain(self, queue: _Queue) -> None:
        """Start merged calls of the pending calls while fewer than ``max_in_flight`` run."""
        loop = asyncio.get_running_loop()
        try:
            while queue.pending and len(queue.running) < self.max_in_flight:
                seen = -1
                while seen != len(queue.pending):  # wait while each round brings calls
                    seen = len(queue.pending)
                    for _ in range(_SETTLE_ROUNDS):
                        await asyncio.sleep(0)
                calls, queue.pending = queue.pending, []
                task = loop.create_task(self._serve(calls))
                queue.running.add(task)
                task.add_done_callback(lambda done: self._served(queue, done))
        except BaseException as exc:
            for _, future in queue.pending:
                _settle(future, error=exc)
            queue.pending = []
            raise
        finally:
            queue.drain = None

    def _served(self, queue: _Queue, task: asyncio.Task[None]) -> None:
        """A merged call ended: serve what waited for it."""
        queue.running.discard(task)
        if not task.cancelled():
            task.exception()  # its callers got the error; nobody else waits for it
        if queue.pending and queue.drain is None:
            queue.drain = task.get_loop().create_task(self._drain(queue))

    async def _serve(self, calls: list[tuple[list[Any], asyncio.Future[list[Any]]]]) -> None:
        calls = [(items, future) for items, future in calls if not future.done()]
        try:
            if len(calls) > 1:
                try:
                    results = list(await self._run([item for items, _ in calls for item in items]))
                except Exception:
                    pass  # run the calls one by one: the error goes to the call that caused it
                else:
                    start = 0
                    for items, future in calls:
                        _settle(future, results[start : start + len(items)])
                        start += len(items)
                    return
            for items, future in calls:
                try:
                    _settle(future, list(await self._run(items)))
                except Exception as exc:
                    _settle(future, error=exc)
        except BaseException as exc:  # cancelled: nobody may wait forever
            for _, future in calls:
                _settle(future, error=exc)
            raise
