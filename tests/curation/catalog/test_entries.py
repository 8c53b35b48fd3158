"""Catalog entries: upsert merges what subagents found, never overrides a human, and lists filter and rank."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Engine

from curation.catalog import store
from curation.catalog.models import CatalogEntry

Seeder = Callable[..., CatalogEntry]

GATED = {"code": "gated", "detail": "manual approval on the Hub", "blocking": True}
FLAG = {"code": "license_unknown", "detail": "no license in the card", "blocking": False}


def test_one_entry_for_a_dataset_found_by_two_subagents(engine: Engine, seed: Seeder) -> None:
    seed("org/mixed", "math", 0.4, title="Mixed", metadata={"license": "mit"})
    entry = seed("org/mixed", "reasoning", 0.9, metadata={"num_rows": 1000})
    assert entry.categories == ["math", "reasoning"]
    assert entry.relevance == {"math": 0.4, "reasoning": 0.9}
    assert entry.best_relevance == 0.9
    assert entry.title == "Mixed"  # kept when a later candidate has none
    assert entry.dataset_metadata == {"license": "mit", "num_rows": 1000}
    assert (entry.license, entry.status, entry.version) == ("mit", "pending_review", 2)
    with store.open_session(engine) as session:
        entries, total = store.list_entries(session)
        history = store.entry_history(session, hub_id="org/mixed")
    assert total == 1 and [e.hub_id for e in entries] == ["org/mixed"]
    assert [c.category for c in history["candidates"]] == ["math", "reasoning"]
    assert len(history["verdicts"]) == 2
    assert [(a.action, a.to_status) for a in history["audit"]] == [("created", "pending_review")]


def test_a_verifier_rejected_entry_waits_for_review(engine: Engine, seed: Seeder) -> None:
    entry = seed("org/gated", decision="reject", reasons=[GATED])
    assert (entry.status, entry.verifier_decision) == ("pending_review", "reject")
    assert entry.reasons == [{**GATED, "category": "math"}]


def test_accept_from_another_category_survives_a_rejection(engine: Engine, seed: Seeder) -> None:
    seed("org/code", "code_review", 0.8)
    off_topic = {"code": "off_topic", "detail": "no math here", "blocking": True}
    entry = seed("org/code", "math", 0.1, decision="reject", reasons=[off_topic])
    assert entry.verifier_decision == "accept"
    assert entry.reasons == [{**off_topic, "category": "math"}]
    rejected_everywhere = seed("org/code", "code_review", 0.8, decision="reject", reasons=[GATED])
    assert rejected_everywhere.verifier_decision == "reject"
    with store.open_session(engine) as session:
        audit = store.entry_history(session, hub_id="org/code")["audit"]
    assert [a.action for a in audit] == ["created", "verifier_decision_changed"]
    assert audit[-1].detail["from"] == "accept" and audit[-1].detail["to"] == "reject"


def test_a_human_decision_is_never_overwritten_by_the_verifier(engine: Engine, seed: Seeder) -> None:
    seed("org/kept", "math", 0.5)
    seed("org/dropped", "math", 0.5)
    with store.open_session(engine) as session:
        store.review_entry(session, hub_id="org/kept", approve=True, reviewer="ana")
    with store.open_session(engine) as session:
        store.review_entry(
            session, hub_id="org/dropped", approve=False, reviewer="ana", note="duplicate of org/kept"
        )
    kept = seed("org/kept", "reasoning", 0.7, decision="reject", reasons=[GATED])
    dropped = seed("org/dropped", "math", 0.9, decision="accept")
    assert (kept.status, kept.reviewer) == ("approved", "ana")
    assert (dropped.status, dropped.note) == ("rejected", "duplicate of org/kept")
    assert kept.categories == ["math", "reasoning"]


def test_list_filters_pagination_and_total(engine: Engine, seed: Seeder) -> None:
    seed("org/alpha", "math", 0.3, title="Alpha proofs", metadata={"license": "MIT"})
    seed(
        "org/beta",
        "math",
        0.9,
        description="Grade-school 100% word problems",
        metadata={"license": "apache-2.0"},
    )
    seed("org/gamma", "reasoning", 0.8, metadata={"license": "mit"})
    seed("org/delta", "math", 0.6, decision="reject", reasons=[GATED])
    with store.open_session(engine) as session:
        store.review_entry(session, hub_id="org/beta", approve=True, reviewer="ana")
    with store.open_session(engine) as session:

        def ids(**kw: object) -> tuple[list[str], int]:
            entries, total = store.list_entries(session, **kw)  # type: ignore[arg-type]
            return [e.hub_id for e in entries], total

        assert ids() == (["org/beta", "org/gamma", "org/delta", "org/alpha"], 4)
        assert ids(category="math") == (["org/beta", "org/delta", "org/alpha"], 3)
        assert ids(category="Math", limit=2) == (["org/beta", "org/delta"], 3)
        assert ids(category="math", limit=2, offset=2) == (["org/alpha"], 3)
        assert ids(status="approved") == (["org/beta"], 1)
        assert ids(status="pending_review", category="math") == (["org/delta", "org/alpha"], 2)
        assert ids(license="mit") == (["org/gamma", "org/alpha"], 2)
        assert ids(text="PROOFS") == (["org/alpha"], 1)
        assert ids(text="100%") == (["org/beta"], 1)  # LIKE wildcards are matched literally
        assert ids(text="org/gam") == (["org/gamma"], 1)
        assert ids(category="tool_use") == ([], 0)
        with pytest.raises(store.InvalidValueError, match="unknown category"):
            store.list_entries(session, category="poetry")
        with pytest.raises(store.InvalidValueError, match="unknown entry status"):
            store.list_entries(session, status="maybe")


def test_category_ordering_uses_that_categorys_relevance(engine: Engine, seed: Seeder) -> None:
    seed("org/a", "math", 0.2)
    seed("org/a", "reasoning", 0.99)  # best overall, but weak for math
    seed("org/b", "math", 0.7)
    with store.open_session(engine) as session:
        by_math, _ = store.list_entries(session, category="math")
        overall, _ = store.list_entries(session)
    assert [e.hub_id for e in by_math] == ["org/b", "org/a"]
    assert [e.hub_id for e in overall] == ["org/a", "org/b"]


def test_summary_and_approved_entries(engine: Engine, seed: Seeder) -> None:
    seed("org/one", "math", 0.5)
    seed("org/two", "math", 0.5, decision="reject", reasons=[GATED])
    seed("org/two", "reasoning", 0.5, decision="reject", reasons=[GATED])
    seed("org/three", "tool_use", 0.5, reasons=[FLAG])
    with store.open_session(engine) as session:
        store.review_entry(session, hub_id="org/one", approve=True, reviewer="ana")
    with store.open_session(engine) as session:
        store.review_entry(session, hub_id="org/three", approve=False, reviewer="ana")
    with store.open_session(engine) as session:
        summary = store.catalog_summary(session)
        approved = store.approved_entries(session)
    assert summary["total"] == 3
    assert summary["by_status"] == {"pending_review": 1, "approved": 1, "rejected": 1}
    assert summary["by_category"]["math"] == {
        "total": 2,
        "pending_review": 1,
        "approved": 1,
        "rejected": 0,
        "verifier_accepted": 1,
        "verifier_unverified": 0,
        "verifier_flagged": 0,
        "verifier_eval_sets": 0,
        "verifier_rejected": 1,
    }
    assert summary["by_category"]["tool_use"]["rejected"] == 1
    assert summary["by_category"]["code_review"]["total"] == 0
    assert [e.hub_id for e in approved] == ["org/one"]


def test_summary_of_one_campaign(engine: Engine, seed: Seeder) -> None:
    seed("org/one", "math", 0.5)
    seed("org/two", "math", 0.5)
    with store.open_session(engine) as session:
        campaigns = store.list_campaigns(session)
        newest = campaigns[0].id
        summary = store.catalog_summary(session, campaign_id=newest)
        with pytest.raises(store.CampaignNotFoundError):
            store.catalog_summary(session, campaign_id="missing")
    assert summary["total"] == 1


def test_entry_lookup_errors_and_bad_input(engine: Engine, seed: Seeder) -> None:
    with store.open_session(engine) as session:
        with pytest.raises(store.EntryNotFoundError):
            store.get_entry(session, hub_id="org/missing")
        with pytest.raises(store.EntryNotFoundError):
            store.entry_history(session, hub_id="org/missing")
    with pytest.raises(store.InvalidValueError, match="unknown decision"):
        seed("org/x", decision="maybe")
    with pytest.raises(store.InvalidValueError, match="code"):
        seed("org/x", reasons=[{"detail": "no code"}])


def test_candidates_from_the_agents_contract_are_stored_as_json(engine: Engine) -> None:
    from datetime import UTC, datetime

    from core.candidates import Candidate, DatasetMetadata, Evidence

    candidate = Candidate(
        hub_id="org/agents",
        title="Agents",
        categories=["tool_use"],
        relevance=0.8,
        format_guess="sharegpt",
        metadata=DatasetMetadata(
            license="mit", last_modified=datetime(2026, 5, 1, tzinfo=UTC), features=["messages"]
        ),
        evidence=[Evidence(backend="offline", query="tool calls", rank=1, score=3.5)],
    )
    with store.open_session(engine) as session:
        store.create_campaign(
            session, categories=["tool_use"], offline=True, backends=["offline"], campaign_id="c"
        )
        run = store.start_run(session, campaign_id="c", category="tool_use")
        assert run.id is not None
        for dump in (candidate.model_dump(mode="json"), candidate.model_dump()):  # the python dump too
            record = store.add_candidate(
                session, campaign_id="c", run_id=run.id, category="tool_use", candidate=dump
            )
            entry = store.upsert_entry(session, candidate=record, decision="accept", reasons=[])
    with store.open_session(engine) as session:
        history = store.entry_history(session, hub_id="org/agents")
    stored = history["candidates"][1]
    assert stored.dataset_metadata["last_modified"].startswith("2026-05-01")
    assert stored.evidence == [
        {"backend": "offline", "query": "tool calls", "rank": 1, "score": 3.5, "url": None}
    ]
    assert (entry.license, entry.format_guess, entry.relevance) == ("mit", "sharegpt", {"tool_use": 0.8})
