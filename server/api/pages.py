"""The review page: the catalog as a filterable table grouped by category, campaign status, export.

Server-rendered with Jinja2; filters, pages (`page`, `size`) and the campaign picker are plain GET forms so the
page works without JavaScript, and a small script (`static/review.js`) sends approve/reject (one row, or the
rows ticked, in one bulk call)/re-run/export calls with the API token, which the page asks for once and keeps
in the tab's sessionStorage, and keeps the counts per review status current after each decision. Each row
shows its description, the verdict and reasons of the category viewed first (the filter's, else its best),
every distinct verifier reason once under the categories that gave it (`server.api.verdict_view`), its risks
(licence, size, format) as badges and its search hits as "found by N queries, best rank R". Each dataset has
its own page (`server.api.dataset_page`); a badge marks the datasets a local mirror holds. When reads require
the token, a visitor without a session gets the login page instead (401), whose script (`static/login.js`)
posts the token to `/session` once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypedDict

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from core.measured_value import MeasuredValue, describe_value
from core.types import Category, EntryStatus, UnknownCategoryError, parse_category
from curation.catalog import store
from curation.catalog.models import CatalogEntry
from server.api.campaigns import ManagerDep, campaign_out
from server.api.deps import EngineDep, SettingsDep, read_authorised
from server.api.preview import mirrored_ids
from server.api.verdict_view import (
    EvidenceSummary,
    ReasonGroup,
    category_verdict,
    evidence_summary,
    reason_groups,
    split_current,
)
from server.manifest_builder import best_category

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).resolve().parent.parent / "templates")

PAGE_SIZE = 50
PAGE_SIZES = (25, 50, 100, 200)  # offered by the page; any size from 1 to MAX_PAGE_SIZE is served
MAX_PAGE_SIZE = 500
CAMPAIGNS_LISTED = 20  # in the campaign picker, newest first


def size_text(metadata: dict[str, Any]) -> str:
    """Return the best known size of a dataset as short text ('12,000 rows', '10K<n<100K', '?')."""
    if metadata.get("num_rows"):
        return f"{int(metadata['num_rows']):,} rows"
    return str(metadata.get("size_category") or metadata.get("size_stated") or "?")


class ReviewRow(TypedDict):
    """One entry's row on the review page: the entry, its group, size text, its search hits summed up, the
    verdict and reasons of the category viewed first, and the risks a reviewer weighs as badges."""

    entry: CatalogEntry
    group: str
    size: str
    evidence: EvidenceSummary
    needs_override: bool
    viewed: str  # the category whose verdict the row leads with: the filter's, else the entry's best
    verdict: str  # the verifier's verdict for `viewed`: accept or reject
    reason_groups: list[ReasonGroup]
    risks: list[str]  # badges of size and format risks (the licence has its own)
    measured: list[MeasuredBadge]  # measured_badge.html: its source's and categories' measured values


class MeasuredBadge(TypedDict):
    """One measured value as its badge shows it: the line, the per-set detail (title), and its tone (CSS)."""

    text: str
    detail: str
    tone: str  # up | down | unclear: the sign, where the interval excludes zero


def measured_badge(value: MeasuredValue) -> MeasuredBadge:
    """The badge of one measured value of an entry's source (or, named so, of one of its categories)."""
    text = describe_value(value)
    _, shown = value.headline()
    sets = "; ".join(f"{name} {est.per_10k:+.2f}" for name, est in sorted(value.per_set.items()))
    return {"text": text if value.kind == "source" else f"category {value.name}: {text}",
            "detail": f"AL per 10K rows by eval set: {sets or '-'}; {value.seeds} seed(s) at {value.budget:,} rows, "
                      f"{value.op} {value.rows_swapped:,.0f} rows; {value.run}",
            "tone": ("up" if shown.per_10k > 0 else "down") if shown.clear else "unclear"}


def risk_badges(entry: CatalogEntry, size: str) -> list[str]:
    """The size and format risks of a row as short badges (the licence has its own badge): a size too small or
    unknown, a format unknown or without text."""
    codes = {str(r.get("code")) for r in entry.reasons}
    risks: list[str] = []
    if "too_small" in codes:
        risks.append("too small")
    elif size == "?":
        risks.append("size unknown")
    if "no_text_fields" in codes:
        risks.append("no text fields")
    elif not entry.format_guess or entry.format_guess == "unknown":
        risks.append("format unknown")
    return risks


def _row(session: Any, entry: CatalogEntry, category: Category | None) -> ReviewRow:
    history = store.entry_history(session, hub_id=entry.hub_id)
    # The search hits of each category's latest find: what a later campaign found again is not listed twice.
    current, _ = split_current([{"category": c.category, "evidence": c.evidence} for c in history["candidates"]])
    evidence = [item for candidate in current for item in candidate["evidence"]]
    best = best_category(entry)
    kept, _ = entry.ranked_categories()  # most relevant first, those found off-topic left out
    viewed = category.value if category else kept[0] if kept else best.value if best else ""
    size = size_text(entry.dataset_metadata)
    return {
        "entry": entry,
        "group": best.value if best else "uncategorised",
        "size": size,
        "evidence": evidence_summary(evidence),
        "needs_override": entry.verifier_decision == "reject",
        "viewed": viewed,
        "verdict": category_verdict(entry.reasons, viewed) if viewed else entry.verifier_decision or "",
        "reason_groups": reason_groups(entry.reasons, entry.categories, viewed=viewed or None),
        "risks": risk_badges(entry, size),
        "measured": [measured_badge(v) for v in store.entry_values(
            session, hub_ids=[entry.hub_id], categories={entry.hub_id: list(entry.categories)})[entry.hub_id]],
    }


def _filters(status_: str | None, category_: str | None) -> tuple[EntryStatus | None, Category | None, str | None]:
    """Return the status and category filters, or the error to show for one that names nothing."""
    status = category = None
    try:
        category = parse_category(category_) if category_ else None
    except UnknownCategoryError as exc:
        return None, None, str(exc)
    if status_:
        if status_ not in EntryStatus._value2member_map_:
            return None, None, f"unknown status {status_!r}; known: {', '.join(s.value for s in EntryStatus)}"
        status = EntryStatus(status_)
    return status, category, None


@router.get("/", response_class=HTMLResponse)
def review_page(
    request: Request,
    engine: EngineDep,
    manager: ManagerDep,
    settings: SettingsDep,
    status_: Annotated[str | None, Query(alias="status", max_length=32)] = None,
    category_: Annotated[str | None, Query(alias="category", max_length=64)] = None,
    license: Annotated[str | None, Query(max_length=128)] = None,
    q: Annotated[str | None, Query(max_length=200)] = None,
    page: Annotated[int, Query(ge=1, le=10**6)] = 1,
    size: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = PAGE_SIZE,
    campaign_id: Annotated[str | None, Query(alias="campaign", max_length=64)] = None,
) -> HTMLResponse:
    """Render the review page for the filters in the query string (an unknown filter is a 400 saying so), or
    the login page when reads need the token and the visitor has no session."""
    if not read_authorised(settings, request):
        return templates.TemplateResponse(request, "login.html", {}, status_code=401)
    status, category, error = _filters(status_, category_)
    order = [c.value for c in Category]
    groups: dict[str, list[ReviewRow]] = {}
    total = 0
    with store.open_session(engine) as session:
        if error is None:
            entries, total = store.list_entries(
                session,
                status=status.value if status else None,
                category=category.value if category else None,
                license=license or None,
                text=q or None,
                limit=size,
                offset=(page - 1) * size,
            )
            for entry in entries:
                row = _row(session, entry, category)
                groups.setdefault(category.value if category else row["group"], []).append(row)
        recent = store.list_campaigns(session, limit=CAMPAIGNS_LISTED)
        chosen = campaign_id or (recent[0].id if recent else None)
        campaign = campaign_out(session, chosen, manager) if chosen else None
        counts = store.status_counts(session)
    ordered = sorted(groups.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))
    filters = {"status": status.value if status else "", "category": category.value if category else "",
               "license": license or "", "q": q or ""}
    context = {
        "groups": ordered,
        "total": total,
        "page": page,
        "pages": max(1, -(-total // size)),
        "size": size,
        "sizes": sorted({*PAGE_SIZES, size}),
        "first": (page - 1) * size + 1,
        "filters": filters,
        "categories": [c.value for c in Category],
        "statuses": [s.value for s in EntryStatus],
        "campaign": campaign,
        "campaigns": [{"id": c.id, "status": c.status, "created": c.created_at} for c in recent],
        "counts": counts,
        "mirrored": mirrored_ids(settings.mirror),
        "error": error,
    }
    return templates.TemplateResponse(request, "review.html", context, status_code=400 if error else 200)
