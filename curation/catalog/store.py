"""All data access of the catalog: keyword-only functions over a session, one per thing the callers do.

Graph nodes, API routes and the CLI never write tables themselves; they call these functions, which validate
statuses against `core.types`, write one `AuditEvent` row for every status change, and raise a `CatalogError`
subclass for a bad id or a refused review. Campaign and run bookkeeping lives in `campaigns.py`, candidates and
verdicts in `candidates.py`, human review in `review.py`, review-page logins in `sessions.py`, measured values in
`measured.py`, reading entries (pages, history, counts) in `entry_queries.py`, the database plumbing in
`database.py`; all are re-exported here so callers import one module. What stays here is writing entries: a
verified candidate created as an entry or merged into its dataset's entry (`upsert_entry`, `upsert_entries`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from core.types import Decision, EntryStatus, Reason
from curation.catalog.audit import record_audit
from curation.catalog.campaigns import (
    CAMPAIGN_STATUSES,
    claim_run,
    create_campaign,
    finish_run,
    get_campaign,
    get_run,
    list_campaigns,
    list_runs,
    set_campaign_status,
    start_run,
)
from curation.catalog.candidates import (
    add_candidate,
    add_verdict,
    add_verified_candidates,
    checked_decision,
    stored_reasons,
)
from curation.catalog.database import (
    compact_database,
    fenced,
    is_outage,
    is_retryable,
    make_engine,
    open_session,
    outage_reason,
    run_transaction,
    upgrade_database,
)
from curation.catalog.entry_queries import (
    CatalogSummary,
    approved_entries,
    benchmark_entries,
    catalog_summary,
    entry_history,
    get_entry,
    list_entries,
    status_counts,
)
from curation.catalog.errors import (
    CampaignNotFoundError,
    CatalogError,
    ConcurrentUpdateError,
    DatabaseError,
    EntryNotFoundError,
    InvalidValueError,
    OverrideRequiredError,
    RunNotFoundError,
)
from curation.catalog.leases import (
    Fence,
    LeaseFencedError,
    acquire_lease,
    campaign_lease,
    check_fence,
    db_now,
    lease_holder,
    new_owner,
    release_lease,
    renew_lease,
    renew_leases,
)
from curation.catalog.licensing import adopt_licenses
from curation.catalog.measured import entry_values, latest_values, record_values
from curation.catalog.models import CandidateRecord, CatalogEntry, utcnow
from curation.catalog.review import find_entry, review_entries, review_entry
from curation.catalog.sessions import open_review_session, review_session_live, revoke_review_session
from curation.licenses import license_from_metadata

__all__ = [
    "CAMPAIGN_STATUSES",
    "CampaignNotFoundError",
    "CatalogError",
    "CatalogSummary",
    "ConcurrentUpdateError",
    "DatabaseError",
    "EntryNotFoundError",
    "Fence",
    "InvalidValueError",
    "LeaseFencedError",
    "OverrideRequiredError",
    "RunNotFoundError",
    "acquire_lease",
    "add_candidate",
    "add_verdict",
    "add_verified_candidates",
    "adopt_licenses",
    "approved_entries",
    "benchmark_entries",
    "campaign_lease",
    "catalog_summary",
    "check_fence",
    "claim_run",
    "compact_database",
    "create_campaign",
    "db_now",
    "entry_history",
    "entry_values",
    "fenced",
    "finish_run",
    "get_campaign",
    "get_entry",
    "get_run",
    "is_outage",
    "is_retryable",
    "latest_values",
    "lease_holder",
    "list_campaigns",
    "list_entries",
    "list_runs",
    "make_engine",
    "new_owner",
    "open_review_session",
    "open_session",
    "outage_reason",
    "record_values",
    "release_lease",
    "renew_lease",
    "renew_leases",
    "review_entries",
    "review_entry",
    "review_session_live",
    "revoke_review_session",
    "run_transaction",
    "set_campaign_status",
    "start_run",
    "status_counts",
    "upgrade_database",
    "upsert_entries",
    "upsert_entry",
]

logger = logging.getLogger(__name__)

# ---- writing catalog entries -------------------------------------------------------------------------------


def upsert_entry(
    session: Session, *, candidate: CandidateRecord, decision: str, reasons: Sequence[Reason]
) -> CatalogEntry:
    """Create or refresh the entry for `candidate.hub_id` from a verified candidate; return the entry.

    Categories and per-category relevance are merged (one entry per dataset, however many subagents found it);
    metadata, license and the verifier's view are refreshed. A new entry waits for review (`pending_review`),
    also when the verifier rejected it. A human decision (approved/rejected) is never changed here.
    """
    decision, tagged = checked_decision(decision), _tagged(candidate, reasons)
    entry = find_entry(session, candidate.hub_id, lock=True)
    if entry is None:
        entry = _insert_entry(session, candidate, decision, tagged)
        if entry is not None:
            return entry
        entry = find_entry(session, candidate.hub_id, lock=True)  # lost an insert race: merge into the winner
        assert entry is not None
    _merge_into(session, entry, candidate, decision, tagged)
    session.flush()
    return entry


def upsert_entries(
    session: Session, *, verified: Sequence[tuple[CandidateRecord, str, Sequence[Reason]]]
) -> list[CatalogEntry]:
    """Upsert the entries of many `(candidate, decision, reasons)` at once, in Hub-id order; return the entries.

    The rows written are those of `upsert_entry` on each in that order. On PostgreSQL each upsert locks its
    entry's row (or its unique-index slot) until the transaction ends; taking those locks in one global order,
    whatever order the candidates came in, means two transactions never each hold a row the other waits for:
    concurrent campaigns merging the same datasets queue instead of deadlocking. SQLite has no row locks: a
    writing transaction holds the database's one write lock (`open_session` takes it at BEGIN), so nothing
    another connection writes can land between this function's read and its write. There the entries are read
    in one query and written in one flush, instead of a query and one or two flushes per candidate.
    """
    ordered = sorted(verified, key=lambda item: item[0].hub_id)
    if session.get_bind().dialect.name != "sqlite":
        return [upsert_entry(session, candidate=c, decision=d, reasons=r) for c, d, r in ordered]
    known = _entries_by_hub_id(session, [candidate.hub_id for candidate, _, _ in ordered])
    upserted = []
    for candidate, decision, reasons in ordered:
        decision, tagged = checked_decision(decision), _tagged(candidate, reasons)
        entry = known.get(candidate.hub_id)
        if entry is None:
            entry = known[candidate.hub_id] = _entry_for(candidate, decision, tagged)
            session.add(entry)
            _audit_created(session, entry, candidate, decision)
        else:
            _merge_into(session, entry, candidate, decision, tagged)
        upserted.append(entry)
    session.flush()
    return upserted


# ---- internals ---------------------------------------------------------------------------------------------


_IN_CHUNK = 500  # Hub ids per `IN (…)` query, well under any database's limit on bound parameters


def _entries_by_hub_id(session: Session, hub_ids: Sequence[str]) -> dict[str, CatalogEntry]:
    unique = sorted(set(hub_ids))
    found: dict[str, CatalogEntry] = {}
    for start in range(0, len(unique), _IN_CHUNK):
        chunk = unique[start : start + _IN_CHUNK]
        found.update((e.hub_id, e)
                     for e in session.exec(select(CatalogEntry).where(col(CatalogEntry.hub_id).in_(chunk))))
    return found


def _tagged(candidate: CandidateRecord, reasons: Sequence[Reason]) -> list[Reason]:
    return [Reason(**r, category=candidate.category) for r in stored_reasons(reasons)]


def _entry_for(candidate: CandidateRecord, decision: str, reasons: list[Reason]) -> CatalogEntry:
    entry = CatalogEntry(
        hub_id=candidate.hub_id,
        categories=[candidate.category],
        relevance={candidate.category: candidate.relevance},
        best_relevance=candidate.relevance,
        status=EntryStatus.PENDING_REVIEW.value,
        verifier_decision=decision,
        reasons=reasons,
    )
    _refresh_metadata(entry, candidate)
    return entry


def _insert_entry(
    session: Session, candidate: CandidateRecord, decision: str, reasons: list[Reason]
) -> CatalogEntry | None:
    entry = _entry_for(candidate, decision, reasons)
    try:
        with session.begin_nested():
            session.add(entry)
            session.flush()
    except IntegrityError:
        logger.debug("entry %s was created concurrently; merging", candidate.hub_id)
        return None
    _audit_created(session, entry, candidate, decision)
    session.flush()
    return entry


def _audit_created(session: Session, entry: CatalogEntry, candidate: CandidateRecord, decision: str) -> None:
    record_audit(
        session, entity="entry", entity_id=entry.hub_id, action="created", from_status=None,
        to_status=entry.status, detail={"category": candidate.category, "verifier_decision": decision},
    )


def _merge_into(
    session: Session, entry: CatalogEntry, candidate: CandidateRecord, decision: str, tagged: list[Reason]
) -> None:
    """Merge a verified candidate into its dataset's existing entry (see `upsert_entry`); flushed by the caller."""
    previous_decision = entry.verifier_decision
    relevance = {**entry.relevance, candidate.category: candidate.relevance}
    entry.categories = sorted(set(entry.categories) | {candidate.category})
    entry.relevance = relevance
    entry.best_relevance = max(relevance.values())
    entry.reasons = [r for r in entry.reasons if r.get("category") != candidate.category] + tagged
    entry.verifier_decision = _merged_decision(entry, candidate.category, decision)
    _refresh_metadata(entry, candidate)
    entry.version += 1
    entry.updated_at = utcnow()
    session.add(entry)
    if entry.verifier_decision != previous_decision:
        record_audit(
            session, entity="entry", entity_id=entry.hub_id, action="verifier_decision_changed",
            from_status=entry.status, to_status=entry.status,
            detail={"from": previous_decision, "to": entry.verifier_decision, "category": candidate.category},
        )


def _refresh_metadata(entry: CatalogEntry, candidate: CandidateRecord) -> None:
    entry.title = candidate.title or entry.title
    entry.description = candidate.description or entry.description
    entry.dataset_metadata = {**entry.dataset_metadata, **candidate.dataset_metadata}
    entry.license = (license_from_metadata(entry.dataset_metadata) or entry.license or "")[:128] or None
    entry.format_guess = candidate.format_guess or entry.format_guess
    entry.revision = entry.dataset_metadata.get("sha") or entry.revision


def _merged_decision(entry: CatalogEntry, category: str, decision: str) -> str:
    # One verifier decision per dataset: accepted if any category it was found for has no blocking reason.
    if decision == Decision.ACCEPT.value:
        return decision
    blocked = {r.get("category") for r in entry.reasons if r.get("blocking")}
    others_ok = any(c != category and c not in blocked for c in entry.categories)
    return Decision.ACCEPT.value if others_ok and entry.verifier_decision == Decision.ACCEPT.value else decision
