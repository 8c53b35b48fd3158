"""Two service replicas on one catalog: they never work on one campaign at once, and a dead one's is taken over.

Each replica is its own app (campaign manager, event loops, leases) on the same database, as two `datahunt
serve` processes behind a load balancer are.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine
from sqlmodel import select
from test_api_campaigns import AUTH, TOKEN, FakeBackend, FakeSubagent

from core.settings import Settings, get_settings
from core.types import Category
from curation.catalog import store
from curation.catalog.models import AuditEvent
from graph.branch import INTERRUPTED
from graph.campaign import run_campaign
from server.app import create_app

LEASE_S = 1.5  # short, yet a renewal every 0.25 s survives the shared test machine's stalls


class HeldSubagent(FakeSubagent):
    """Delivers only once `release` is set: campaigns that hold a replica's slots as long as a test wants."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.waiting: list[str] = []

    async def __call__(self, category: Category, *, backends: Any, llm: Any = None, **kw: Any) -> Any:
        self.waiting.append(category.value)
        while not self.release.is_set():
            await asyncio.sleep(0.05)
        return await super().__call__(category, backends=backends, llm=llm, **kw)


class SlowSubagent(FakeSubagent):
    async def __call__(self, category: Category, *, backends: Any, llm: Any = None, **kw: Any) -> Any:
        await asyncio.sleep(1.0)
        return await super().__call__(category, backends=backends, llm=llm, **kw)


@pytest.fixture(autouse=True)
def short_leases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATAHUNT_LEASE_TTL_S", str(LEASE_S))
    get_settings.cache_clear()


def replica(engine: Engine, tmp_path: Path, subagent: FakeSubagent, *, resume: bool, sweep: bool | None = None,
            lease_s: float = LEASE_S) -> Any:
    settings = Settings(home=tmp_path / "home", offline=True, api_token=SecretStr(TOKEN), lease_ttl_s=lease_s)
    return create_app(settings, engine=engine, resume_unfinished=resume, sweep_abandoned=sweep, event_poll_s=0.1,
                      campaign_overrides={"subagent": subagent, "backends": [FakeBackend()]})


def wait_for(predicate: Any, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


@pytest.mark.slow
def test_the_same_category_re_run_on_two_replicas_at_once_runs_once(engine: Engine, tmp_path: Path) -> None:
    campaign_id = asyncio.run(run_campaign(engine=engine, settings=get_settings(),
                                           categories=[Category.MATH, Category.TOOL_USE],
                                           subagent=FakeSubagent(failing={"tool_use"}), backends=[FakeBackend()]))
    subagent = SlowSubagent()
    answers: list[int] = []
    go = threading.Barrier(2)
    with TestClient(replica(engine, tmp_path, subagent, resume=False)) as a, \
            TestClient(replica(engine, tmp_path, subagent, resume=False)) as b:

        def rerun(client: TestClient) -> None:
            go.wait()
            answers.append(client.post(f"/campaigns/{campaign_id}/subagents/tool_use/rerun", headers=AUTH).status_code)
            time.sleep(0.3)  # the second asks while the first's attempt runs
            answers.append(client.post(f"/campaigns/{campaign_id}/subagents/tool_use/rerun", headers=AUTH).status_code)

        threads = [threading.Thread(target=rerun, args=(c,)) for c in (a, b)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        def settled() -> bool:
            with store.open_session(engine) as session:
                free = store.lease_holder(session, name=store.campaign_lease(campaign_id)) is None
                return free and store.get_campaign(session, campaign_id=campaign_id).status == "succeeded"

        wait_for(settled)
    assert sorted(answers).count(202) >= 1 and set(answers) <= {202, 409} and 409 in answers
    with store.open_session(engine) as session:
        runs = [r for r in store.list_runs(session, campaign_id=campaign_id, latest_only=False)
                if r.category == "tool_use"]
    assert [(r.attempt, r.status) for r in runs] == [(1, "failed"), (2, "succeeded")]
    assert all(r.error != INTERRUPTED for r in runs)
    assert subagent.calls == ["tool_use"]


@pytest.mark.slow
@pytest.mark.parametrize("resume", [True, False], ids=["resume", "no-resume"])
def test_a_starting_replica_leaves_a_live_campaign_alone_and_takes_over_a_dead_ones(
    engine: Engine, tmp_path: Path, resume: bool
) -> None:
    # `datahunt serve --no-resume` (an extra replica) skips only the start-up resume: it still sweeps.
    with store.open_session(engine) as session:
        campaign = store.create_campaign(session, categories=["math"], offline=True, backends=["offline"])
        store.set_campaign_status(session, campaign_id=campaign.id, status="running")
        # Replica A runs it and renews its lease; it will die without releasing it.
        store.acquire_lease(session, name=store.campaign_lease(campaign.id), owner="host-a:77:dead", ttl_s=60)
    subagent = FakeSubagent()
    with TestClient(replica(engine, tmp_path, subagent, resume=resume, sweep=True)) as client:
        time.sleep(3 * LEASE_S)  # several sweeps while A's lease is live
        assert subagent.calls == [] and client.get(f"/campaigns/{campaign.id}").json()["status"] == "running"
        with store.open_session(engine) as session:  # A dies: its lease is no longer renewed and runs out
            store.acquire_lease(session, name=store.campaign_lease(campaign.id), owner="host-a:77:dead", ttl_s=0.0)
        wait_for(lambda: client.get(f"/campaigns/{campaign.id}").json()["status"] == "succeeded")
    assert subagent.calls == ["math"]


@pytest.mark.slow
def test_two_replicas_asked_the_same_re_run_at_once_accept_one_and_refuse_the_other(
    engine: Engine, tmp_path: Path,
) -> None:
    campaign_id = asyncio.run(run_campaign(engine=engine, settings=get_settings(), categories=[Category.MATH],
                                           subagent=FakeSubagent(), backends=[FakeBackend()]))
    subagent = SlowSubagent()
    with TestClient(replica(engine, tmp_path, subagent, resume=False)) as a, \
            TestClient(replica(engine, tmp_path, subagent, resume=False)) as b:
        for attempt in range(3):
            answers: list[int] = []
            go = threading.Barrier(2)

            def rerun(client: TestClient, go: threading.Barrier, answers: list[int]) -> None:
                go.wait()
                answers.append(client.post(f"/campaigns/{campaign_id}/subagents/math/rerun", headers=AUTH).status_code)

            threads = [threading.Thread(target=rerun, args=(c, go, answers)) for c in (a, b)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sorted(answers) == [202, 409], (attempt, answers)  # the README's promise: never 202 twice

            def settled() -> bool:
                with store.open_session(engine) as session:
                    free = store.lease_holder(session, name=store.campaign_lease(campaign_id)) is None
                    return free and store.get_campaign(session, campaign_id=campaign_id).status == "succeeded"

            wait_for(settled)
    assert subagent.calls == ["math"] * 3


@pytest.mark.slow
def test_a_re_run_is_claimed_before_its_answer_even_when_both_replicas_slots_are_full(
    pg_engine: Engine, tmp_path: Path,
) -> None:
    # Each replica's four PostgreSQL slots busy with campaigns of their own: a re-run accepted now waits for a slot,
    # and its 202 must still mean the re-run is this replica's (claimed in the database), never both replicas'.
    engine = pg_engine
    campaign_id = asyncio.run(run_campaign(engine=engine, settings=get_settings(), categories=[Category.MATH],
                                           subagent=FakeSubagent(), backends=[FakeBackend()]))
    held = HeldSubagent()  # the default lease time: this is about the claim, not about expiry
    with TestClient(replica(engine, tmp_path, held, resume=False, lease_s=30)) as a, \
            TestClient(replica(engine, tmp_path, held, resume=False, lease_s=30)) as b:
        fillers = [c.post("/campaigns", json={"categories": ["reasoning"]}, headers=AUTH).json()["id"]
                   for c in (a, b) for _ in range(4)]
        wait_for(lambda: held.waiting.count("reasoning") == len(fillers))  # every slot of both replicas taken
        answers: list[int] = []
        go = threading.Barrier(2)

        def rerun(client: TestClient) -> None:
            go.wait()
            answers.append(client.post(f"/campaigns/{campaign_id}/subagents/math/rerun", headers=AUTH).status_code)

        threads = [threading.Thread(target=rerun, args=(c,)) for c in (a, b)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(answers) == [202, 409]
        with store.open_session(engine) as session:  # claimed before the answer: the attempt is recorded, pending
            runs = [(r.attempt, r.status) for r in store.list_runs(session, campaign_id=campaign_id, latest_only=False)]
            assert runs == [(1, "succeeded"), (2, "pending")]
            assert store.get_campaign(session, campaign_id=campaign_id).status == "pending"
            assert store.lease_holder(session, name=store.campaign_lease(campaign_id)) is not None
        held.release.set()

        def settled() -> bool:
            with store.open_session(engine) as session:
                done = all(store.get_campaign(session, campaign_id=c).status == "succeeded"
                           for c in [*fillers, campaign_id])
                return done and store.lease_holder(session, name=store.campaign_lease(campaign_id)) is None

        wait_for(settled, timeout_s=120)
    with store.open_session(engine) as session:
        runs = [(r.attempt, r.status) for r in store.list_runs(session, campaign_id=campaign_id, latest_only=False)]
    assert runs == [(1, "succeeded"), (2, "succeeded")]  # run once, by the replica that answered 202
    assert held.calls.count("math") == 1


@pytest.mark.slow
def test_a_queued_takeover_that_finds_the_campaign_finished_leaves_it_alone(pg_engine: Engine, tmp_path: Path) -> None:
    engine = pg_engine
    with store.open_session(engine) as session:
        campaign = store.create_campaign(session, categories=["math"], offline=True, backends=["offline"])
        store.set_campaign_status(session, campaign_id=campaign.id, status="running")
        # Its replica stopped renewing the lease (stalled, or gone).
        store.acquire_lease(session, name=store.campaign_lease(campaign.id), owner="host-a:77:stalled", ttl_s=0.0)
    held = HeldSubagent()
    with TestClient(replica(engine, tmp_path, held, resume=False, sweep=True)) as b:
        fillers = [b.post("/campaigns", json={"categories": ["reasoning"]}, headers=AUTH).json()["id"]
                   for _ in range(4)]
        wait_for(lambda: held.waiting.count("reasoning") == len(fillers))  # every slot busy

        def claimed() -> bool:  # the sweep took the lease; the resume waits for a slot
            with store.open_session(engine) as session:
                holder = store.lease_holder(session, name=store.campaign_lease(campaign.id))
                return holder is not None and not holder.owner.startswith("host-a:")

        wait_for(claimed)
        with store.open_session(engine) as session:  # meanwhile the campaign's result lands after all
            store.set_campaign_status(session, campaign_id=campaign.id, status="succeeded")
        held.release.set()

        def settled() -> bool:
            with store.open_session(engine) as session:
                done = all(store.get_campaign(session, campaign_id=c).status == "succeeded" for c in fillers)
                return done and store.lease_holder(session, name=store.campaign_lease(campaign.id)) is None

        wait_for(settled, timeout_s=120)
    with store.open_session(engine) as session:
        assert store.get_campaign(session, campaign_id=campaign.id).status == "succeeded"  # never `interrupted`
        after = session.exec(select(AuditEvent).where(AuditEvent.entity_id == campaign.id,
                                                      AuditEvent.from_status == "succeeded")).all()
        assert after == [] and store.list_runs(session, campaign_id=campaign.id) == []
    assert "math" not in held.waiting
