"""BlockingRunner: bounded concurrency, and a timeout that measures the call, not its wait for a slot."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agents.search.blocking import BlockingRunner


def test_at_most_max_workers_calls_run_at_once() -> None:
    runner = BlockingRunner(3, "test")
    lock = threading.Lock()
    state = {"now": 0, "peak": 0}
    release = threading.Event()

    def work() -> int:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        release.wait(5)
        with lock:
            state["now"] -= 1
        return 1

    async def main() -> list[int]:
        tasks = [asyncio.create_task(runner.run(work, 10)) for _ in range(9)]
        await asyncio.sleep(0.2)
        release.set()
        return await asyncio.gather(*tasks)

    assert asyncio.run(main()) == [1] * 9
    assert state["peak"] == 3


def test_waiting_for_a_slot_does_not_count_against_the_timeout() -> None:
    runner = BlockingRunner(1, "test")
    release = threading.Event()

    async def main() -> tuple[str, str]:
        first = asyncio.create_task(runner.run(lambda: release.wait(5) and "first", 10))
        second = asyncio.create_task(runner.run(lambda: "second", 0.2))
        await asyncio.sleep(0.5)  # longer than the second call's timeout, spent waiting for the slot
        release.set()
        return await first, await second

    assert asyncio.run(main()) == ("first", "second")


def test_a_call_over_its_timeout_raises_timeout_error() -> None:
    runner = BlockingRunner(1, "test")
    release = threading.Event()

    async def main() -> None:
        try:
            await runner.run(lambda: release.wait(5), 0.05)
        finally:
            release.set()

    with pytest.raises(TimeoutError):
        asyncio.run(main())


def test_one_runner_serves_several_event_loops() -> None:
    runner = BlockingRunner(2, "test")
    assert asyncio.run(runner.run(lambda: 1, 1)) == 1
    assert asyncio.run(runner.run(lambda: 2, 1)) == 2
