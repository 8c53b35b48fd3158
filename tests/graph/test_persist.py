"""The persist node: a run's candidates, verdicts and entries are written in one batched transaction per run.

Batching must not change what the catalog holds (the same rows as writing each candidate, verdict and entry
on its own, the way persist did before), and each run's transaction is a commit point: a crash in the middle
of persisting loses none of the runs already committed, stores nothing of the run it interrupted, and a
resume stores the rest exactly once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from campaign_fakes import FakeIndex, ScriptedSubagent, deliverable_for
from catalog_rows import catalog_rows
from sqlalchemy import Engine
from sqlmodel import Session, func, select

from agents.search.offline import OfflineIndex
from core.candidates import Candidate, VerifiedCandidate
from core.settings import get_settings
from core.types import Category, Decision, RunStatus, is_hub_id
from curation.catalog import store
from curation.catalog.models import CandidateRecord, CatalogEntry, Verdict
from graph import persist as persist_module
from graph.campaign import resume_campaign, run_campaign, unfinished_campaigns
from graph.state import VerifiedRun

# Categories whose offline searches overlap (the same datasets found for several), so entries are merged.
OVERLAPPING = [Category.CODE_REVIEW, Category.BUG_FIXING, Category.PULL_REQUESTS]


def persist_one_by_one(session: Session, *, campaign_id: str, run: VerifiedRun) -> dict[str, int]:
    """The reference: persist's writes before batching, each candidate, verdict and entry on its own."""
    run_id = run["run_id"]
    if run_id is None:
        run_id = store.start_run(session, campaign_id=campaign_id, category=run["category"]).id
        assert run_id is not None
    accepted = sum(c["decision"] == Decision.ACCEPT for c in run["candidates"])
    store.finish_run(
        session, run_id=run_id, status=run["status"], planner=run["planner"], queries=run["queries"],
        results_per_backend=run["results_per_backend"], candidates_found=len(run["candidates"]),
        candidates_accepted=accepted, error=run["error"], reasons=run["reasons"], notes=run.get("notes", []),
    )
    if run["status"] != RunStatus.SUCCEEDED:
        store.add_verdict(session, campaign_id=campaign_id, decision=Decision.REJECT.value, reasons=run["reasons"],
                          run_id=run_id)
    entries = []
    for verified in run["candidates"]:
        record = store.add_candidate(session, campaign_id=campaign_id, run_id=run_id, category=run["category"],
                                     candidate=verified["candidate"])
        store.add_verdict(session, campaign_id=campaign_id, decision=verified["decision"], reasons=verified["reasons"],
                          run_id=run_id, candidate_id=record.id, hub_id=record.hub_id)
        if is_hub_id(record.hub_id):
            entries.append((record, verified["decision"], verified["reasons"]))
    for record, decision, reasons in sorted(entries, key=lambda item: item[0].hub_id):
        store.upsert_entry(session, candidate=record, decision=decision, reasons=reasons)
    return {"candidates": len(run["candidates"]), "accepted": accepted}


def sqlite_catalog(path: Path) -> Engine:
    engine = store.make_engine(f"sqlite:///{path}")
    store.upgrade_database(engine)
    return engine


def two_offline_campaigns(engine: Engine) -> None:
    """Two offline campaigns over overlapping categories, a review in between: merges into existing entries,
    verifier decisions that change, and an entry a human decided."""
    index = OfflineIndex.default()
    asyncio.run(run_campaign(engine=engine, settings=get_settings(), categories=OVERLAPPING, campaign_id="first",
                             backends=[index], offline=True))
    with store.open_session(engine) as session:
        entries, _ = store.list_entries(session, limit=2)
        store.review_entry(session, hub_id=entries[0].hub_id, approve=False, reviewer="ana", note="not ours")
    asyncio.run(run_campaign(engine=engine, settings=get_settings(),
                             categories=[*OVERLAPPING, Category.CODE_EXPLANATION],
                             campaign_id="second", backends=[index], offline=True))


@pytest.mark.slow
def test_batched_persist_stores_the_same_catalog_as_one_row_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batched = sqlite_catalog(tmp_path / "batched.db")
    two_offline_campaigns(batched)
    monkeypatch.setattr(persist_module, "persist_run", persist_one_by_one)
    reference = sqlite_catalog(tmp_path / "reference.db")
    two_offline_campaigns(reference)
    got, want = catalog_rows(batched), catalog_rows(reference)
    assert len(want["candidate"]) > 200 and len(want["catalogentry"]) > 100  # a real campaign's worth
    merged = [e for e in want["catalogentry"] if len(e["categories"]) > 1]
    assert merged and any(a["action"] == "verifier_decision_changed" for a in want["auditevent"])
    for table in want:
        assert got[table] == want[table], table


class Crash(BaseException):
    """Stands in for the process dying (not an Exception, so nothing catches it)."""


def count(session: Session, model: Any, campaign_id: str) -> int:
    return int(session.exec(select(func.count()).select_from(model).where(model.campaign_id == campaign_id)).one())


def test_a_crash_mid_persist_keeps_committed_runs_and_a_resume_stores_the_rest_once(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_upsert = store.upsert_entries
    persisted: list[str] = []

    def crash_on_the_fourth_run(session: Session, *, verified: Any) -> list[CatalogEntry]:
        if len(persisted) == 3:  # the fourth run's candidates and verdicts are flushed, its entries not yet
            raise Crash()
        persisted.append(verified[0][0].category)
        return real_upsert(session, verified=verified)

    monkeypatch.setattr(store, "upsert_entries", crash_on_the_fourth_run)
    with pytest.raises(BaseException):  # noqa: B017 - the crash surfaces in whatever shape the runtime wraps it
        asyncio.run(run_campaign(engine=engine, settings=get_settings(), campaign_id="midway",
                                 subagent=ScriptedSubagent(), backends=[FakeIndex()]))
    with store.open_session(engine) as session:
        candidates = session.exec(select(CandidateRecord).where(CandidateRecord.campaign_id == "midway")).all()
        assert sorted({c.category for c in candidates}) == sorted(persisted)  # three runs committed, whole
        assert len(candidates) == 3 * 3 and count(session, Verdict, "midway") == 3 * 3
        assert len(session.exec(select(CatalogEntry)).all()) == 3 * 2 + 1  # two own datasets each, one shared
    assert unfinished_campaigns(engine=engine) == ["midway"]

    monkeypatch.setattr(store, "upsert_entries", real_upsert)
    second = ScriptedSubagent()
    asyncio.run(resume_campaign(engine=engine, settings=get_settings(), campaign_id="midway", subagent=second,
                                backends=[FakeIndex()]))
    assert second.calls == []  # every branch had delivered: only the persisting was left to do
    with store.open_session(engine) as session:
        assert store.get_campaign(session, campaign_id="midway").status == "succeeded"
        candidates = session.exec(select(CandidateRecord).where(CandidateRecord.campaign_id == "midway")).all()
        by_category = sorted((c.category, c.hub_id) for c in candidates)
        want = sorted((c.value, d.hub_id) for c in Category for d in deliverable_for(c).candidates)
        assert by_category == want  # each category's candidates exactly once, the crashed run's included
        assert count(session, Verdict, "midway") == len(want)
        shared = store.get_entry(session, hub_id=deliverable_for(Category.MATH).candidates[-1].hub_id)
        assert shared.categories == sorted(c.value for c in Category) and shared.version == len(Category)


def test_a_run_whose_batch_fails_validation_stores_nothing_of_it(engine: Engine) -> None:
    with store.open_session(engine) as session:
        campaign = store.create_campaign(session, categories=["math"], offline=True, backends=["offline"])
        run_id = store.start_run(session, campaign_id=campaign.id, category="math").id
        assert run_id is not None
    good = Candidate(hub_id="org/fine", categories=[Category.MATH]).model_dump(mode="json")
    bad = Candidate(hub_id="org/odd", categories=[Category.MATH]).model_dump(mode="json")
    verified: list[VerifiedCandidate] = [  # the second decision is not a Decision
        {"candidate": good, "decision": Decision.ACCEPT, "reasons": []},
        {"candidate": bad, "decision": "maybe", "reasons": []},  # type: ignore[typeddict-item]
    ]
    with (
        pytest.raises(store.InvalidValueError, match="unknown decision 'maybe'"),
        store.open_session(engine) as session,
    ):
        store.add_verified_candidates(session, campaign_id=campaign.id, run_id=run_id, category="math",
                                      verified=verified)
    with store.open_session(engine) as session:
        assert count(session, CandidateRecord, campaign.id) == 0 and count(session, Verdict, campaign.id) == 0
        records = store.add_verified_candidates(
            session, campaign_id=campaign.id, run_id=run_id, category="math",
            verified=[{"candidate": good, "decision": Decision.ACCEPT, "reasons": []},
                      {"candidate": bad, "decision": Decision.REJECT, "reasons": []}])
        verdicts = session.exec(select(Verdict).order_by(Verdict.id)).all()  # type: ignore[arg-type]
    assert [r.hub_id for r in records] == ["org/fine", "org/odd"]
    assert [(v.candidate_id, v.hub_id, v.decision) for v in verdicts] == [
        (records[0].id, "org/fine", "accept"), (records[1].id, "org/odd", "reject")]
    with pytest.raises(store.RunNotFoundError), store.open_session(engine) as session:
        store.add_verified_candidates(session, campaign_id="elsewhere", run_id=run_id, category="math", verified=[])
