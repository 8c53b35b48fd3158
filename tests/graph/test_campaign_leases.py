"""A campaign holds its lease while it runs: another holder refuses it, a heartbeat keeps it, a lost one stops it."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from campaign_fakes import FakeIndex, ScriptedSubagent, deliverable_for
from sqlalchemy import Engine, update

from core.candidates import Deliverable
from core.settings import get_settings
from core.types import Category
from curation.catalog import store
from curation.catalog.models import Lease
from graph.campaign import CampaignBusyError, CampaignLeaseLostError, run_campaign

OTHER = "other-host:4242:replica-b"


@pytest.fixture
def short_leases(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setenv("DATAHUNT_LEASE_TTL_S", "0.4")
    get_settings.cache_clear()
    return 0.4


def slow(seconds: float) -> ScriptedSubagent:
    async def deliver(category: Category) -> Deliverable:
        await asyncio.sleep(seconds)
        return deliverable_for(category)

    return ScriptedSubagent({"math": deliver})


def _pending(engine: Engine, campaign_id: str) -> None:
    with store.open_session(engine) as session:
        store.create_campaign(session, categories=["math"], offline=True, backends=["offline"], campaign_id=campaign_id)


def test_a_campaign_another_process_holds_is_refused_untouched(engine: Engine) -> None:
    _pending(engine, "c")
    with store.open_session(engine) as session:
        assert store.acquire_lease(session, name=store.campaign_lease("c"), owner=OTHER, ttl_s=60) is not None
    subagent = ScriptedSubagent()
    with pytest.raises(CampaignBusyError, match=f"worked on elsewhere \\({OTHER}"):
        asyncio.run(run_campaign(engine=engine, settings=get_settings(), campaign_id="c", subagent=subagent, backends=[FakeIndex()]))
    assert subagent.calls == []
    with store.open_session(engine) as session:
        assert store.get_campaign(session, campaign_id="c").status == "pending"
        assert store.list_runs(session, campaign_id="c") == []
        store.release_lease(session, name=store.campaign_lease("c"), owner=OTHER)
    asyncio.run(run_campaign(engine=engine, settings=get_settings(), campaign_id="c", subagent=subagent, backends=[FakeIndex()]))
    with store.open_session(engine) as session:
        assert store.get_campaign(session, campaign_id="c").status == "succeeded"
        assert store.lease_holder(session, name=store.campaign_lease("c")) is None  # released at the end


@pytest.mark.slow
def test_the_heartbeat_keeps_a_long_campaign_its_lease(engine: Engine, short_leases: float) -> None:
    _pending(engine, "c")
    stop = threading.Event()
    stolen: list[bool] = []

    def rival() -> None:  # another replica trying to take the campaign all along, once it runs
        while not stop.is_set():
            with store.open_session(engine) as session:
                if store.lease_holder(session, name=store.campaign_lease("c")) is not None:
                    break
            time.sleep(0.01)
        while not stop.is_set():
            with store.open_session(engine) as session:
                stolen.append(store.acquire_lease(session, name=store.campaign_lease("c"), owner=OTHER,
                                                  ttl_s=60) is not None)
            time.sleep(0.05)

    thread = threading.Thread(target=rival)
    thread.start()
    try:  # the run lasts four lease periods
        asyncio.run(run_campaign(engine=engine, settings=get_settings(), campaign_id="c", subagent=slow(4 * short_leases),
                                 backends=[FakeIndex()]))
    finally:
        stop.set()
        thread.join()
    assert len(stolen) > 10 and not any(stolen[:-2])  # after the release at the end a last try may win
    with store.open_session(engine) as session:
        assert store.get_campaign(session, campaign_id="c").status == "succeeded"


def test_a_run_that_loses_its_lease_stops_without_touching_the_campaign(engine: Engine, short_leases: float) -> None:
    _pending(engine, "c")

    async def scenario() -> None:
        running = asyncio.create_task(run_campaign(engine=engine, settings=get_settings(), campaign_id="c", subagent=slow(30),
                                                   backends=[FakeIndex()]))
        await asyncio.sleep(short_leases / 2)
        with store.open_session(engine) as session:  # this process stalled; another took the campaign over
            session.execute(update(Lease).where(Lease.name == store.campaign_lease("c")).values(owner=OTHER))
        await running

    started = time.monotonic()
    with pytest.raises(CampaignLeaseLostError, match="another process took over"):
        asyncio.run(scenario())
    assert time.monotonic() - started < 10  # stopped at the next heartbeat, not after the 30 s search
    with store.open_session(engine) as session:
        assert store.get_campaign(session, campaign_id="c").status == "running"  # the new owner's to finish
        holder = store.lease_holder(session, name=store.campaign_lease("c"))
        assert holder is not None and holder.owner == OTHER


def test_the_heartbeat_renews_while_the_loop_and_its_thread_pool_are_busy(engine: Engine) -> None:
    # Embedding and search work share the default thread pool, and the graph's nodes make blocking catalog
    # calls on its loop: neither may keep the lease from being renewed.
    from graph.lease import HeldLease

    ttl = 0.6
    with store.open_session(engine) as session:
        campaign = store.create_campaign(session, categories=["math"], offline=True, backends=["offline"])
    lease = HeldLease(engine, campaign.id, ttl_s=ttl)

    async def busy() -> list[bool]:
        taken: list[bool] = []
        async with lease.held():
            pool = [asyncio.to_thread(time.sleep, 4 * ttl) for _ in range(64)]  # every pool thread, and a queue
            waiting = asyncio.gather(*pool)
            for _ in range(4):
                time.sleep(ttl / 2)  # the loop itself blocked, as a blocking catalog call does
                with store.open_session(engine) as session:
                    taken.append(store.acquire_lease(session, name=lease.name, owner="intruder", ttl_s=ttl) is not None)
            await waiting
        return taken

    assert asyncio.run(busy()) == [False] * 4  # renewed every third of its time throughout: never taken over
    assert not lease.lost
