"""Human review of catalog entries: approve or reject, safely under concurrent reviewers.

PostgreSQL serialises reviews of one entry with `SELECT … FOR UPDATE`; SQLite with the write lock a session
takes at `BEGIN IMMEDIATE`. On top, the write is conditional on the entry's version, and a review that lost a
race (or met a busy SQLite database in a transaction it owns) is rolled back and retried. Every call writes
exactly one audit row; repeating a decision keeps the entry as it is. `review_entries` decides many entries in
one transaction, all or none. Callers use `curation.catalog.store`.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Sequence

from sqlalchemy import update
from sqlalchemy.exc import OperationalError
from sqlmodel import Session, col, select

from core.types import Decision, EntryStatus
from curation.catalog.audit import record_audit
from curation.catalog.database import SQLITE_BEGIN_OPTION
from curation.catalog.errors import ConcurrentUpdateError, EntryNotFoundError, OverrideRequiredError
from curation.catalog.models import CatalogEntry, utcnow
from curation.catalog.storable import checked, checked_optional

logger = logging.getLogger(__name__)

REVIEW_ATTEMPTS = 8


class _StaleEntry(Exception):
    """The entry's version moved between our read and our write."""


def find_entry(session: Session, hub_id: str, *, lock: bool, refresh: bool = False) -> CatalogEntry | None:
    """Return the entry for `hub_id` or None; `lock` takes the row lock writers need (PostgreSQL)."""
    stmt = select(CatalogEntry).where(CatalogEntry.hub_id == hub_id)
    if lock and session.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    if refresh:
        stmt = stmt.execution_options(populate_existing=True)
    return session.exec(stmt).first()


def review_entry(
    session: Session, *, hub_id: str, approve: bool, reviewer: str, note: str | None = None, override: bool = False
) -> CatalogEntry:
    """Approve or reject an entry as `reviewer`; return it as it now stands.

    Approving an entry the verifier rejected raises OverrideRequiredError unless `override`. Repeating the same
    decision keeps the state (a new note replaces the entry's note); every call writes one audit row.
    Concurrent reviews are serialised: a row lock on PostgreSQL, a write lock taken at BEGIN plus a version
    check and retry on SQLite.
    """
    checked(hub_id, "Hub id")
    checked(reviewer, "reviewer")
    checked_optional(note, "note")
    target = EntryStatus.APPROVED.value if approve else EntryStatus.REJECTED.value
    owns_transaction = not session.in_transaction()
    for attempt in range(1, REVIEW_ATTEMPTS + 1):
        try:
            if owns_transaction and session.get_bind().dialect.name == "sqlite":
                session.connection(execution_options={SQLITE_BEGIN_OPTION: "IMMEDIATE"})
            return _review_once(session, hub_id=hub_id, target=target, reviewer=reviewer, note=note, override=override)
        except (_StaleEntry, OperationalError) as exc:
            if isinstance(exc, OperationalError) and not _is_sqlite_busy(exc):
                raise
            if not owns_transaction:
                raise ConcurrentUpdateError(f"{hub_id!r} changed during the review; retry it") from None
            session.rollback()
            logger.debug("review of %s lost a race (attempt %d), retrying", hub_id, attempt)
            time.sleep(0.01 * attempt)
    raise ConcurrentUpdateError(f"{hub_id!r} kept changing during {REVIEW_ATTEMPTS} review attempts; retry it")


BULK_NAMED = 5  # ids an error about many entries names before "and N more"


def review_entries(
    session: Session, *, hub_ids: Sequence[str], approve: bool, reviewer: str, note: str | None = None,
    override: bool = False,
) -> list[CatalogEntry]:
    """Approve or reject every entry of `hub_ids` as `reviewer` in the session's transaction; return them in
    Hub-id order.

    All or none: before anything changes, an unknown id raises EntryNotFoundError and (approving, without
    `override`) any entry the verifier rejected raises OverrideRequiredError, each naming every such id. Then
    each entry is reviewed as `review_entry` would, one audit row each; taking the row locks in Hub-id order
    keeps two concurrent bulk reviews from deadlocking on PostgreSQL.
    """
    checked(reviewer, "reviewer")
    checked_optional(note, "note")
    unique = sorted({checked(h, "Hub id").strip() for h in hub_ids})
    if session.get_bind().dialect.name == "sqlite" and not session.in_transaction():
        session.connection(execution_options={SQLITE_BEGIN_OPTION: "IMMEDIATE"})  # read and write under one lock
    found = {e.hub_id: e for e in session.exec(select(CatalogEntry).where(col(CatalogEntry.hub_id).in_(unique)))}
    missing = [h for h in unique if h not in found]
    if missing:
        raise EntryNotFoundError(f"no catalog entry for {_named(missing)}; nothing was reviewed")
    if approve and not override:
        overruled = [h for h in unique if found[h].verifier_decision == Decision.REJECT.value
                     and found[h].status != EntryStatus.APPROVED.value]
        if overruled:
            raise OverrideRequiredError(
                f"the verifier rejected {_named(overruled)}; approving them needs override; nothing was reviewed")
    return [review_entry(session, hub_id=h, approve=approve, reviewer=reviewer, note=note, override=override)
            for h in unique]


def _named(hub_ids: list[str]) -> str:
    more = len(hub_ids) - BULK_NAMED
    return ", ".join(repr(h) for h in hub_ids[:BULK_NAMED]) + (f" and {more} more" if more > 0 else "")


def _review_once(
    session: Session, *, hub_id: str, target: str, reviewer: str, note: str | None, override: bool
) -> CatalogEntry:
    entry = find_entry(session, hub_id.strip(), lock=True, refresh=True)
    if entry is None:
        raise EntryNotFoundError(f"no catalog entry for {hub_id.strip()!r}")
    previous = entry.status
    overruled = entry.verifier_decision == Decision.REJECT.value
    if target == EntryStatus.APPROVED.value and previous != target and overruled and not override:
        codes = ", ".join(sorted({r.get("code", "?") for r in entry.reasons if r.get("blocking")})) or "no reason given"
        raise OverrideRequiredError(f"the verifier rejected {entry.hub_id!r} ({codes}); approving it needs override")
    # A repeated decision with a new note (a reason added later) updates the entry's note and reviewer too: the
    # entry shows the note, not only the audit trail. Without a note the entry is left as it was.
    renoted = previous == target and note is not None and (note != entry.note or reviewer != entry.reviewer)
    if previous != target or renoted:
        result = session.execute(
            update(CatalogEntry)
            .where(col(CatalogEntry.id) == entry.id, col(CatalogEntry.version) == entry.version)
            .values(status=target, reviewer=reviewer, note=note, version=entry.version + 1, updated_at=utcnow())
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise _StaleEntry
        session.refresh(entry)
    record_audit(
        session, entity="entry", entity_id=entry.hub_id, action=target,  # "approved" | "rejected"
        from_status=previous, to_status=target, actor=reviewer, note=note,
        detail={"changed": previous != target, "override": override, "version": entry.version},
    )
    session.flush()
    return entry


def _is_sqlite_busy(exc: OperationalError) -> bool:
    return isinstance(exc.orig, sqlite3.OperationalError) and any(w in str(exc.orig) for w in ("locked", "busy"))
