"""The background page-locking of a GPU command's first staging buffers."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


def test_a_read_takes_the_buffers_the_warm_up_locked() -> None:
    from linumpy.gpu import pinned_buffers
    from linumpy.gpu.pinned_buffers import PinnedLease, warm_up_staging

    # a fresh cache of staging buffers, as in a new process
    with pinned_buffers._lease_lock:
        saved = {k: v for k, v in pinned_buffers._idle.items() if k[0] == "staging"}
        for key in saved:
            del pinned_buffers._idle[key]
    try:
        mib = 2**20
        assert warm_up_staging(3 * mib, slots=2, copies=1)
        assert not warm_up_staging(3 * mib, slots=2)  # one at a time
        lease = PinnedLease()
        first = lease.get("staging", 0, 2 * mib, room=4 * mib)  # waits for the warm-up
        second = lease.get("staging", 1, 3 * mib, room=4 * mib)
        assert first.nbytes == 2 * mib and second.nbytes == 3 * mib
        locked = [entry[1] for key in (("staging", 0), ("staging", 1))
                  for entry in [lease._held[key]]]  # fmt: skip
        assert [buffer.nbytes for buffer in locked] == [3 * mib, 3 * mib]  # the warm-up's size
        lease.close()
        # buffers already idle: nothing to warm up
        assert not warm_up_staging(3 * mib, slots=2)
    finally:
        with pinned_buffers._lease_lock:
            for key, entries in saved.items():
                pinned_buffers._idle.setdefault(key, []).extend(entries)
