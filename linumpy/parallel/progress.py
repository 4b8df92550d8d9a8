"""A progress bar over the tasks of a dask computation, local threads or distributed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dask
import dask.threaded
from dask.callbacks import Callback
from tqdm import tqdm

__all__ = ["compute_with_bar"]


class _TaskBar(Callback):
    """tqdm bar over the tasks of a local (threaded) dask computation."""

    def __init__(self, bar: tqdm) -> None:
        super().__init__()
        self._bar = bar

    def _start_state(self, dsk: Any, state: dict[str, Any]) -> None:
        keys = ("ready", "waiting", "running", "finished")
        self._bar.reset(total=sum(len(state[k]) for k in keys))

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        self._bar.update()


def compute_with_bar(
    collection: Any,
    *,
    threads: int,
    client: Any | None = None,
    desc: str = "dask",
    progress: bool = False,
    timeout: float | None = None,
) -> Any:
    """Compute a dask collection on ``threads`` local threads, or on ``client``'s cluster
    (:func:`~linumpy.parallel.on_workers.compute_on_workers`), with a tqdm bar over its tasks."""
    # delay: no bar is drawn before the task count is known (reset draws the first one)
    with tqdm(desc=desc, unit="task", disable=not progress, total=0, delay=1e-9) as bar:
        if client is None:
            # A pool of its own: on an error or Ctrl-C the tasks already running finish
            # before the caller cleans up (an aborted write's tasks would recreate its files).
            pool = ThreadPoolExecutor(threads, thread_name_prefix="linumpy-dask")
            try:
                with _TaskBar(bar):
                    # the threaded get itself: scheduler="threads" would import distributed
                    return dask.compute(collection, scheduler=dask.threaded.get, pool=pool)[0]
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
        from linumpy.parallel.on_workers import compute_on_workers

        return compute_on_workers(collection, client, bar, timeout=timeout)
