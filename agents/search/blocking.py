"""Running a blocking client call (huggingface_hub, ddgs) from async code: bounded, timed, off the event loop.

Each backend owns one `BlockingRunner`: a thread pool of `max_workers` and, per event loop, a semaphore of the
same size. A call first waits for a free slot, then runs in the pool under `timeout_s`, so the timeout measures
the call itself, not the queue of a campaign that fans out dozens of searches at once. A call that times out
keeps its thread until the client returns (threads cannot be cancelled); its slot is released at once.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class BlockingRunner:
    """Runs blocking functions in a bounded thread pool with a per-call timeout."""

    def __init__(self, max_workers: int, name: str) -> None:
        self.max_workers = max_workers
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=name)
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    async def run(self, function: Callable[[], T], timeout_s: float) -> T:
        """Return `function()` run in the pool; raise TimeoutError when it takes longer than `timeout_s`."""
        loop = asyncio.get_running_loop()
        slots = self._slots.get(loop)
        if slots is None:
            slots = self._slots[loop] = asyncio.Semaphore(self.max_workers)
        async with slots:
            return await asyncio.wait_for(loop.run_in_executor(self._executor, function), timeout=timeout_s)
