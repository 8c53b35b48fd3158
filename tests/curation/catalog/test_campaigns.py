"""Campaign and subagent-run bookkeeping: statuses, attempts, timings, and an audit row for every change."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine
from sqlmodel import Session, col, select

from curation.catalog import store
from curation.catalog.models import AuditEvent


def _audit(session: Session, entity: str, entity_id: str) -> list[AuditEvent]:
    stmt = select(AuditEvent).where(AuditEvent.entity == entity, AuditEvent.entity_id == entity_id)
    return list(session.exec(stmt.order_by(col(AuditEvent.id))).all())


def test_campaign_status_changes_are_audited(engine: Engine) -> None:
    with store.open_session(engine) as session:
        campaign = store.create_campaign(
            session, categories=["code-review", "math"], offline=True, backends=["offline"], campaign_id="c1"
        )
        assert (campaign.status, campaign.thread_id, campaign.categories) == (
            "pending",
            "c1",
            ["code_review", "math"],
        )
    with store.open_session(engine) as session:
        store.set_campaign_status(session, campaign_id="c1", status="running")
        store.set_campaign_status(session, campaign_id="c1", status="running")  # no change, no row
        done = store.set_campaign_status(
            session, campaign_id="c1", status="partial", error="math failed", actor="graph"
        )
        assert done.finished_at is not None and done.finished_at.tzinfo is not None
        assert done.error == "math failed"
    with store.open_session(engine) as session:
        rows = _audit(session, "campaign", "c1")
        campaign = store.get_campaign(session, campaign_id="c1")
    assert [(r.action, r.from_status, r.to_status) for r in rows] == [
        ("created", None, "pending"),
        ("status_changed", "pending", "running"),
        ("status_changed", "running", "partial"),
    ]
    assert rows[-1].actor == "graph"
    assert campaign.finished_at is not None and campaign.finished_at.utcoffset() is not None
    assert campaign.created_at.utcoffset().total_seconds() == 0  # type: ignore[union-attr]


def test_campaign_errors(engine: Engine) -> None:
    with store.open_session(engine) as session:
        with pytest.raises(store.CampaignNotFoundError):
            store.get_campaign(session, campaign_id="nope")
        with pytest.raises(store.InvalidValueError, match="unknown category"):
            store.create_campaign(session, categories=["poetry"], offline=True, backends=[])
        store.create_campaign(
            session, categories=["math"], offline=False, backends=["hub"], campaign_id="dup"
        )
        with pytest.raises(store.InvalidValueError, match="already exists"):
            store.create_campaign(
                session, categories=["math"], offline=False, backends=["hub"], campaign_id="dup"
            )
        with pytest.raises(store.InvalidValueError, match="unknown campaign status"):
            store.set_campaign_status(session, campaign_id="dup", status="done")


def test_list_campaigns_newest_first(engine: Engine) -> None:
    for name in ("a", "b", "c"):
        with store.open_session(engine) as session:
            store.create_campaign(session, categories=["math"], offline=True, backends=[], campaign_id=name)
    with store.open_session(engine) as session:
        assert [c.id for c in store.list_campaigns(session)] == ["c", "b", "a"]
        assert [c.id for c in store.list_campaigns(session, limit=1, offset=1)] == ["b"]


def test_runs_attempts_timings_and_audit(engine: Engine) -> None:
    with store.open_session(engine) as session:
        store.create_campaign(
            session, categories=["math", "reasoning"], offline=True, backends=["offline"], campaign_id="c"
        )
        first = store.start_run(session, campaign_id="c", category="math")
        store.start_run(session, campaign_id="c", category="reasoning")
        assert first.id is not None and (first.attempt, first.status) == (1, "running")
        store.finish_run(
            session,
            run_id=first.id,
            status="failed",
            planner="deterministic",
            queries=[{"query": "gsm8k"}],
            results_per_backend={"offline": 0},
            candidates_found=0,
            candidates_accepted=0,
            error="boom",
            reasons=[{"code": "backend_failed", "detail": "boom", "blocking": True}],
        )
        second = store.start_run(session, campaign_id="c", category="math")
        assert second.id is not None and second.attempt == 2
        done = store.finish_run(
            session,
            run_id=second.id,
            status="succeeded",
            planner="deterministic",
            queries=[],
            results_per_backend={"offline": 3},
            candidates_found=3,
            candidates_accepted=2,
            error=None,
            reasons=[],
        )
        assert done.elapsed_s is not None and done.elapsed_s >= 0 and done.finished_at is not None
    with store.open_session(engine) as session:
        latest = store.list_runs(session, campaign_id="c")
        every = store.list_runs(session, campaign_id="c", latest_only=False)
        rows = _audit(session, "run", str(first.id))
    assert [(r.category, r.attempt) for r in latest] == [("math", 2), ("reasoning", 1)]
    assert [(r.category, r.attempt, r.status) for r in every] == [
        ("math", 1, "failed"),
        ("math", 2, "succeeded"),
        ("reasoning", 1, "running"),
    ]
    assert [(r.action, r.from_status, r.to_status) for r in rows] == [
        ("started", None, "running"),
        ("finished", "running", "failed"),
    ]
    assert rows[-1].detail["error"] == "boom"


def test_run_errors(engine: Engine) -> None:
    with store.open_session(engine) as session:
        with pytest.raises(store.CampaignNotFoundError):
            store.start_run(session, campaign_id="missing", category="math")
        with pytest.raises(store.RunNotFoundError):
            store.finish_run(
                session,
                run_id=999,
                status="succeeded",
                planner=None,
                queries=[],
                results_per_backend={},
                candidates_found=0,
                candidates_accepted=0,
                error=None,
                reasons=[],
            )
        store.create_campaign(session, categories=["math"], offline=True, backends=[], campaign_id="c")
        run = store.start_run(session, campaign_id="c", category="math")
        assert run.id is not None
        with pytest.raises(store.InvalidValueError, match="unknown run status"):
            store.finish_run(
                session,
                run_id=run.id,
                status="done",
                planner=None,
                queries=[],
                results_per_backend={},
                candidates_found=0,
                candidates_accepted=0,
                error=None,
                reasons=[],
            )


def test_open_session_rolls_back_on_error(engine: Engine) -> None:
    with pytest.raises(RuntimeError), store.open_session(engine) as session:
        store.create_campaign(session, categories=["math"], offline=True, backends=[], campaign_id="gone")
        raise RuntimeError("boom")
    with store.open_session(engine) as session:
        assert store.list_campaigns(session) == []
