"""The one place linumpy reaches into zarr's private ``zarr.core`` (the type of the spec zarr
hands a codec, and zarr's I/O event loop), so that a zarr release that moves them breaks one
module; ``tests/test_compat.py`` checks that they still exist.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import TYPE_CHECKING

__all__ = ["wait_for_zarr_io"]

if TYPE_CHECKING:  # annotations only: zarr builds the specs, linumpy reads their fields
    from zarr.core.array_spec import ArraySpec  # noqa: F401


async def _others_done() -> None:
    current = asyncio.current_task()
    pending = [task for task in asyncio.all_tasks() if task is not current]
    if pending:
        await asyncio.wait(pending)


def wait_for_zarr_io(timeout: float = 2.0) -> bool:
    """Wait up to ``timeout`` seconds for the tasks on zarr's I/O event loop to finish (writes a
    Ctrl-C left running there, before an aborted write is deleted); True when none is left.
    Called from zarr's own loop thread, or with no loop started, it returns at once."""
    import zarr.core.sync

    loop = zarr.core.sync.loop[0]
    if (
        loop is None
        or not loop.is_running()
        or zarr.core.sync.iothread[0] is threading.current_thread()
    ):
        return True
    try:
        asyncio.run_coroutine_threadsafe(_others_done(), loop).result(timeout)
    except (TimeoutError, concurrent.futures.TimeoutError):
        return False
    except RuntimeError:  # the loop is closing: nothing more will run on it
        return True
    return True
