"""Campaigns end to end on the real catalog (SQLite and PostgreSQL): fan-out, faults, re-runs, resume."""

from __future__ import annotations

import asyncio

import pytest
from campaign_fakes import (
    SHARED_ID,
    FakeIndex,
    FlakySearch,
    ScriptedSubagent,
    deliverable_for,
    empty,
    raises,
    stored_branch_results,
    stored_checkpoints,
)
from sqlalchemy import Engine
from sqlmodel import Session, select

import graph.campaign
from agents.subagent import run_subagent
from core.settings import get_settings
from core.types import Category, UnknownCategoryError
from curation.catalog import store
from curation.catalog.models import CandidateRecord, SubagentRun
from graph.campaign import (
    CampaignFinishedError,
    CategoryNotInCampaignError,
    prune_checkpoints,
    rerun_category,
    resume_campaign,
    run_campaign,
    unfinished_campaigns,
)
from graph.events import CampaignEvent


def runs_by_category(engine: Engine, campaign_id: str, *, latest_only: bool = True) -> dict[str, list[SubagentRun]]:
    with store.open_session(engine) as session:
        runs = store.list_runs(session, campaign_id=campaign_id, latest_only=latest_only)
        session.expunge_all()
    grouped: dict[str, list[SubagentRun]] = {}
    for run in runs:
        grouped.setdefault(run.category, []).append(run)
    return grouped


def test_ten_way_campaign_stores_every_category_and_merges_duplicates(engine: Engine) -> None:
    events: list[CampaignEvent] = []
    subagent = ScriptedSubagent()
    campaign_id = asyncio.run(run_campaign(engine=engine, settings=get_settings(), subagent=subagent,
                                           backends=[FakeIndex()], on_event=events.append))
    assert sorted(subagent.calls) == sorted(c.value for c in Category)
    with store.open_session(engine) as session:
        assert store.get_campaign(session, campaign_id=campaign_id).status == "succeeded"
        summary = store.catalog_summary(session, campaign_id=campaign_id)
        shared = store.get_entry(session, hub_id=SHARED_ID)
        verdicts = store.entry_history(session, hub_id=SHARED_ID)["verdicts"]
        assert set(shared.categories) == {c.value for c in Category}
        flags = [r["code"] for v in verdicts for r in v.reasons]
        assert flags.count("duplicate") == 9  # every copy after code_review's, none rejected
        assert all(v.decision == "accept" for v in verdicts)
    assert summary["total"] == 21  # two own datasets per category plus the shared one, once
    assert all(counts["total"] == 3 for counts in summary["by_category"].values())
    kinds = [e.kind for e in events]
    assert kinds[0] == "campaign_started" and kinds[-1] == "campaign_finished"
    assert kinds.count("run_started") == kinds.count("run_finished") == 10
    # The shared dataset's only reason is `duplicate` (found by another category too): informational, no flag.
    assert events[-1].detail["by_category"]["math"] == {
        "status": "succeeded", "error": None, "candidates": 3, "accepted": 3, "unverified": 0, "flagged": 0,
        "eval_sets": 0, "rejected": 0, "reasons": {}}


def test_failing_and_empty_subagents_leave_eight_stored_and_two_rerunnable(engine: Engine) -> None:
    broken = ScriptedSubagent({"tool_use": raises, "math": empty})
    campaign_id = asyncio.run(run_campaign(engine=engine, settings=get_settings(), subagent=broken,
                                           backends=[FakeIndex()]))
    runs = runs_by_category(engine, campaign_id)
    with store.open_session(engine) as session:
        campaign = store.get_campaign(session, campaign_id=campaign_id)
        assert campaign.status == "partial"
        assert "tool_use: failed" in (campaign.error or "") and "math: empty" in (campaign.error or "")
    assert runs["tool_use"][0].status == "failed" and "RuntimeError" in (runs["tool_use"][0].error or "")
    assert [r["code"] for r in runs["tool_use"][0].reasons] == ["missing_deliverable"]
    assert runs["math"][0].status == "empty"
    assert [r["code"] for r in runs["math"][0].reasons] == ["empty_deliverable"]
    good = {c: r[0] for c, r in runs.items() if c not in ("tool_use", "math")}
    assert len(good) == 8 and all(r.status == "succeeded" and r.candidates_found == 3 for r in good.values())

    fixed = ScriptedSubagent()
    for category in ("tool_use", "math"):
        new_run = asyncio.run(rerun_category(engine=engine, settings=get_settings(), campaign_id=campaign_id,
                                             category=category, subagent=fixed, backends=[FakeIndex()]))
        assert new_run not in {r.id for r in good.values()}
    assert fixed.calls == ["tool_use", "math"]
    after = runs_by_category(engine, campaign_id)
    assert ({c: (r[0].id, r[0].attempt) for c, r in after.items() if c in good}
            == {c: (r.id, 1) for c, r in good.items()})
    assert (after["tool_use"][0].attempt, after["tool_use"][0].status) == (2, "succeeded")
    assert (after["math"][0].attempt, after["math"][0].status) == (2, "succeeded")
    with store.open_session(engine) as session:
        assert store.get_campaign(session, campaign_id=campaign_id).status == "succeeded"
        assert "math" in store.get_entry(session, hub_id="org-math/math-set-a").categories


@pytest.mark.slow
def test_thirty_percent_failing_searches_lose_nothing_and_retry_boundedly(engine: Engine) -> None:
    backends = [FlakySearch("hub", failure_rate=0.3, seed=7), FlakySearch("offline", failure_rate=0.3, seed=11)]
    retries = get_settings().search_retries
    campaign_id = asyncio.run(run_campaign(engine=engine, settings=get_settings(), subagent=run_subagent,
                                           backends=backends))  # type: ignore[arg-type]
    runs = [r for rs in runs_by_category(engine, campaign_id).values() for r in rs]
    assert len(runs) == 10
    records = [q for run in runs for q in run.queries]
    calls = [c for b in backends for c in b.calls]
    failures = [c for c in calls if c[1] != "ok"]
    assert len(failures) > 0.15 * len(calls)  # the fault injection really happened
    assert all(q["attempts"] <= retries + 1 for q in records)
    assert len(calls) == sum(q["attempts"] for q in records)  # every call is accounted for on a query record
    failed = [q for q in records if q["status"] == "failed"]
    assert failed and all(q["error"] for q in failed)
    found = {b.hit(query, rank).hub_id for b in backends for query, outcome in b.calls if outcome == "ok"
             for rank in range(1, 4)}
    with store.open_session(engine) as session:
        stored = {c["hub_id"] for cat in Category for c in _campaign_candidates(session, campaign_id, cat.value)}
        assert store.get_campaign(session, campaign_id=campaign_id).status in ("succeeded", "partial")
    assert found and found <= stored


def test_garbage_and_hanging_subagents_become_failed_runs(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATAHUNT_CAMPAIGN_BRANCH_TIMEOUT_S", "0.5")
    get_settings.cache_clear()

    async def hang(category: Category) -> None:
        await asyncio.sleep(30)

    script = {"math": lambda category: {"candidates": "lol"}, "tool_use": hang}
    campaign_id = asyncio.run(run_campaign(engine=engine, settings=get_settings(),
                                           categories=[Category.MATH, Category.TOOL_USE, Category.REASONING],
                                           subagent=ScriptedSubagent(script), backends=[FakeIndex()]))
    runs = {c: rs[0] for c, rs in runs_by_category(engine, campaign_id).items()}
    assert runs["math"].status == "failed" and "returned dict, not a Deliverable" in (runs["math"].error or "")
    assert runs["tool_use"].status == "failed" and "timed out" in (runs["tool_use"].error or "")
    assert runs["reasoning"].status == "succeeded"
    with store.open_session(engine) as session:
        assert store.get_campaign(session, campaign_id=campaign_id).status == "partial"


def _campaign_candidates(session: Session, campaign_id: str, category: str) -> list[dict[str, object]]:
    rows = session.exec(select(CandidateRecord).where(CandidateRecord.campaign_id == campaign_id,
                                                      CandidateRecord.category == category)).all()
    return [r.model_dump() for r in rows]


class Crash(BaseException):
    """Stands in for the process dying mid-campaign (not an Exception, so nothing catches it)."""


def test_a_crashed_campaign_resumes_without_rerunning_finished_branches(engine: Engine) -> None:
    async def crash_late(category: Category) -> None:
        for _ in range(1000):  # let the other nine finish and their writes reach the checkpoint
            if stored_branch_results(engine, "crashy") == 9:
                raise Crash()
            await asyncio.sleep(0.02)
        raise AssertionError("the other branches never reached the checkpoint")

    with pytest.raises(BaseException):  # noqa: B017 - the crash surfaces in whatever shape the runtime wraps it
        asyncio.run(run_campaign(engine=engine, settings=get_settings(), campaign_id="crashy",
                                 subagent=ScriptedSubagent({"reasoning": crash_late}),
                                 backends=[FakeIndex()]))
    assert unfinished_campaigns(engine=engine) == ["crashy"]
    assert stored_checkpoints(engine, "crashy") > 0  # what the resume needs is kept
    second = ScriptedSubagent()
    assert asyncio.run(run_campaign(engine=engine, settings=get_settings(), campaign_id="crashy", subagent=second,
                                    backends=[FakeIndex()])) == "crashy"
    assert second.calls == ["reasoning"]
    runs = runs_by_category(engine, "crashy", latest_only=False)
    assert all(rs[-1].status == "succeeded" for rs in runs.values()) and len(runs) == 10
    assert [r.status for r in runs["reasoning"]] == ["failed", "succeeded"]  # the dead attempt is closed, not lost
    assert unfinished_campaigns(engine=engine) == []
    with pytest.raises(CampaignFinishedError):
        asyncio.run(resume_campaign(engine=engine, settings=get_settings(), campaign_id="crashy",
                                    subagent=second, backends=[FakeIndex()]))
    assert stored_checkpoints(engine, "crashy") == 0  # finished: its results are in the catalog, not the saver
    with store.open_session(engine) as session:  # a crash after the graph finished, before the status landed
        store.set_campaign_status(session, campaign_id="crashy", status="running")
    asyncio.run(resume_campaign(engine=engine, settings=get_settings(), campaign_id="crashy",
                                subagent=second, backends=[FakeIndex()]))
    assert second.calls == ["reasoning"]  # nothing searched again
    with store.open_session(engine) as session:
        assert store.get_campaign(session, campaign_id="crashy").status == "succeeded"


def test_finished_campaigns_and_reruns_leave_no_checkpoints(engine: Engine) -> None:
    campaign_id = asyncio.run(run_campaign(engine=engine, settings=get_settings(), subagent=ScriptedSubagent(),
                                           backends=[FakeIndex()]))
    assert stored_checkpoints(engine, campaign_id) == 0
    rerun = asyncio.run(rerun_category(engine=engine, settings=get_settings(), campaign_id=campaign_id,
                                       category="math", subagent=ScriptedSubagent(), backends=[FakeIndex()]))
    assert stored_checkpoints(engine, f"{campaign_id}:rerun:") == 0
    with store.open_session(engine) as session:  # the results themselves are all in the catalog
        assert store.get_campaign(session, campaign_id=campaign_id).status == "succeeded"
        assert [r.id for r in store.list_runs(session, campaign_id=campaign_id) if r.category == "math"] == [rerun]
        assert store.catalog_summary(session, campaign_id=campaign_id)["total"] == 21


def test_prune_deletes_finished_threads_and_keeps_resumable_and_busy_ones(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    async def keep(saver: object, thread_id: str) -> None:  # as campaigns did before finished threads were deleted
        return None

    monkeypatch.setattr(graph.campaign, "forget_thread", keep)
    settings = get_settings()

    def campaign() -> str:
        return asyncio.run(run_campaign(engine=engine, settings=settings, categories=[Category.MATH, Category.TOOL_USE],
                                        subagent=ScriptedSubagent(), backends=[FakeIndex()]))

    done, lagging, busy = campaign(), campaign(), campaign()
    asyncio.run(rerun_category(engine=engine, settings=settings, campaign_id=done, category="math",
                               subagent=ScriptedSubagent(), backends=[FakeIndex()]))
    with store.open_session(engine) as session:
        store.set_campaign_status(session, campaign_id=lagging, status="running")  # died before its status landed
        assert store.acquire_lease(session, name=store.campaign_lease(busy), owner="a re-run elsewhere", ttl_s=60)
    assert all(stored_checkpoints(engine, c) > 0 for c in (done, lagging, busy))

    result = asyncio.run(prune_checkpoints(engine=engine, settings=settings))

    assert len(result.deleted) == 2 and result.deleted[0] == done
    assert result.deleted[1].startswith(f"{done}:rerun:math:")
    assert result.unfinished == [lagging] and result.busy == [busy]
    assert stored_checkpoints(engine, done) == 0
    assert stored_checkpoints(engine, lagging) > 0 and stored_checkpoints(engine, busy) > 0
    second = ScriptedSubagent()  # the unfinished one still resumes from what was kept, searching nothing again
    asyncio.run(resume_campaign(engine=engine, settings=settings, campaign_id=lagging, subagent=second,
                                backends=[FakeIndex()]))
    assert second.calls == []
    with store.open_session(engine) as session:
        assert store.get_campaign(session, campaign_id=lagging).status == "succeeded"
        assert store.catalog_summary(session, campaign_id=done)["total"] > 0  # the results stay in the catalog


def test_bad_requests_get_clear_errors(engine: Engine) -> None:
    subagent = ScriptedSubagent()
    with pytest.raises(UnknownCategoryError, match="unknown category 'maths'"):
        asyncio.run(run_campaign(engine=engine, settings=get_settings(),
                                 categories=["maths"],  # type: ignore[list-item]
                                 subagent=subagent, backends=[]))
    campaign_id = asyncio.run(run_campaign(engine=engine, settings=get_settings(), categories=[Category.MATH],
                                           subagent=subagent, backends=[FakeIndex()]))
    with pytest.raises(CategoryNotInCampaignError, match="did not search 'tool_use'"):
        asyncio.run(rerun_category(engine=engine, settings=get_settings(), campaign_id=campaign_id,
                                   category="tool_use", subagent=subagent, backends=[]))
    with pytest.raises(store.CampaignNotFoundError):
        asyncio.run(rerun_category(engine=engine, settings=get_settings(), campaign_id="nope",
                                   category="math", subagent=subagent, backends=[]))
    assert subagent.calls == ["math"]


def test_subagent_notes_are_kept_on_the_run_row(engine: Engine) -> None:
    def noted(category: Category) -> object:
        deliverable = deliverable_for(category)
        deliverable.notes.append("LLM judgement failed (not JSON); kept the deterministic scores")
        return deliverable

    subagent = ScriptedSubagent({Category.MATH.value: noted})
    campaign_id = asyncio.run(run_campaign(engine=engine, settings=get_settings(),
                                           categories=[Category.MATH, Category.REASONING],
                                           subagent=subagent, backends=[FakeIndex()]))
    runs = runs_by_category(engine, campaign_id)
    assert runs["math"][0].notes == ["LLM judgement failed (not JSON); kept the deterministic scores"]
    assert runs["reasoning"][0].notes == []


def test_a_rerun_killed_mid_run_resumes_as_that_one_category(engine: Engine) -> None:
    async def die(category: Category) -> None:
        raise Crash()

    campaign_id = asyncio.run(run_campaign(engine=engine, settings=get_settings(), subagent=ScriptedSubagent(),
                                           backends=[FakeIndex()]))
    with pytest.raises(BaseException):  # noqa: B017 - the crash surfaces in whatever shape the runtime wraps it
        asyncio.run(rerun_category(engine=engine, settings=get_settings(), campaign_id=campaign_id, category="math",
                                   subagent=ScriptedSubagent({"math": die}), backends=[FakeIndex()]))
    assert unfinished_campaigns(engine=engine) == [campaign_id]
    before = {c: [r.id for r in rs] for c, rs in runs_by_category(engine, campaign_id, latest_only=False).items()}
    resumed = ScriptedSubagent()
    asyncio.run(resume_campaign(engine=engine, settings=get_settings(), campaign_id=campaign_id, subagent=resumed,
                                backends=[FakeIndex()]))
    assert resumed.calls == ["math"]  # the re-run was of one category: so is its resume, not all ten again
    after = runs_by_category(engine, campaign_id, latest_only=False)
    assert {c: [r.id for r in rs] for c, rs in after.items() if c != "math"} == {
        c: ids for c, ids in before.items() if c != "math"}
    assert after["math"][-1].status == "succeeded"
    assert unfinished_campaigns(engine=engine) == []
