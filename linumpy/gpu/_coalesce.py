"""Concurrent batch calls made on one event loop, merged into one call of the batch function.

zarr reads the shards of a sharded array as concurrent tasks, each of which hands the codec the
inner chunks of one shard. An nvCOMP call takes about as long for a few large chunks as for a few
hundred (it decodes one frame per thread block), so one call per shard, run one after the other
on the codec's stream, is many times slower than one call for all of them. :class:`CallMerger`
gathers the calls that arrive while the tasks that are ready run, and while an earlier merged call
is still running, and makes one call of the batch function for all of them; with
``max_in_flight`` above 1, calls that arrive while merged calls run start their own merged call
at once, up to that many at a time (on the GPU, each on its own stream).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__: list[str] = []


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

    ``run`` must return one result per item, in order. Each caller gets the results of its own
    items. When a merged call raises, the calls are run again one by one, so an error (a corrupt
    chunk, say) reaches only the caller whose items caused it.

    Parameters
    ----------
    run
        The batch function.
    settle_rounds
        Event-loop iterations to wait, after a call arrives, for more calls; waiting goes on while
        each round brings new calls.
    settle_seconds
        Also wait this long after the rounds, again while each wait brings new calls: calls that
        come from file reads in other threads arrive spread out in time.
    max_in_flight
        Merged calls of the batch function running at once: calls that arrive while fewer run
        are served at once instead of waiting for a running call to end.
    busy_settle_seconds
        While another merged call runs, wait this long before starting one, again while each
        wait brings new calls: calls that trickle in behind a running call are merged into one
        instead of the first few taking the last free place (a first call starts at once).

    Examples
    --------
    >>> import asyncio
    >>> calls = []
    >>> async def double(items):
    ...     calls.append(len(items))
    ...     return [2 * item for item in items]
    >>> merger = CallMerger(double)
    >>> async def main():
    ...     return await asyncio.gather(merger([1, 2]), merger([3]), merger([4, 5, 6]))
    >>> asyncio.run(main()), calls
    ([[2, 4], [6], [8, 10, 12]], [6])
    """

    def __init__(
        self,
        run: Callable[[list[Item]], Awaitable[Sequence[Result]]],
        *,
        settle_rounds: int = 2,
        settle_seconds: float = 0.0,
        max_in_flight: int = 1,
        busy_settle_seconds: float = 0.0,
    ) -> None:
        self._run = run
        self._settle_rounds = settle_rounds
        self.settle_seconds = settle_seconds
        self.max_in_flight = max_in_flight
        self.busy_settle_seconds = busy_settle_seconds
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
                while seen != len(queue.pending):
                    seen = len(queue.pending)
                    for _ in range(self._settle_rounds):
                        await asyncio.sleep(0)
                    wait = self.settle_seconds
                    if queue.running:
                        wait = max(wait, self.busy_settle_seconds)
                    if wait > 0:
                        await asyncio.sleep(wait)
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
