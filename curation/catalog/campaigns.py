"""Campaign and subagent-run bookkeeping in the catalog: create, move through statuses, list.

Every status change writes an audit row. Statuses are `core.types.RunStatus` values for runs and
`core.types.CampaignStatus` values for campaigns. Callers import these through `curation.catalog.store`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from core.types import (
    FINAL_CAMPAIGN_STATUSES,
    CampaignStatus,
    Reason,
    RunStatus,
    UnknownCategoryError,
    parse_category,
)
from curation.catalog.audit import record_audit
from curation.catalog.errors import (
    CampaignNotFoundError,
    ConcurrentUpdateError,
    InvalidValueError,
    RunNotFoundError,
)
from curation.catalog.models import Campaign, SubagentRun, utcnow
from curation.catalog.storable import checked, storable

CAMPAIGN_STATUSES = tuple(s.value for s in CampaignStatus)
_RUN_STATUSES = {s.value for s in RunStatus}
_ATTEMPT_RACES = 5


def create_campaign(
    session: Session, *, categories: list[str], offline: bool, backends: list[str], campaign_id: str | None = None
) -> Campaign:
    """Create a pending campaign over `categories` (its LangGraph thread id is its id); return it."""
    names = [category_name(c) for c in categories]
    if not names:
        raise InvalidValueError("a campaign needs at least one category")
    campaign_id = checked(campaign_id, "campaign id") if campaign_id else uuid.uuid4().hex[:16]
    if session.get(Campaign, campaign_id) is not None:
        raise InvalidValueError(f"campaign {campaign_id!r} already exists")
    campaign = Campaign(
        id=campaign_id,
        status=CampaignStatus.PENDING.value,
        categories=list(dict.fromkeys(names)),
        offline=offline,
        backends=list(backends),
        thread_id=campaign_id,
    )
    session.add(campaign)
    record_audit(session, entity="campaign", entity_id=campaign_id, action="created", from_status=None,
                 to_status=CampaignStatus.PENDING.value)
    session.flush()
    return campaign


def set_campaign_status(
    session: Session, *, campaign_id: str, status: CampaignStatus, error: str | None = None, actor: str = "system"
) -> Campaign:
    """Move a campaign to `status` (audited when it changes; final statuses stamp `finished_at`); return it."""
    if status not in CAMPAIGN_STATUSES:
        raise InvalidValueError(f"unknown campaign status {status!r}; known: {', '.join(CAMPAIGN_STATUSES)}")
    status = CampaignStatus(status)
    campaign = get_campaign(session, campaign_id=campaign_id)
    previous = campaign.status
    now = utcnow()
    error = storable(error)  # often an exception's message: stored, whatever characters it holds
    campaign.error = error
    campaign.updated_at = now
    if status in FINAL_CAMPAIGN_STATUSES:
        campaign.finished_at = now
    elif status != previous:
        campaign.finished_at = None  # re-running a finished campaign
    if status != previous:
        campaign.status = status.value
        record_audit(
            session, entity="campaign", entity_id=campaign_id, action="status_changed", from_status=previous,
            to_status=status.value, actor=actor, detail={"error": error} if error else None,
        )
    session.add(campaign)
    session.flush()
    return campaign


def get_campaign(session: Session, *, campaign_id: str) -> Campaign:
    """Return the campaign, or raise CampaignNotFoundError (InvalidValueError for an id no row can have)."""
    campaign = session.get(Campaign, checked(campaign_id, "campaign id"))
    if campaign is None:
        raise CampaignNotFoundError(f"no campaign {campaign_id!r}")
    return campaign


def list_campaigns(session: Session, *, limit: int = 50, offset: int = 0) -> list[Campaign]:
    """Return campaigns newest first."""
    stmt = (
        select(Campaign)
        .order_by(col(Campaign.created_at).desc(), col(Campaign.id).desc())
        .offset(offset)
        .limit(limit)
    )
    return list(session.exec(stmt).all())


def start_run(session: Session, *, campaign_id: str, category: str) -> SubagentRun:
    """Open the next attempt of `category`'s subagent in the campaign, status running; return it. An attempt
    `claim_run` recorded (pending: a re-run accepted before its turn) is the one started, not a new one."""
    get_campaign(session, campaign_id=campaign_id)
    name = category_name(category)
    latest = _latest_attempt(session, campaign_id=campaign_id, name=name)
    if latest is not None and latest.status == RunStatus.PENDING.value:
        latest.status, latest.started_at = RunStatus.RUNNING.value, utcnow()
        session.add(latest)
        record_audit(session, entity="run", entity_id=str(latest.id), action="started",
                     from_status=RunStatus.PENDING.value, to_status=latest.status,
                     detail={"campaign_id": campaign_id, "category": name, "attempt": latest.attempt})
        session.flush()
        return latest
    return _new_attempt(session, campaign_id=campaign_id, name=name, status=RunStatus.RUNNING)


def claim_run(session: Session, *, campaign_id: str, category: str) -> SubagentRun:
    """Record the next attempt of `category` as pending (a re-run accepted, waiting for its turn); `start_run`
    starts it. A pending attempt already recorded is returned as it is."""
    get_campaign(session, campaign_id=campaign_id)
    name = category_name(category)
    latest = _latest_attempt(session, campaign_id=campaign_id, name=name)
    if latest is not None and latest.status == RunStatus.PENDING.value:
        return latest
    return _new_attempt(session, campaign_id=campaign_id, name=name, status=RunStatus.PENDING)


def _latest_attempt(session: Session, *, campaign_id: str, name: str) -> SubagentRun | None:
    return session.exec(select(SubagentRun).where(SubagentRun.campaign_id == campaign_id, SubagentRun.category == name)
                        .order_by(col(SubagentRun.attempt).desc()).limit(1)).first()


def _new_attempt(session: Session, *, campaign_id: str, name: str, status: RunStatus) -> SubagentRun:
    for _ in range(_ATTEMPT_RACES):
        last = session.exec(
            select(func.max(SubagentRun.attempt)).where(
                SubagentRun.campaign_id == campaign_id, SubagentRun.category == name
            )
        ).one()
        run = SubagentRun(
            campaign_id=campaign_id, category=name, attempt=(last or 0) + 1, status=status.value,
            started_at=utcnow() if status == RunStatus.RUNNING else None,
        )
        try:
            with session.begin_nested():  # another process took this attempt number: count again
                session.add(run)
                session.flush()
            break
        except IntegrityError:
            continue
    else:
        raise ConcurrentUpdateError(f"could not number a new {name} run of campaign {campaign_id!r}; retry it")
    assert run.id is not None
    record_audit(
        session, entity="run", entity_id=str(run.id), action="started" if status == RunStatus.RUNNING else "claimed",
        from_status=None, to_status=run.status,
        detail={"campaign_id": campaign_id, "category": name, "attempt": run.attempt},
    )
    session.flush()
    return run


def finish_run(
    session: Session,
    *,
    run_id: int,
    status: str,
    planner: str | None,
    queries: list[dict[str, Any]],
    results_per_backend: dict[str, int],
    candidates_found: int,
    candidates_accepted: int,
    error: str | None,
    reasons: Sequence[Reason],
    notes: list[str] | None = None,
) -> SubagentRun:
    """Record how a run ended (timings included) and audit the status change; return the run."""
    if status not in _RUN_STATUSES:
        raise InvalidValueError(f"unknown run status {status!r}; known: {', '.join(sorted(_RUN_STATUSES))}")
    run = get_run(session, run_id=run_id)
    previous = run.status
    now = utcnow()
    # What a run reports comes from search backends and exception messages: stored whatever it holds.
    queries, results_per_backend, error = storable(queries), storable(results_per_backend), storable(error)
    notes, reasons = storable(notes), storable(reasons)
    run.status = status
    run.planner = planner
    run.queries = list(queries)
    run.results_per_backend = dict(results_per_backend)
    run.candidates_found = candidates_found
    run.candidates_accepted = candidates_accepted
    run.error = error
    run.notes = list(notes or [])
    run.reasons = list(reasons)
    run.finished_at = now
    run.elapsed_s = (now - run.started_at).total_seconds() if run.started_at else None
    session.add(run)
    record_audit(
        session, entity="run", entity_id=str(run_id), action="finished", from_status=previous, to_status=status,
        detail={"campaign_id": run.campaign_id, "category": run.category, "error": error} if error else
        {"campaign_id": run.campaign_id, "category": run.category},
    )
    session.flush()
    return run


def get_run(session: Session, *, run_id: int) -> SubagentRun:
    """Return the run, or raise RunNotFoundError."""
    run = session.get(SubagentRun, run_id)
    if run is None:
        raise RunNotFoundError(f"no subagent run {run_id}")
    return run


def list_runs(session: Session, *, campaign_id: str, latest_only: bool = True) -> list[SubagentRun]:
    """Return the campaign's runs by category then attempt; only each category's latest attempt by default."""
    get_campaign(session, campaign_id=campaign_id)
    runs = session.exec(
        select(SubagentRun)
        .where(SubagentRun.campaign_id == campaign_id)
        .order_by(col(SubagentRun.category), col(SubagentRun.attempt))
    ).all()
    if not latest_only:
        return list(runs)
    latest: dict[str, SubagentRun] = {}
    for run in runs:
        latest[run.category] = run
    return list(latest.values())


def category_name(name: str) -> str:
    """Return the canonical value of category `name`, or raise InvalidValueError."""
    try:
        return parse_category(name).value
    except UnknownCategoryError as exc:
        raise InvalidValueError(str(exc)) from None
