"""A dask computation on a ``dask.distributed`` cluster that stops at its first failed task,
with the error in one line (a lost scheduler or workers: :class:`~linumpy.errors.ClusterLostError`);
its tasks still running get a short grace to end, so that the caller's clean-up removes what they
wrote."""

from __future__ import annotations

import time
from concurrent.futures import CancelledError
from typing import Any

from linumpy.errors import ClusterError, ClusterLostError

__all__ = ["CANCEL_GRACE_S", "INTERRUPT_GRACE_S", "compute_on_workers"]

#: Seconds a failed job waits for its tasks still running to end before it reports the error.
CANCEL_GRACE_S = 2.0
#: Seconds an interrupted job waits for its tasks still running to end (a second Ctrl-C stops).
INTERRUPT_GRACE_S = 10.0
#: Seconds between two looks at the futures and the workers.
POLL_S = 0.2


def _address(client: Any) -> str:
    try:
        return str(client.scheduler.address)
    except AttributeError:
        return "unknown"


def _lost_scheduler(address: str) -> ClusterLostError:
    return ClusterLostError(
        f"lost the dask scheduler at {address!r}; the old outputs are left as they were"
    )


def _translated(future: Any, address: str) -> BaseException:
    """The error a failed (or cancelled) future stands for, as one line."""
    from distributed import KilledWorker

    if future.status == "cancelled":
        return _lost_scheduler(address)
    exc = future.exception()
    if isinstance(exc, KilledWorker):
        last = getattr(getattr(exc, "last_worker", None), "address", "unknown")
        return ClusterLostError(
            f"a task killed its dask workers {exc.allowed_failures + 1} times (the last "
            f"{last}, scheduler {address!r}); their logs say why (memory limit?)"
        )
    if isinstance(exc, RuntimeError) and "deserialization of the task graph" in str(exc):
        return ClusterError(
            f"the dask scheduler at {address!r} cannot read the job's tasks: the scheduler and "
            "the workers need the client's environment (linumpy and the same versions)"
        )
    return exc.with_traceback(None) if exc is not None else _lost_scheduler(address)


def _worker_count(client: Any) -> int | None:
    """Workers of the scheduler now; None when the client has lost the scheduler."""
    if client.status != "running":
        return None
    try:
        return len(client.scheduler_info(n_workers=-1).get("workers", {}))
    except (OSError, TimeoutError):
        return None


def _stop(client: Any, futures: list[Any], grace: float) -> None:
    """Cancel ``futures`` and wait up to ``grace`` seconds for the workers' running tasks to end."""
    try:
        client.cancel(futures)
    except (OSError, TimeoutError):
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            if not any(client.processing().values()):
                return
        except (OSError, TimeoutError):
            return
        time.sleep(POLL_S / 2)


def compute_on_workers(
    collection: Any, client: Any, bar: Any, *, timeout: float | None = None
) -> Any:
    """Compute ``collection`` on ``client``'s cluster, updating the tqdm ``bar`` as its output
    blocks finish; ``timeout``: seconds with no worker before the job fails (None waits on)."""
    from distributed import futures_of, wait

    address = _address(client)
    try:
        persisted = client.persist(collection)
    except (OSError, TimeoutError):
        raise _lost_scheduler(address) from None
    futures = futures_of(persisted)
    bar.reset(total=len(futures))
    pending = set(futures)
    alone_since: float | None = None
    try:
        while pending:
            try:
                done, pending = wait(pending, timeout=POLL_S, return_when="FIRST_COMPLETED")
            except TimeoutError:
                done = set()
            except CancelledError:  # by the client, which lost its scheduler
                raise _lost_scheduler(address) from None
            for future in done:
                if future.status != "finished":
                    raise _translated(future, address)
                bar.update()
            if done:
                continue
            workers = _worker_count(client)
            if workers is None:
                raise _lost_scheduler(address)
            if workers:
                alone_since = None
                continue
            alone_since = alone_since or time.monotonic()
            if timeout is not None and time.monotonic() - alone_since > timeout:
                raise ClusterLostError(
                    f"every dask worker of the scheduler at {address!r} was lost, and none "
                    f"joined within {timeout:g} s (--cluster-timeout)"
                )
        try:
            return client.compute(persisted, sync=True)
        except CancelledError:
            raise _lost_scheduler(address) from None
    except KeyboardInterrupt:
        _stop(client, futures, INTERRUPT_GRACE_S)
        raise
    except BaseException:
        _stop(client, futures, CANCEL_GRACE_S)
        raise
