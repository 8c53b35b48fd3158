"""Reading the catalog's entries: a filtered page, one entry and its history, the approved and benchmark
entries a manifest pins, and the counts by review status and category. Keyword-only functions over a session,
re-exported by `curation.catalog.store` with the writes (`upsert_entry`, `upsert_entries`) beside them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, TypedDict

from sqlalchemy import func, or_
from sqlmodel import Session, col, select

from core.types import Category, EntryStatus, ReasonCode, VerdictLabel, label_verdict
from curation.catalog.campaigns import category_name, get_campaign
from curation.catalog.errors import EntryNotFoundError, InvalidValueError
from curation.catalog.models import AuditEvent, CandidateRecord, CatalogEntry, Verdict
from curation.catalog.review import find_entry
from curation.catalog.storable import checked

_ENTRY_STATUSES = {s.value for s in EntryStatus}


def list_entries(
    session: Session,
    *,
    status: str | None = None,
    category: str | None = None,
    license: str | None = None,
    text: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> tuple[list[CatalogEntry], int]:
    """Return one page of entries matching every filter given, and how many match in all.

    With `category`, only that category's entries, best first by its relevance; otherwise best first by the
    best relevance over all categories. Ties go by Hub id. `text` searches Hub id, title and description.
    """
    if limit < 0 or offset < 0:
        raise InvalidValueError("limit and offset must be non-negative")
    stmt = select(CatalogEntry)
    if status is not None:
        stmt = stmt.where(CatalogEntry.status == _entry_status(status))
    score = None
    if category is not None:
        score = col(CatalogEntry.relevance)[category_name(category)].as_float()
        stmt = stmt.where(score.is_not(None))
    if license:
        stmt = stmt.where(func.lower(col(CatalogEntry.license)) == checked(license, "license filter").strip().lower())
    if text:
        needle = checked(text, "search text").strip()
        stmt = stmt.where(
            or_(
                col(CatalogEntry.hub_id).icontains(needle, autoescape=True),
                col(CatalogEntry.title).icontains(needle, autoescape=True),
                col(CatalogEntry.description).icontains(needle, autoescape=True),
            )
        )
    total = session.exec(select(func.count()).select_from(stmt.subquery())).one()
    order = score.desc() if score is not None else col(CatalogEntry.best_relevance).desc()
    page = session.exec(stmt.order_by(order, col(CatalogEntry.hub_id)).offset(offset).limit(limit)).all()
    return list(page), int(total)


def get_entry(session: Session, *, hub_id: str) -> CatalogEntry:
    """Return the entry for `hub_id`, or raise EntryNotFoundError."""
    entry = find_entry(session, checked(hub_id, "Hub id").strip(), lock=False)
    if entry is None:
        raise EntryNotFoundError(f"no catalog entry for {hub_id.strip()!r}")
    return entry


class CatalogSummary(TypedDict):
    """The catalog's counts (`catalog_summary`): entries in all, per review status, and per category."""

    total: int
    by_status: dict[str, int]
    by_category: dict[str, dict[str, int]]  # category -> review status and verifier counts


def entry_history(session: Session, *, hub_id: str) -> dict[str, Any]:
    """Return `{"entry", "candidates", "verdicts", "audit"}` for `hub_id`: the entry and its rows, oldest first."""
    entry = get_entry(session, hub_id=hub_id)
    candidates = session.exec(
        select(CandidateRecord).where(CandidateRecord.hub_id == entry.hub_id).order_by(col(CandidateRecord.id))
    ).all()
    candidate_ids = [c.id for c in candidates]
    verdict_filter = or_(col(Verdict.hub_id) == entry.hub_id, col(Verdict.candidate_id).in_(candidate_ids))
    verdicts = session.exec(select(Verdict).where(verdict_filter).order_by(col(Verdict.id))).all()
    audit = session.exec(
        select(AuditEvent)
        .where(AuditEvent.entity == "entry", AuditEvent.entity_id == entry.hub_id)
        .order_by(col(AuditEvent.id))
    ).all()
    return {"entry": entry, "candidates": list(candidates), "verdicts": list(verdicts), "audit": list(audit)}


def approved_entries(session: Session) -> list[CatalogEntry]:
    """Return every approved entry, by Hub id (what a manifest export pins)."""
    stmt = (select(CatalogEntry).where(CatalogEntry.status == EntryStatus.APPROVED.value)
            .order_by(col(CatalogEntry.hub_id)))
    return list(session.exec(stmt).all())


def benchmark_entries(session: Session) -> list[CatalogEntry]:
    """Return the entries the verifier recognised as evaluation benchmarks (reason `benchmark`) that no reviewer
    rejected, by Hub id: the manifest offers them as decontamination `eval_sets`."""
    stmt = (select(CatalogEntry).where(CatalogEntry.status != EntryStatus.REJECTED.value)
            .order_by(col(CatalogEntry.hub_id)))
    return [e for e in session.exec(stmt).all() if any(r.get("code") == ReasonCode.BENCHMARK for r in e.reasons)]


def status_counts(session: Session) -> dict[str, int]:
    """Return how many entries the catalog holds in each review status (every status, zeros included)."""
    counts = dict.fromkeys((s.value for s in EntryStatus), 0)
    rows = session.exec(select(CatalogEntry.status, func.count()).group_by(col(CatalogEntry.status))).all()
    counts.update({status: int(n) for status, n in rows})
    return counts


def catalog_summary(session: Session, *, campaign_id: str | None = None) -> CatalogSummary:
    """Return counts: `{"total", "by_status", "by_category": {category: {total, pending_review, approved,
    rejected, verifier_accepted, verifier_unverified, verifier_flagged, verifier_eval_sets, verifier_rejected}}}`,
    over the whole catalog or the entries one campaign found. The verifier counts use each entry's verdict for
    that category, labelled by `core.types.label_verdict` exactly as the campaign table labels candidates."""
    stmt = select(CatalogEntry)
    if campaign_id is not None:
        get_campaign(session, campaign_id=campaign_id)
        found = select(CandidateRecord.hub_id).where(CandidateRecord.campaign_id == campaign_id)
        stmt = stmt.where(col(CatalogEntry.hub_id).in_(found))
    entries = session.exec(stmt).all()
    by_status: Counter[str] = Counter({s.value: 0 for s in EntryStatus})
    by_category: dict[str, dict[str, int]] = {c.value: _empty_counts() for c in Category}
    for entry in entries:
        by_status[entry.status] += 1
        for category in entry.categories:
            counts = by_category.setdefault(category, _empty_counts())
            counts["total"] += 1
            counts[entry.status] = counts.get(entry.status, 0) + 1
            # The verifier's view for this category, counted as the campaign table counts its candidates.
            label = label_verdict([r for r in entry.reasons if r.get("category") == category])
            for key in _VERIFIER_COUNTS[label]:
                counts[key] += 1
    return CatalogSummary(total=len(entries), by_status=dict(by_status), by_category=by_category)

# Which verifier counts of `catalog_summary` a verdict label adds to (the campaign table's accepted / unverified /
# flagged / eval_sets / rejected columns).
_VERIFIER_COUNTS = {
    VerdictLabel.ACCEPTED: ("verifier_accepted",),
    VerdictLabel.UNVERIFIED: ("verifier_accepted", "verifier_unverified"),
    VerdictLabel.FLAGGED: ("verifier_accepted", "verifier_flagged"),
    VerdictLabel.EVAL_SET: ("verifier_rejected", "verifier_eval_sets"),
    VerdictLabel.REJECTED: ("verifier_rejected",),
}


def _empty_counts() -> dict[str, int]:
    verifier = ("verifier_accepted", "verifier_unverified", "verifier_flagged", "verifier_eval_sets",
                "verifier_rejected")
    return {"total": 0, **{s.value: 0 for s in EntryStatus}, **dict.fromkeys(verifier, 0)}


def _entry_status(value: str) -> str:
    if value not in _ENTRY_STATUSES:
        raise InvalidValueError(f"unknown entry status {value!r}; known: {', '.join(sorted(_ENTRY_STATUSES))}")
    return value
