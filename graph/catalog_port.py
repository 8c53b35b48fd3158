"""The campaign graph's one door to the catalog from async code: every blocking store call runs in a worker thread.

The catalog store is synchronous (SQLModel sessions); the graph is async. A node or a driver that calls the store
goes through `CatalogPort`: `call(work)` runs `work(session)` in one session (a transaction) in a worker
thread, `run(work)` hands a blocking function the engine itself (for work of several transactions, such as the
persist node's one transaction per run). So a campaign can run as a task on a service's own event loop without
stalling it. Ports made `on` another engine (the lease's fenced one) share one count of the calls in flight,
and `drain()` waits until none is left: a cancelled campaign's blocking call goes on in its thread with a
pooled connection, and a service waits for it before it disposes of the engine.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Engine
from sqlmodel import Session

from curation.catalog import store

T = TypeVar("T")


class CallsInFlight:
    """How many blocking catalog calls are queued for or running in worker threads now, with a wait for none."""

    def __init__(self) -> None:
        self._count = 0
        self._waiting: set[object] = set()  # tickets of calls queued, not taken up by a thread yet
        self._idle = threading.Condition()

    def enter(self) -> object:
        """Count a call about to be queued; return its ticket."""
        ticket = object()
        with self._idle:
            self._count += 1
            self._waiting.add(ticket)
        return ticket

    def start(self, ticket: object) -> bool:
        """A thread takes the call up: True, unless it was abandoned while queued (then it must not run)."""
        with self._idle:
            if ticket not in self._waiting:
                return False
            self._waiting.discard(ticket)
            return True

    def abandon(self, ticket: object) -> None:
        """Its caller was cancelled: uncount the call if no thread took it up yet."""
        with self._idle:
            if ticket in self._waiting:
                self._waiting.discard(ticket)
                self._leave_locked()

    def leave(self) -> None:
        """A call taken up by a thread returned."""
        with self._idle:
            self._leave_locked()

    def _leave_locked(self) -> None:
        self._count -= 1
        if self._count == 0:
            self._idle.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until no call is in flight (True) or `timeout_s` passes (False)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._count == 0, timeout=timeout_s)


class CatalogPort:
    """The catalog as the campaign graph's async code reaches it (a worker thread per call)."""

    def __init__(self, engine: Engine, *, calls: CallsInFlight | None = None) -> None:
        self.engine = engine
        self._calls = calls or CallsInFlight()

    def on(self, engine: Engine) -> CatalogPort:
        """Return a port on `engine` (e.g. the lease's fenced engine) counting its calls with this one's."""
        return CatalogPort(engine, calls=self._calls)

    async def run(self, work: Callable[[Engine], T]) -> T:
        """Return `work(engine)`, run in a worker thread (counted in flight from now until it returns)."""
        ticket = self._calls.enter()

        def tracked() -> T:
            if not self._calls.start(ticket):
                raise asyncio.CancelledError  # its caller was cancelled before a thread took it up: never run
            try:
                return work(self.engine)
            finally:
                self._calls.leave()

        try:
            return await asyncio.to_thread(tracked)
        except asyncio.CancelledError:
            self._calls.abandon(ticket)  # not started yet: no longer counted; started: it leaves when it returns
            raise

    async def call(self, work: Callable[[Session], T], *, readonly: bool = False) -> T:
        """Return `work(session)`, run in one catalog session (committed unless `readonly`) in a worker thread."""

        def in_session(engine: Engine) -> T:
            with store.open_session(engine, readonly=readonly) as session:
                return work(session)

        return await self.run(in_session)

    async def drain(self, timeout_s: float) -> bool:
        """Wait (at most `timeout_s`) until no blocking call of this port's family is left; return whether none is."""
        return await asyncio.to_thread(self._calls.wait_idle, timeout_s)

