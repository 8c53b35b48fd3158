"""Catalog routes: the filtered, paginated list; one entry with its evidence and history; approve and reject.

Hub ids keep their slash in paths (`/catalog/owner/name/approve`): owner and name are two path parameters,
documented with the Hub's pattern, and every id is validated with `core.types.parse_hub_id` (422 naming a
malformed one). Reviews go through `server.usecases.catalog` (the mirror's licences adopted first, as the
CLI does), then `store.review_entry`, which audits every call and is safe under concurrent calls; approving
what the verifier rejected answers 409 unless the body says `override: true`.
`POST /catalog/approve` and `/catalog/reject` decide many entries at once (the review page's bulk buttons),
all or none, one audit row per entry; `GET /catalog/counts` gives the counts per review status the page shows.
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, status
from sqlalchemy import Engine
from sqlmodel import Session

from core.measured_value import MeasuredValue
from core.settings import Settings
from core.types import HUB_PART_SCHEMA_PATTERN, Category, EntryStatus, MalformedHubIdError, parse_hub_id
from curation.catalog import store
from server.api.deps import EngineDep, SettingsDep, require_read_token, require_token
from server.api.preview import sample_preview
from server.api.schemas import (
    AuditOut,
    BulkReviewed,
    BulkReviewRequest,
    CandidateOut,
    EntryDetail,
    EntryOut,
    EntryPage,
    MeasuredOut,
    ReviewRequest,
    StatusCounts,
    VerdictOut,
)
from server.usecases.catalog import Reviewed, review, review_many

logger = logging.getLogger(__name__)
router = APIRouter(prefix="/catalog", tags=["catalog"])
NO_NUL = r"^[^\x00]*$"  # documents the store's refusal (a 422 naming the field): it cannot search a NUL
# Checked by `valid_hub_id` (a 422 that names the value); the pattern documents the same rules.
Owner = Annotated[str, Path(description="The Hub id's owner.", json_schema_extra={"pattern": HUB_PART_SCHEMA_PATTERN})]
Name = Annotated[str, Path(description="The Hub id's name.", json_schema_extra={"pattern": HUB_PART_SCHEMA_PATTERN})]


def valid_hub_id(hub_id: str) -> str:
    """Return the Hub id, or raise a 422 naming the malformed value."""
    try:
        return parse_hub_id(hub_id)
    except MalformedHubIdError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None


@router.get("", dependencies=[Depends(require_read_token)])
def list_catalog(
    engine: EngineDep,
    status_: Annotated[EntryStatus | None, Query(alias="status")] = None,
    category: Category | None = None,
    license: Annotated[str | None, Query(max_length=128, json_schema_extra={"pattern": NO_NUL})] = None,
    q: Annotated[str | None, Query(max_length=200, json_schema_extra={"pattern": NO_NUL},
                                   description="Text search in id, title, description.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
) -> EntryPage:
    """Return one page of catalog entries matching the filters, and the total count."""
    with store.open_session(engine) as session:
        entries, total = store.list_entries(
            session,
            status=status_.value if status_ else None,
            category=category.value if category else None,
            license=license or None,
            text=q or None,
            limit=limit,
            offset=offset,
        )
        measured = store.entry_values(session, hub_ids=[e.hub_id for e in entries],
                                      categories={e.hub_id: list(e.categories) for e in entries})
        items = [with_measured(EntryOut.model_validate(e), measured[e.hub_id]) for e in entries]
    return EntryPage(items=items, total=total, limit=limit, offset=offset)


def with_measured(entry: EntryOut, values: list[MeasuredValue]) -> EntryOut:
    """The entry with its measured values (`curation.catalog.measured.entry_values`)."""
    entry.measured = [MeasuredOut.of(v) for v in values]
    return entry


def counts_out(counts: dict[str, int]) -> StatusCounts:
    """Return the per-status counts with their total, as the API answers them."""
    return StatusCounts(total=sum(counts.values()), by_status=counts)


@router.get("/counts", dependencies=[Depends(require_read_token)])
def catalog_counts(engine: EngineDep) -> StatusCounts:
    """Return how many entries are pending review, approved and rejected (the review page's live counts)."""
    with store.open_session(engine, readonly=True) as session:
        return counts_out(store.status_counts(session))


def _bulk_review(engine: Engine, settings: Settings, body: BulkReviewRequest, *, approve: bool) -> BulkReviewed:
    hub_ids = []
    for hub_id in body.hub_ids:
        if valid_hub_id(hub_id) != hub_id:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"malformed Hub dataset id {hub_id!r}: "
                                "expected 'owner/name' without surrounding spaces")
        hub_ids.append(hub_id)

    def work(session: Session) -> BulkReviewed:
        reviewed = review_many(session=session, settings=settings, hub_ids=hub_ids, approve=approve,
                               reviewer=body.reviewer.strip(), note=body.note, override=body.override)
        _log_warning(reviewed)
        return BulkReviewed(entries=[EntryOut.model_validate(e) for e in reviewed.entries],
                            counts=counts_out(store.status_counts(session)))

    return store.run_transaction(engine, work, what="bulk review")


@router.post("/approve", dependencies=[Depends(require_token)])
def approve_entries(body: BulkReviewRequest, engine: EngineDep, settings: SettingsDep) -> BulkReviewed:
    """Approve many entries at once: all of them, one audit row each, or none (404 naming unknown ids, 409
    naming those the verifier rejected unless `override: true`)."""
    return _bulk_review(engine, settings, body, approve=True)


@router.post("/reject", dependencies=[Depends(require_token)])
def reject_entries(body: BulkReviewRequest, engine: EngineDep, settings: SettingsDep) -> BulkReviewed:
    """Reject many entries at once: all of them, one audit row each, or none (404 naming unknown ids)."""
    return _bulk_review(engine, settings, body, approve=False)


def _log_warning(reviewed: Reviewed) -> None:
    if reviewed.warning:
        logger.warning("%s", reviewed.warning)


def _review(engine: Engine, settings: Settings, hub_id: str, body: ReviewRequest, *, approve: bool) -> EntryOut:
    valid = valid_hub_id(hub_id)
    with store.open_session(engine) as session:
        reviewed = review(session=session, settings=settings, hub_id=valid, approve=approve,
                          reviewer=body.reviewer.strip(), note=body.note, override=body.override)
        _log_warning(reviewed)
        return EntryOut.model_validate(reviewed.entries[0])


@router.post("/{owner}/{name}/approve", dependencies=[Depends(require_token)])
def approve_entry(owner: Owner, name: Name, body: ReviewRequest, engine: EngineDep, settings: SettingsDep) -> EntryOut:
    """Approve an entry for the manifest (`override: true` needed when the verifier rejected it); the mirror's
    licences are adopted first, as `datahunt catalog approve` does."""
    return _review(engine, settings, f"{owner}/{name}", body, approve=True)


@router.post("/{owner}/{name}/reject", dependencies=[Depends(require_token)])
def reject_entry(owner: Owner, name: Name, body: ReviewRequest, engine: EngineDep, settings: SettingsDep) -> EntryOut:
    """Reject an entry; it stays in the catalog with the reviewer's note."""
    return _review(engine, settings, f"{owner}/{name}", body, approve=False)


@router.get("/{owner}/{name}", dependencies=[Depends(require_read_token)])
def get_catalog_entry(owner: Owner, name: Name, engine: EngineDep, settings: SettingsDep) -> EntryDetail:
    """Return an entry with its evidence (candidates), verdict history, audit trail and a sample preview."""
    valid = valid_hub_id(f"{owner}/{name}")
    with store.open_session(engine) as session:
        history = store.entry_history(session, hub_id=valid)
        found = history["entry"]
        measured = store.entry_values(session, hub_ids=[valid], categories={valid: list(found.categories)})
        detail = EntryDetail(
            entry=with_measured(EntryOut.model_validate(found), measured[valid]),
            candidates=[CandidateOut.model_validate(c) for c in history.get("candidates", [])],
            verdicts=[VerdictOut.model_validate(v) for v in history.get("verdicts", [])],
            audit=[AuditOut.model_validate(a) for a in history.get("audit", [])],
            preview=sample_preview(valid, settings.mirror),
        )
    return detail
