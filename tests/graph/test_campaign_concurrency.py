"""Several campaigns at once on one catalog: each on its own event loop and thread (CLI processes side by side),
and as tasks on one event loop (as the service runs them, their catalog calls in worker threads).

Every category of every campaign finds the same shared datasets in its own shuffled order, so their persist
transactions lock the same catalog rows at the same moment: without one lock order PostgreSQL deadlocks
and a campaign ends `failed` with its runs stuck `running`.
"""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import pytest
from campaign_fakes import FakeIndex, ScriptedSubagent, deliverable_for
from sqlalchemy import Engine

from core.candidates import Deliverable
from core.settings import get_settings
from core.types import Category
from curation.catalog import store
from graph.campaign import run_campaign

SHARED = [f"shared-org/set-{i:02d}" for i in range(40)]


def shuffled_subagent(seed: int) -> ScriptedSubagent:
    """A subagent whose every category delivers all shared datasets in an order of its own."""
    rng = random.Random(seed)
    orders = {c.value: rng.sample(SHARED, len(SHARED)) for c in Category}

    def deliver(category: Category) -> Deliverable:
        return deliverable_for(category, hub_ids=orders[category.value])

    return ScriptedSubagent({c.value: deliver for c in Category})


def run_side_by_side(engine: Engine, count: int) -> tuple[list[str], list[BaseException]]:
    ids: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def one(index: int) -> None:
        try:
            start.wait()
            ids.append(asyncio.run(run_campaign(engine=engine, settings=get_settings(),
                                                subagent=shuffled_subagent(index), backends=[FakeIndex()])))
        except BaseException as exc:  # asserted below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return ids, errors


def run_as_tasks(engine: Engine, count: int) -> tuple[list[str], list[BaseException]]:
    async def all_of_them() -> list[str | BaseException]:
        return await asyncio.gather(
            *(run_campaign(engine=engine, settings=get_settings(), subagent=shuffled_subagent(i),
                           backends=[FakeIndex()]) for i in range(count)),
            return_exceptions=True,
        )

    results = asyncio.run(all_of_them())
    return [r for r in results if isinstance(r, str)], [r for r in results if isinstance(r, BaseException)]


@pytest.mark.slow
@pytest.mark.parametrize(("count", "run"), [(2, run_side_by_side), (4, run_side_by_side), (2, run_as_tasks)],
                         ids=["threads-2", "threads-4", "tasks-2"])
def test_concurrent_campaigns_all_succeed_and_merge_every_dataset(engine: Engine, count: int, run: Any) -> None:
    ids, errors = run(engine, count)
    assert errors == []
    assert len(ids) == count
    with store.open_session(engine) as session:
        for campaign_id in ids:
            campaign = store.get_campaign(session, campaign_id=campaign_id)
            assert (campaign.status, campaign.error) == ("succeeded", None)
            runs = store.list_runs(session, campaign_id=campaign_id)
            assert sorted(r.status for r in runs) == ["succeeded"] * len(Category)
            assert all(r.candidates_found == len(SHARED) for r in runs)
        entries, total = store.list_entries(session, limit=500)
    assert total == len(SHARED)
    for entry in entries:
        assert sorted(entry.categories) == sorted(c.value for c in Category)
        assert entry.version == count * len(Category)  # every upsert of every campaign landed exactly once
