"""The graph's async port to the catalog: blocking calls run off the event loop, and `drain` waits for the ones a
cancelled caller left running (what a service needs before it disposes of the engine)."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import Engine
from sqlmodel import Session

from curation.catalog import store
from graph.catalog_port import CatalogPort


def test_a_call_runs_in_one_session_off_the_event_loop(engine: Engine) -> None:
    def create(session: Session) -> tuple[str, int]:
        campaign = store.create_campaign(session, categories=["math"], offline=True, backends=[], campaign_id="c1")
        return campaign.id, threading.get_ident()

    async def scenario() -> tuple[tuple[str, int], int]:
        return await CatalogPort(engine).call(create), threading.get_ident()

    (created, worker), loop_thread = asyncio.run(scenario())
    assert created == "c1" and worker != loop_thread
    with store.open_session(engine, readonly=True) as session:  # committed when the call returned
        assert store.get_campaign(session, campaign_id="c1").status == "pending"


def test_drain_waits_for_a_call_whose_caller_was_cancelled(engine: Engine) -> None:
    started, finished = threading.Event(), threading.Event()

    def slow(session: Session) -> None:
        started.set()
        time.sleep(0.5)
        store.list_campaigns(session, limit=1)
        finished.set()

    async def scenario() -> bool:
        port = CatalogPort(engine)
        task = asyncio.create_task(port.on(engine).call(slow))  # a port made `on` an engine shares the count
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert not finished.is_set()  # the caller is gone, its thread is not
        return await port.drain(10)

    assert asyncio.run(scenario()) and finished.is_set()


def test_a_call_cancelled_before_a_thread_takes_it_up_never_runs(engine: Engine) -> None:
    release, ran = threading.Event(), []

    async def scenario() -> bool:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))
        port = CatalogPort(engine)
        blocker = asyncio.create_task(port.run(lambda _engine: release.wait(10)))
        queued = asyncio.create_task(port.run(lambda _engine: ran.append(True)))
        await asyncio.sleep(0.1)
        queued.cancel()
        await asyncio.gather(queued, return_exceptions=True)
        release.set()
        await blocker
        return await port.drain(10)

    assert asyncio.run(scenario())
    assert ran == []
