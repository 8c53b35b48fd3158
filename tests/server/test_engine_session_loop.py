"""The engine session's client loop (`server.usecases.engine_features._LoopThread`) ends cleanly: work handed to
it after it closed is refused without leaving a coroutine never awaited (a CI run failed on exactly that warning,
from a trainer's prefetch thread fetching as the session ended on a refusal), and a fetch still waiting when it
closes is cancelled instead of hanging its thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import threading
import warnings

import pytest

from server.usecases.engine_features import _LoopThread


async def _answer(value: int) -> int:
    await asyncio.sleep(0)
    return value


def test_work_runs_then_work_after_close_is_refused_and_never_left_unawaited() -> None:
    loop = _LoopThread()
    assert loop.run(_answer(7)) == 7
    loop.close()
    loop.close()  # twice is harmless
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="closed"):
            loop.run(_answer(8))
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_a_fetch_waiting_at_close_is_cancelled_not_left_hanging() -> None:
    loop = _LoopThread()
    started, outcome = threading.Event(), []

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    def caller() -> None:
        try:
            loop.run(forever())
        except BaseException as exc:  # noqa: BLE001 - the outcome is what the test reads
            outcome.append(exc)

    thread = threading.Thread(target=caller)
    thread.start()
    assert started.wait(10)
    loop.close()
    thread.join(10)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], concurrent.futures.CancelledError)
    assert loop.loop.is_closed()
