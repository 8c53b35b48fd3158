"""Leases on SQLite and PostgreSQL: one holder at a time on the database's clock, renewals, expiry and take-over
with a new generation, fenced writes, dead local holders."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from datetime import timedelta

import pytest
from sqlalchemy import Engine, select, update
from sqlmodel import col

from curation.catalog import leases, models, store
from curation.catalog.leases import holder_is_dead
from curation.catalog.models import AuditEvent, Campaign, Lease

NAME = "campaign:c1"
A = f"{socket.gethostname()}:1:aaaa"  # pid 1 is alive on every Linux machine
B = "other-host:4242:bbbb"


def _expire(engine: Engine, name: str = NAME) -> None:
    """Make the lease's holder look stalled: its expiry an hour ago on the database's clock."""
    with store.open_session(engine) as session:
        lease = session.get(Lease, name)
        assert lease is not None
        session.execute(update(Lease).where(col(Lease.name) == name).values(
            expires_at=lease.expires_at - timedelta(hours=1)))


def test_one_holder_until_it_expires_then_a_take_over_with_the_next_generation(engine: Engine) -> None:
    with store.open_session(engine) as session:
        first = store.acquire_lease(session, name=NAME, owner=A, ttl_s=30)
        assert first is not None and (first.owner, first.generation) == (A, 1)
    with store.open_session(engine) as session:
        assert store.acquire_lease(session, name=NAME, owner=B, ttl_s=30) is None
        assert store.renew_lease(session, name=NAME, owner=A, ttl_s=30, generation=1)
        holder = store.lease_holder(session, name=NAME)
        assert holder is not None and holder.owner == A
    _expire(engine)
    with store.open_session(engine) as session:  # A stopped renewing: B takes over, one generation on
        assert store.lease_holder(session, name=NAME) is None
        taken = store.acquire_lease(session, name=NAME, owner=B, ttl_s=30)
        assert taken is not None and (taken.owner, taken.generation) == (B, 2)
    with store.open_session(engine) as session:
        assert not store.renew_lease(session, name=NAME, owner=A, ttl_s=30, generation=1)
        assert not store.release_lease(session, name=NAME, owner=A)
        assert store.release_lease(session, name=NAME, owner=B)
        audit = session.scalars(select(AuditEvent).where(col(AuditEvent.entity) == "lease")).all()
        assert [(e.action, e.detail) for e in audit] == [
            ("taken_over", {"from_owner": A, "to_owner": B, "generation": 2})]
    with store.open_session(engine) as session:  # a released lease keeps its count: the next owner is the third
        assert store.lease_holder(session, name=NAME) is None
        again = store.acquire_lease(session, name=NAME, owner=A, ttl_s=30)
        assert again is not None and again.generation == 3
        assert session.scalars(select(AuditEvent).where(col(AuditEvent.entity) == "lease")).all() == audit


def test_expiry_is_the_databases_clock_not_the_callers(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    with store.open_session(engine) as session:
        assert store.acquire_lease(session, name=NAME, owner=A, ttl_s=30) is not None
    # A starved or skewed process that believes an hour has passed cannot take a live lease.
    later = models.utcnow() + timedelta(hours=1)
    monkeypatch.setattr(models, "utcnow", lambda: later)
    monkeypatch.setattr(leases, "utcnow", lambda: later, raising=False)  # where the process clock was read
    with store.open_session(engine) as session:
        assert store.acquire_lease(session, name=NAME, owner=B, ttl_s=30) is None
        holder = store.lease_holder(session, name=NAME)
        assert holder is not None and holder.owner == A


def test_a_lease_lasts_its_time_from_the_renewal_on_the_database_clock(engine: Engine) -> None:
    with store.open_session(engine) as session:
        assert store.acquire_lease(session, name=NAME, owner=A, ttl_s=30) is not None
        assert store.renew_lease(session, name=NAME, owner=A, ttl_s=12.5, generation=1)
    with store.open_session(engine) as session:
        lease = session.get(Lease, NAME)
        assert lease is not None and lease.expires_at - lease.heartbeat_at == timedelta(seconds=12.5)


def test_a_fenced_write_commits_only_while_its_generation_holds(engine: Engine) -> None:
    with store.open_session(engine) as session:
        store.create_campaign(session, categories=["math"], offline=True, backends=["offline"], campaign_id="c1")
        lease = store.acquire_lease(session, name=NAME, owner=A, ttl_s=30)
        assert lease is not None
        fence = store.Fence(name=NAME, owner=A, generation=lease.generation)
    with store.open_session(store.fenced(engine, fence)) as session:
        store.set_campaign_status(session, campaign_id="c1", status="running")
    _expire(engine)
    with store.open_session(engine) as session:
        assert store.acquire_lease(session, name=NAME, owner=B, ttl_s=30) is not None
    with pytest.raises(store.LeaseFencedError, match="generation 1 was taken over"), \
            store.open_session(store.fenced(engine, fence)) as session:
        store.set_campaign_status(session, campaign_id="c1", status="interrupted")
    with store.open_session(engine) as session:  # the refused write left nothing
        campaign = session.get(Campaign, "c1")
        assert campaign is not None and campaign.status == "running"
    with store.open_session(store.fenced(engine, fence), readonly=True) as session:  # reads are not refused
        assert store.get_campaign(session, campaign_id="c1").status == "running"


def test_concurrent_acquires_leave_exactly_one_holder(engine: Engine) -> None:
    owners = [f"other-host:{i}:x" for i in range(4)]
    won: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(owners))

    def acquire(owner: str) -> None:
        try:
            start.wait()
            with store.open_session(engine) as session:
                if store.acquire_lease(session, name=NAME, owner=owner, ttl_s=30) is not None:
                    won.append(owner)
        except BaseException as exc:  # asserted below
            errors.append(exc)

    threads = [threading.Thread(target=acquire, args=(o,)) for o in owners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(won) == 1
    with store.open_session(engine) as session:
        holder = store.lease_holder(session, name=NAME)
        assert holder is not None and holder.owner == won[0]


def test_a_dead_holder_on_this_host_is_taken_over_at_once(engine: Engine) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead = f"{socket.gethostname()}:{int(gone.stdout)}:dddd"
    assert holder_is_dead(dead) and not holder_is_dead(A) and not holder_is_dead(B)
    with store.open_session(engine) as session:
        assert store.acquire_lease(session, name=NAME, owner=dead, ttl_s=300) is not None
    with store.open_session(engine) as session:
        taken = store.acquire_lease(session, name=NAME, owner=B, ttl_s=30)
        assert taken is not None and (taken.owner, taken.generation) == (B, 2)
    with store.open_session(engine) as session:  # a live holder, even an unreachable one, is waited out
        assert store.acquire_lease(session, name=NAME, owner=A, ttl_s=30) is None


def test_one_statement_renews_every_lease_still_held_and_names_the_lost(engine: Engine) -> None:
    with store.open_session(engine) as session:
        for name in ("campaign:x", "campaign:y"):
            assert store.acquire_lease(session, name=name, owner=A, ttl_s=30) is not None
    _expire(engine, "campaign:y")
    with store.open_session(engine) as session:
        assert store.acquire_lease(session, name="campaign:y", owner=B, ttl_s=30) is not None
    x, y = store.Fence(name="campaign:x", owner=A, generation=1), store.Fence(name="campaign:y", owner=A, generation=1)
    with store.open_session(engine) as session:
        assert store.renew_leases(session, fences=[x, y], ttl_s=7.5) == {x}
    with store.open_session(engine) as session:
        lease = session.get(Lease, "campaign:x")
        assert lease is not None and lease.expires_at - lease.heartbeat_at == timedelta(seconds=7.5)
