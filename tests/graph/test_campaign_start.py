"""The one way in for a new campaign: prepare its row, start it from the start, with the settings it is handed."""

from __future__ import annotations

import asyncio

import pytest
from campaign_fakes import FakeIndex, ScriptedSubagent
from sqlalchemy import Engine

from core.settings import Settings
from core.types import CampaignStatus, Category
from curation.catalog import store
from graph.campaign import CampaignAlreadyStartedError, prepare_campaign, start_campaign
from graph.events import CampaignEvent
from graph.search import choose_search


async def hang(category: Category) -> None:
    await asyncio.sleep(30)


def test_a_new_campaign_starts_fresh_with_the_settings_it_is_given(engine: Engine) -> None:
    # Only in this object, not in the environment: a graph that read the process settings would wait 600 s.
    settings = Settings(campaign_branch_timeout_s=0.5)
    prepared = prepare_campaign(engine=engine, settings=settings, categories=[Category.TOOL_USE, Category.MATH],
                                backends=[FakeIndex()])
    assert prepared.categories == ["tool_use", "math"] and prepared.search.names == ["offline"]
    with store.open_session(engine) as session:
        row = store.get_campaign(session, campaign_id=prepared.id)
        assert (row.status, row.categories, row.backends) == (CampaignStatus.PENDING, ["tool_use", "math"], ["offline"])
    events: list[CampaignEvent] = []
    subagent = ScriptedSubagent({"tool_use": hang})
    assert asyncio.run(start_campaign(prepared, engine=engine, settings=settings, subagent=subagent,
                                      on_event=events.append)) == prepared.id
    started = [e.detail for e in events if e.kind == "campaign_started"]
    assert [(d["resumed"], d["thread_id"]) for d in started] == [(False, prepared.id)]
    with store.open_session(engine) as session:
        runs = {r.category: r for r in store.list_runs(session, campaign_id=prepared.id)}
        assert store.get_campaign(session, campaign_id=prepared.id).status == CampaignStatus.PARTIAL
    assert runs["tool_use"].status == "failed" and "within 0.5 s" in (runs["tool_use"].error or "")
    assert runs["math"].status == "succeeded"


def test_starting_a_campaign_that_already_started_is_refused_untouched(engine: Engine) -> None:
    settings = Settings()
    prepared = prepare_campaign(engine=engine, settings=settings, categories=[Category.MATH], backends=[FakeIndex()])
    subagent = ScriptedSubagent()
    asyncio.run(start_campaign(prepared, engine=engine, settings=settings, subagent=subagent))
    with pytest.raises(CampaignAlreadyStartedError, match="succeeded, not pending"):
        asyncio.run(start_campaign(prepared, engine=engine, settings=settings, subagent=subagent))
    assert subagent.calls == ["math"]
    with store.open_session(engine) as session:
        assert [r.attempt for r in store.list_runs(session, campaign_id=prepared.id, latest_only=False)] == [1]
        assert store.lease_holder(session, name=store.campaign_lease(prepared.id)) is None


def test_injected_backends_win_and_the_offline_flag_overrides_the_settings() -> None:
    index = FakeIndex()
    plan = choose_search(Settings(offline=False), offline=True, backends=[index])
    assert plan.backends == [index] and plan.offline is True and plan.notes == []
    offline = choose_search(Settings(offline=True))
    assert offline.names == ["offline"] and offline.offline is True
    assert any("offline mode" in note for note in offline.notes)
