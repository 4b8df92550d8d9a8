"""CallMerger: concurrent batch calls on one event loop merged into one batch-function call."""

from __future__ import annotations

import asyncio

import pytest

from linumpy.gpu._coalesce import CallMerger


class Recorder:
    """A batch function that squares numbers, records each call, and refuses negatives."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[list[int]] = []
        self.delay = delay

    async def __call__(self, items: list[int]) -> list[int]:
        self.calls.append(list(items))
        await asyncio.sleep(self.delay)
        if any(item < 0 for item in items):
            raise ValueError(f"negative item in {items}")
        return [item * item for item in items]


def test_concurrent_calls_share_one_run() -> None:
    run = Recorder()
    merger = CallMerger(run)

    async def main() -> list[list[int]]:
        return await asyncio.gather(merger([1, 2]), merger([3]), merger([]), merger([4, 5]))

    assert asyncio.run(main()) == [[1, 4], [9], [], [16, 25]]
    assert run.calls == [[1, 2, 3, 4, 5]]


def test_sequential_calls_run_alone() -> None:
    run = Recorder()
    merger = CallMerger(run)

    async def main() -> list[list[int]]:
        return [await merger([1]), await merger([2, 3])]

    assert asyncio.run(main()) == [[1], [4, 9]]
    assert run.calls == [[1], [2, 3]]


def test_calls_arriving_during_a_run_go_into_the_next_one() -> None:
    run = Recorder(delay=0.05)
    merger = CallMerger(run)

    async def late(items: list[int]) -> list[int]:
        await asyncio.sleep(0.01)  # after the first run started
        return await merger(items)

    async def main() -> list[list[int]]:
        return await asyncio.gather(merger([1]), late([2]), late([3]))

    assert asyncio.run(main()) == [[1], [4], [9]]
    assert run.calls == [[1], [2, 3]]


def test_an_error_reaches_only_the_call_that_caused_it() -> None:
    run = Recorder()
    merger = CallMerger(run)

    async def main() -> list[object]:
        return await asyncio.gather(
            merger([1]), merger([-2, 2]), merger([3]), return_exceptions=True
        )

    good, bad, other = asyncio.run(main())
    assert good == [1] and other == [9]
    assert isinstance(bad, ValueError) and "[-2, 2]" in str(bad)
    assert run.calls == [[1, -2, 2, 3], [1], [-2, 2], [3]]


def test_an_error_in_one_of_two_calls_in_flight_reaches_only_its_caller() -> None:
    """Two merged calls running at once, one with a bad item: its callers are run one by one and
    only the one that caused the error gets it; the other merged call is untouched."""
    run = Recorder(delay=0.05)
    merger = CallMerger(run, max_in_flight=2)

    async def late(items: list[int]) -> list[int]:
        await asyncio.sleep(0.01)  # after the first merged call started
        return await merger(items)

    async def main() -> list[object]:
        return await asyncio.gather(
            merger([1]), merger([2]), late([-3]), late([4]), return_exceptions=True
        )

    one, two, bad, four = asyncio.run(main())
    assert (one, two, four) == ([1], [4], [16])
    assert isinstance(bad, ValueError) and "[-3]" in str(bad)
    assert run.calls == [[1, 2], [-3, 4], [-3], [4]]


def test_different_keys_are_not_merged() -> None:
    run = Recorder()
    merger = CallMerger(run)

    async def main() -> list[list[int]]:
        return await asyncio.gather(
            merger([1], key="a"), merger([2], key="b"), merger([3], key="a")
        )

    assert asyncio.run(main()) == [[1], [4], [9]]
    assert sorted(run.calls) == [[1, 3], [2]]


def test_a_cancelled_caller_leaves_the_others_served() -> None:
    run = Recorder(delay=0.05)
    merger = CallMerger(run)

    async def main() -> tuple[list[int], list[int]]:
        first = asyncio.ensure_future(merger([1]))
        doomed = asyncio.ensure_future(merger([2]))
        await asyncio.sleep(0)
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        return await first, await merger([3])

    assert asyncio.run(main()) == ([1], [9])


def test_separate_event_loops_have_separate_queues() -> None:
    run = Recorder()
    merger = CallMerger(run)
    assert asyncio.run(merger([2])) == [4]
    assert asyncio.run(merger([3])) == [9]
    assert run.calls == [[2], [3]]


@pytest.mark.parametrize(
    ("max_in_flight", "expected", "overlapped"),
    [(1, [[1], [2, 3, 4]], False), (2, [[1], [2], [3, 4]], True), (8, [[1], [2], [3], [4]], True)],
)
def test_max_in_flight_serves_late_calls_beside_a_running_one(
    max_in_flight: int, expected: list[list[int]], overlapped: bool
) -> None:
    """Calls 20 ms apart, each run lasting 100 ms: one at a time, later calls wait and merge;
    more in flight, they start at once, beside the running ones."""
    spans: list[tuple[float, float]] = []

    async def timed(items: list[int]) -> list[int]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(0.1)
        spans.append((start, loop.time()))
        return [item * item for item in items]

    calls: list[list[int]] = []

    async def run(items: list[int]) -> list[int]:
        calls.append(list(items))
        return await timed(items)

    merger = CallMerger(run, max_in_flight=max_in_flight)

    async def after(delay: float, items: list[int]) -> list[int]:
        await asyncio.sleep(delay)
        return await merger(items)

    async def main() -> list[list[int]]:
        return await asyncio.gather(*(after(0.02 * k, [k + 1]) for k in range(4)))

    assert asyncio.run(main()) == [[1], [4], [9], [16]]
    assert calls == expected
    starts = sorted(start for start, _ in spans)
    first_end = min(end for _, end in spans)
    assert (starts[1] < first_end) is overlapped
