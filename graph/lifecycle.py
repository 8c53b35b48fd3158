"""The one owner of a campaign's status: every change of the campaign row's status goes through this module.

A campaign moves `pending → running → succeeded | partial | failed`, and a stopped one may be re-queued
(`pending`, a re-run claimed) or begun again (a resume, a re-run). The moves, and the statuses each may start
from, are the table `MOVES`; each public function makes one move in the caller's session (the catalog store
writes the row and its audit row). A move from a status its row does not allow is a bug in the caller and
raises CampaignTransitionError, except `stop`'s: a campaign that completed (succeeded or partial) is left as
it is when something outside its run would mark it failed or interrupted, and `stop` says so by returning
False. `tests/test_boundaries.py` checks that nothing else in the product writes a campaign's status.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlmodel import Session

from core.types import COMPLETED_CAMPAIGN_STATUSES, CampaignStatus, RunStatus
from curation.catalog import store
from curation.catalog.models import SubagentRun
from graph.errors import GraphError

logger = logging.getLogger(__name__)

ANY_STATUS = frozenset(CampaignStatus)
NOT_COMPLETED = ANY_STATUS - COMPLETED_CAMPAIGN_STATUSES
OUTCOMES = frozenset({CampaignStatus.SUCCEEDED, CampaignStatus.PARTIAL, CampaignStatus.FAILED})

# move: (the statuses it may start from, the statuses it may end in)
MOVES: dict[str, tuple[frozenset[CampaignStatus], frozenset[CampaignStatus]]] = {
    # A re-run claimed by a service: any campaign's category may be searched again.
    "requeue": (ANY_STATUS, frozenset({CampaignStatus.PENDING})),
    # A start (pending), a resume (unfinished, or failed or interrupted), a re-run (any).
    "begin": (ANY_STATUS, frozenset({CampaignStatus.RUNNING})),
    # The persist node, or a resume finding the graph finished and only the status lagging: set by `begin`.
    "finish": (frozenset({CampaignStatus.RUNNING}), OUTCOMES),
    # The graph broke under a run; even after its outcome was written (a checkpoint write failing after persist).
    "fail": (ANY_STATUS, frozenset({CampaignStatus.FAILED})),
    # Marked from outside a run (Ctrl-C, a resume or a task that failed): never over a completed campaign.
    "stop": (NOT_COMPLETED, frozenset({CampaignStatus.FAILED, CampaignStatus.INTERRUPTED})),
}


class CampaignTransitionError(GraphError):
    """A campaign status move from a status the move does not start from (a bug in its caller)."""


def campaign_outcome(runs: Sequence[SubagentRun]) -> tuple[CampaignStatus, str | None]:
    """Return (campaign status, error summary) from the latest run of each category."""
    bad = [r for r in runs if r.status != RunStatus.SUCCEEDED]
    if not runs or len(bad) == len(runs):
        status = CampaignStatus.FAILED
    else:
        status = CampaignStatus.PARTIAL if bad else CampaignStatus.SUCCEEDED
    summary = "; ".join(f"{r.category}: {r.status}" + (f" ({r.error})" if r.error else "") for r in bad)
    return status, summary or None


def _move(
    session: Session, move: str, *, campaign_id: str, status: CampaignStatus, error: str | None = None,
    actor: str = "system",
) -> None:
    sources, targets = MOVES[move]
    current = store.get_campaign(session, campaign_id=campaign_id).status
    if current not in sources or status not in targets:
        raise CampaignTransitionError(f"campaign {campaign_id}: cannot {move} from {current} to {status}")
    store.set_campaign_status(session, campaign_id=campaign_id, status=status, error=error, actor=actor)


def requeue(session: Session, *, campaign_id: str) -> None:
    """Set the campaign `pending`: a re-run of one of its categories is claimed and waits for its turn."""
    _move(session, "requeue", campaign_id=campaign_id, status=CampaignStatus.PENDING)


def begin(session: Session, *, campaign_id: str) -> None:
    """Set the campaign `running`: its graph starts (a start, a resume or a re-run)."""
    _move(session, "begin", campaign_id=campaign_id, status=CampaignStatus.RUNNING)


def finish(session: Session, *, campaign_id: str) -> tuple[CampaignStatus, str | None]:
    """Set the campaign's outcome from each category's latest run; return (status, error summary)."""
    status, error = campaign_outcome(store.list_runs(session, campaign_id=campaign_id, latest_only=True))
    _move(session, "finish", campaign_id=campaign_id, status=status, error=error)
    return status, error


def fail(session: Session, *, campaign_id: str, error: str) -> None:
    """Set the campaign `failed` with `error`: its graph itself broke."""
    _move(session, "fail", campaign_id=campaign_id, status=CampaignStatus.FAILED, error=error)


def stop(session: Session, *, campaign_id: str, status: CampaignStatus, error: str, actor: str = "system") -> bool:
    """Mark the campaign `status` (failed or interrupted) from outside its run; return whether it did. A campaign
    that completed (succeeded or partial) keeps its result: False, nothing written."""
    current = store.get_campaign(session, campaign_id=campaign_id).status
    if current not in MOVES["stop"][0]:
        logger.info("campaign %s finished (%s): not marked %s", campaign_id, current, status)
        return False
    _move(session, "stop", campaign_id=campaign_id, status=status, error=error, actor=actor)
    return True


def interrupt(session: Session, *, campaign_id: str, error: str, actor: str = "system") -> bool:
    """Mark the campaign `interrupted` unless it completed; return whether it did (`stop`)."""
    return stop(session, campaign_id=campaign_id, status=CampaignStatus.INTERRUPTED, error=error, actor=actor)
