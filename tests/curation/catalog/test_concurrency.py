"""Parallel writers, as the campaign's branches and the review service are: nothing fails half-way or is lost."""

from __future__ import annotations

import threading
from collections.abc import Callable

from sqlalchemy import Engine

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
