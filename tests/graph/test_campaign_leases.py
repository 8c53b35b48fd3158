"""A campaign holds its lease while it runs: another holder refuses it, a heartbeat keeps it, a lost one stops it."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

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


# Called off the campaign's event loop: a blocking SQLite call there would wait on the write lock the
# checkpointer holds across an await on that same loop.
def _status(engine: Engine) -> str:
    with store.open_session(engine, readonly=True) as session:
        return store.get_campaign(session, campaign_id="c").status


def _runs(engine: Engine) -> int:
    with store.open_session(engine, readonly=True) as session:
        return len(store.list_runs(session, campaign_id="c"))


def _steal(engine: Engine) -> None:
    with store.open_session(engine) as session:
        session.execute(update(Lease).where(Lease.name == store.campaign_lease("c")).values(
            owner=OTHER, generation=Lease.generation + 1))


def _expire_and_take(engine: Engine) -> None:
    with store.open_session(engine) as session:
        lease = session.get(Lease, store.campaign_lease("c"))
        assert lease is not None
        session.execute(update(Lease).where(Lease.name == lease.name).values(
            expires_at=lease.expires_at - timedelta(hours=1)))
    with store.open_session(engine) as session:
        assert store.acquire_lease(session, name=store.campaign_lease("c"), owner=OTHER, ttl_s=600) is not None


def test_a_campaign_another_process_holds_is_refused_untouched(engine: Engine) -> None:
    _pending(engine, "c")
    with store.open_session(engine) as session:
        assert store.acquire_lease(session, name=store.campaign_lease("c"), owner=OTHER, ttl_s=60) is not None
    subagent = ScriptedSubagent()
    with pytest.raises(CampaignBusyError, match=f"worked on elsewhere \\({OTHER}"):
        asyncio.run(run_campaign(engine=engine, settings=get_settings(), campaign_id="c", subagent=subagent,
                                 backends=[FakeIndex()]))
    assert subagent.calls == []
    with store.open_session(engine) as session:
        assert store.get_campaign(session, campaign_id="c").status == "pending"
        assert store.list_runs(session, campaign_id="c") == []
        store.release_lease(session, name=store.campaign_lease("c"), owner=OTHER)
    asyncio.run(run_campaign(engine=engine, settings=get_settings(), campaign_id="c", subagent=subagent,
                             backends=[FakeIndex()]))
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
        asyncio.run(run_campaign(engine=engine, settings=get_settings(), campaign_id="c",
                                 subagent=slow(4 * short_leases), backends=[FakeIndex()]))
    finally:
        stop.set()
        thread.join()
    assert len(stolen) > 10 and not any(stolen[:-2])  # after the release at the end a last try may win
    with store.open_session(engine) as session:
        assert store.get_campaign(session, campaign_id="c").status == "succeeded"


def test_a_run_that_loses_its_lease_stops_without_touching_the_campaign(engine: Engine, short_leases: float) -> None:
    _pending(engine, "c")

    async def scenario() -> None:
        running = asyncio.create_task(run_campaign(engine=engine, settings=get_settings(), campaign_id="c",
                                                   subagent=slow(30), backends=[FakeIndex()]))
        while await asyncio.to_thread(_status, engine) != "running":  # once the run is under way
            await asyncio.sleep(0.01)
        await asyncio.to_thread(_steal, engine)  # this process stalled; another took the campaign over
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

    ttl = 2.0  # generous: the shared test machine stalls threads for a good part of a second
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


def test_a_stalled_holder_taken_over_is_fenced_out_of_every_write(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The heartbeat cannot tell this holder anything (as when its process is starved): only the fence stops it.
    from graph.lease import LeaseKeeper

    monkeypatch.setattr(LeaseKeeper, "_renew", lambda self, *args: None)
    _pending(engine, "c")
    released = threading.Event()

    async def deliver(category: Category) -> Deliverable:
        while not released.is_set():
            await asyncio.sleep(0.02)
        return deliverable_for(category)

    async def scenario() -> None:
        running = asyncio.create_task(run_campaign(engine=engine, settings=get_settings(), campaign_id="c",
                                                   subagent=ScriptedSubagent({"math": deliver}),
                                                   backends=[FakeIndex()]))
        while not await asyncio.to_thread(_runs, engine):  # the search is under way
            await asyncio.sleep(0.01)
        await asyncio.to_thread(_expire_and_take, engine)  # its lease ran out and another process took it
        released.set()  # the stalled holder wakes up with its search's results and goes on writing
        await running

    with pytest.raises(CampaignLeaseLostError, match="another process took over"):
        asyncio.run(scenario())
    with store.open_session(engine) as session:
        assert store.get_campaign(session, campaign_id="c").status == "running"  # not the stale holder's outcome
        assert [r.status for r in store.list_runs(session, campaign_id="c")] == ["running"]  # nothing persisted
        assert store.list_entries(session, limit=10)[1] == 0
        holder = store.lease_holder(session, name=store.campaign_lease("c"))
        assert holder is not None and (holder.owner, holder.generation) == (OTHER, 2)
