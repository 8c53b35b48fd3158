"""Leases on SQLite and PostgreSQL: one holder at a time, renewals, expiry and take-over, dead local holders."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from datetime import timedelta

from sqlalchemy import Engine

from curation.catalog import store
from curation.catalog.leases import holder_is_dead
from curation.catalog.models import utcnow

NAME = "campaign:c1"
A = f"{socket.gethostname()}:1:aaaa"  # pid 1 is alive on every Linux machine
B = "other-host:4242:bbbb"


def test_one_holder_until_it_expires_then_a_take_over(engine: Engine) -> None:
    start = utcnow()
    with store.open_session(engine) as session:
        first = store.acquire_lease(session, name=NAME, owner=A, ttl_s=30, now=start)
        assert first is not None and first.owner == A
    with store.open_session(engine) as session:
        assert store.acquire_lease(session, name=NAME, owner=B, ttl_s=30, now=start + timedelta(seconds=10)) is None
        assert store.renew_lease(session, name=NAME, owner=A, ttl_s=30, now=start + timedelta(seconds=20))
    with store.open_session(engine) as session:  # 40 s after the start A's renewal still holds (until 50 s)
        assert store.acquire_lease(session, name=NAME, owner=B, ttl_s=30, now=start + timedelta(seconds=40)) is None
        holder = store.lease_holder(session, name=NAME, now=start + timedelta(seconds=40))
        assert holder is not None and holder.owner == A
        assert store.lease_holder(session, name=NAME, now=start + timedelta(seconds=51)) is None
    with store.open_session(engine) as session:  # A stopped renewing: B takes over after expiry
        taken = store.acquire_lease(session, name=NAME, owner=B, ttl_s=30, now=start + timedelta(seconds=51))
        assert taken is not None and taken.owner == B
    with store.open_session(engine) as session:
        assert not store.renew_lease(session, name=NAME, owner=A, ttl_s=30, now=start + timedelta(seconds=52))
        assert not store.release_lease(session, name=NAME, owner=A)
        assert store.release_lease(session, name=NAME, owner=B)
    with store.open_session(engine) as session:
        assert store.acquire_lease(session, name=NAME, owner=A, ttl_s=30) is not None


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
        assert taken is not None and taken.owner == B
    with store.open_session(engine) as session:  # a live holder, even an unreachable one, is waited out
        assert store.acquire_lease(session, name=NAME, owner=A, ttl_s=30) is None
