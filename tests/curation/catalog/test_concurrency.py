"""Parallel writers, as the campaign's branches and the review service are: nothing fails half-way or is lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlmodel import Session

from core.types import Category
from curation.catalog import store


def _in_threads(work: Callable[[int], None], count: int) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def run(index: int) -> None:
        try:
            start.wait()
            work(index)
        except BaseException as exc:  # collected and asserted by the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_parallel_branches_upsert_one_dataset(engine: Engine) -> None:
    categories = [c.value for c in Category][:6]
    with store.open_session(engine) as session:
        store.create_campaign(
            session, categories=categories, offline=True, backends=["offline"], campaign_id="c"
        )

    def branch(index: int) -> None:
        category = categories[index]
        with store.open_session(engine) as session:
            store.list_runs(session, campaign_id="c")  # read first, then write: the graph's pattern
            run = store.start_run(session, campaign_id="c", category=category)
            assert run.id is not None
            record = store.add_candidate(
                session,
                campaign_id="c",
                run_id=run.id,
                category=category,
                candidate={"hub_id": "org/shared", "relevance": index / 10},
            )
            store.upsert_entry(session, candidate=record, decision="accept", reasons=[])

    assert _in_threads(branch, len(categories)) == []
    with store.open_session(engine) as session:
        history = store.entry_history(session, hub_id="org/shared")
        runs = store.list_runs(session, campaign_id="c")
    entry = history["entry"]
    assert entry.categories == sorted(categories)
    assert entry.relevance == {c: i / 10 for i, c in enumerate(categories)}
    assert entry.version == len(categories)
    assert [a.action for a in history["audit"]] == ["created"]
    assert sorted(r.category for r in runs) == sorted(categories)


def test_parallel_attempts_of_one_category_get_distinct_numbers(engine: Engine) -> None:
    with store.open_session(engine) as session:
        store.create_campaign(session, categories=["math"], offline=True, backends=[], campaign_id="c")

    def attempt(_: int) -> None:
        with store.open_session(engine) as session:
            store.start_run(session, campaign_id="c", category="math")

    assert _in_threads(attempt, 4) == []
    with store.open_session(engine) as session:
        runs = store.list_runs(session, campaign_id="c", latest_only=False)
    assert [r.attempt for r in runs] == [1, 2, 3, 4]


def test_readonly_sessions_see_committed_rows(engine: Engine) -> None:
    with store.open_session(engine) as session:
        store.create_campaign(session, categories=["math"], offline=True, backends=[], campaign_id="c")
    with store.open_session(engine, readonly=True) as session:
        assert [c.id for c in store.list_campaigns(session)] == ["c"]


def _locked_hub_ids(engine: Engine) -> set[str]:
    """The entries some other transaction holds a row lock on (SKIP LOCKED returns only the free ones)."""
    with engine.connect() as conn, conn.begin():
        free = set(conn.execute(text("SELECT hub_id FROM catalogentry FOR UPDATE SKIP LOCKED")).scalars())
        every = set(conn.execute(text("SELECT hub_id FROM catalogentry")).scalars())
    return every - free


def _wait_until_blocked_by(engine: Engine, blocker_pid: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    query = text("SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))")
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            if conn.execute(query, {"pid": blocker_pid}).scalar_one():
                return
        time.sleep(0.02)
    raise AssertionError("the writer never waited for the held lock")


@pytest.mark.postgres
def test_upsert_entries_locks_rows_in_hub_id_order_whatever_order_they_came_in(pg_engine: Engine) -> None:
    hub_ids = ["org/a", "org/b", "org/c"]
    with store.open_session(pg_engine) as session:
        store.create_campaign(session, categories=["math"], offline=True, backends=[], campaign_id="c")
        run = store.start_run(session, campaign_id="c", category="math")
        for hub_id in hub_ids:
            record = store.add_candidate(session, campaign_id="c", run_id=run.id or 0, category="math",
                                         candidate={"hub_id": hub_id})
            store.upsert_entry(session, candidate=record, decision="accept", reasons=[])
        run_id = run.id or 0

    def writer(_: int) -> None:
        with store.open_session(pg_engine) as session:
            records = [store.add_candidate(session, campaign_id="c", run_id=run_id, category="code_review",
                                           candidate={"hub_id": h}) for h in ["org/c", "org/a", "org/b"]]
            store.upsert_entries(session, verified=[(r, "accept", []) for r in records])

    with pg_engine.connect() as blocker, blocker.begin():
        blocker.execute(text("SELECT id FROM catalogentry WHERE hub_id = 'org/b' FOR UPDATE"))
        blocker_pid = blocker.execute(text("SELECT pg_backend_pid()")).scalar_one()
        errors: list[BaseException] = []
        thread = threading.Thread(target=lambda: errors.extend(_in_threads(writer, 1)))
        thread.start()
        _wait_until_blocked_by(pg_engine, blocker_pid)
        # In Hub-id order the writer holds org/a and waits for org/b; org/c, last in that order, is still free
        # although it came first. In arrival order it would already hold org/c.
        assert _locked_hub_ids(pg_engine) == {"org/a", "org/b"}
    thread.join(timeout=30)
    assert errors == []
    with store.open_session(pg_engine) as session:
        assert all(store.get_entry(session, hub_id=h).categories == ["code_review", "math"] for h in hub_ids)


@pytest.mark.postgres
def test_run_transaction_runs_a_deadlock_victim_again(pg_engine: Engine) -> None:
    with pg_engine.connect() as conn, conn.begin():
        conn.execute(text("CREATE TABLE counter (name text PRIMARY KEY, n int NOT NULL)"))
        conn.execute(text("INSERT INTO counter VALUES ('x', 0), ('y', 0)"))
    both_hold_one = threading.Barrier(2)
    tries: list[int] = []

    def crossing(index: int) -> None:
        first, second = ("x", "y") if index == 0 else ("y", "x")

        def work(session: Session) -> None:
            tries.append(index)
            session.execute(text("UPDATE counter SET n = n + 1 WHERE name = :k"), {"k": first})
            if tries.count(index) == 1:
                both_hold_one.wait(timeout=10)  # each holds one row and now asks for the other's: a deadlock
            session.execute(text("UPDATE counter SET n = n + 1 WHERE name = :k"), {"k": second})

        store.run_transaction(pg_engine, work, what=f"crossing {index}")

    assert _in_threads(crossing, 2) == []
    assert len(tries) == 3  # PostgreSQL aborted one of the two; it ran once more and committed
    with pg_engine.connect() as conn:
        assert dict(conn.execute(text("SELECT name, n FROM counter")).all()) == {"x": 2, "y": 2}


def _deadlock() -> OperationalError:
    return OperationalError("UPDATE …", {}, psycopg.errors.DeadlockDetected("deadlock detected"))


def test_run_transaction_gives_up_after_its_attempts_and_never_retries_other_errors(engine: Engine) -> None:
    calls: list[str] = []

    def always_aborted(session: Session) -> None:
        calls.append("aborted")
        raise _deadlock()

    with pytest.raises(store.ConcurrentUpdateError, match="aborted 3 times"):
        store.run_transaction(engine, always_aborted, what="persisting", attempts=3)
    assert calls == ["aborted"] * 3

    def broken(session: Session) -> None:
        calls.append("broken")
        session.execute(text("SELECT * FROM no_such_table"))

    with pytest.raises(ProgrammingError if engine.dialect.name == "postgresql" else OperationalError):
        store.run_transaction(engine, broken, attempts=3)
    assert calls.count("broken") == 1
    assert store.is_retryable(_deadlock()) and not store.is_retryable(RuntimeError("deadlock"))
