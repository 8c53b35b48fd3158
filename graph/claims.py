"""Claiming a campaign's work in the catalog before the service answers for it, and marking it safely after.

A service accepts work (a new campaign, a re-run, the takeover of an abandoned campaign) and runs it later,
when one of its campaign slots frees. The work is claimed first, in the database: the campaign's lease is
taken (its next generation) and, for a re-run, the attempt is recorded (`pending`) and the campaign set
`pending` under that lease, all before the answer goes out. So two replicas asked the same re-run give one
202 and one 409 whatever their slots, and a campaign queued in one replica is never taken by another's sweep
(its lease is held and renewed while it waits). The held lease is handed to `graph.campaign`'s entry point,
which runs the claimed work under it.

`mark_unless_completed` is the one way a service marks a campaign `failed` or `interrupted` outside a run: it
takes the lease itself and leaves alone a campaign that finished (succeeded or partial) meanwhile.
"""

from __future__ import annotations

import logging
import uuid

from sqlalchemy import Engine

from agents.search.base import SearchBackend
from core.settings import Settings
from core.types import (
    UNFINISHED_CAMPAIGN_STATUSES,
    CampaignStatus,
    Category,
    parse_category,
)
from curation.catalog import store
from graph import lifecycle
from graph.branch import close_interrupted
from graph.campaign import CampaignBusyError, CategoryNotInCampaignError, PreparedCampaign, prepare_campaign
from graph.lease import HeldLease, LeaseHeldElsewhere

logger = logging.getLogger(__name__)


def _acquired(engine: Engine, settings: Settings, campaign_id: str) -> HeldLease:
    lease = HeldLease(engine, campaign_id, ttl_s=settings.lease_ttl_s)
    try:
        lease.acquire()
    except LeaseHeldElsewhere as exc:
        raise CampaignBusyError(str(exc)) from None
    return lease


def claim_new_campaign(
    *, engine: Engine, settings: Settings, categories: list[Category] | None, offline: bool | None,
    backends: list[SearchBackend] | None = None,
) -> tuple[PreparedCampaign, HeldLease]:
    """Create a `pending` campaign under its own lease, taken before the row exists; return both."""
    campaign_id = uuid.uuid4().hex[:16]
    lease = _acquired(engine, settings, campaign_id)
    try:
        prepared = prepare_campaign(engine=lease.fenced_engine, settings=settings, categories=categories,
                                    offline=offline, campaign_id=campaign_id, backends=backends)
    except BaseException:
        lease.release()
        raise
    return prepared, lease


def claim_rerun(*, engine: Engine, settings: Settings, campaign_id: str, category: Category | str) -> HeldLease:
    """Take the campaign's lease, record the category's next attempt (pending) and set the campaign pending;
    return the lease. CampaignBusyError while another process (or task) holds the lease."""
    chosen = parse_category(str(category)).value
    lease = _acquired(engine, settings, campaign_id)
    try:
        with store.open_session(lease.fenced_engine) as session:
            campaign = store.get_campaign(session, campaign_id=campaign_id)
            if chosen not in campaign.categories:
                raise CategoryNotInCampaignError(
                    f"campaign {campaign_id} did not search {chosen!r}; "
                    f"its categories: {', '.join(campaign.categories)}")
            close_interrupted(session, campaign_id=campaign_id, category=chosen)
            run = store.claim_run(session, campaign_id=campaign_id, category=chosen)
            lifecycle.requeue(session, campaign_id=campaign_id)
            logger.info("campaign %s: re-run of %s claimed (attempt %d, lease generation %s)", campaign_id, chosen,
                        run.attempt, lease.generation)
    except BaseException:
        lease.release()
        raise
    return lease


def claim_unfinished(*, engine: Engine, settings: Settings, campaign_id: str) -> HeldLease | None:
    """Take the lease of a campaign left unfinished (a takeover, or a resume at start-up); None while another
    process holds it, or when the campaign turns out finished once the lease is held (it is left alone)."""
    lease = HeldLease(engine, campaign_id, ttl_s=settings.lease_ttl_s)
    try:
        lease.acquire()
    except LeaseHeldElsewhere:
        return None
    with store.open_session(lease.fenced_engine, readonly=True) as session:
        status = store.get_campaign(session, campaign_id=campaign_id).status
    if status not in UNFINISHED_CAMPAIGN_STATUSES:
        logger.info("campaign %s is %s by now; left as it is", campaign_id, status)
        lease.release()
        return None
    return lease


def mark_unless_completed(
    *, engine: Engine, settings: Settings, campaign_id: str, status: CampaignStatus, error: str,
) -> bool:
    """Mark the campaign `status` (failed, interrupted) holding its lease; return whether it did. A campaign
    that succeeded or came out partial is never changed, nor one another process holds now."""
    try:
        lease = _acquired(engine, settings, campaign_id)
    except CampaignBusyError:
        logger.info("campaign %s is held elsewhere: not marked %s", campaign_id, status)
        return False
    try:
        with store.open_session(lease.fenced_engine) as session:
            return lifecycle.stop(session, campaign_id=campaign_id, status=status, error=error)
    except store.CampaignNotFoundError:
        logger.warning("campaign %s vanished before it could be marked %s", campaign_id, status)
        return False
    finally:
        lease.release()
