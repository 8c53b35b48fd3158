"""The review page: the catalog as a filterable table grouped by category, campaign status, export.

Server-rendered with Jinja2; filters are a plain GET form so the page works without JavaScript, and a small
script (`static/review.js`) sends approve/reject/re-run/export calls with the API token, which the page asks
for once and keeps in the tab's sessionStorage. When reads require the token, a visitor without a session
gets the login page instead (401), whose script (`static/login.js`) posts the token to `/session` once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from core.types import Category, EntryStatus
from curation.catalog import store
from curation.catalog.models import CatalogEntry
from server.api.campaigns import ManagerDep, campaign_out
from server.api.deps import EngineDep, SettingsDep, read_authorised
from server.manifest_builder import best_category

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).resolve().parent.parent / "templates")

PAGE_SIZE = 100
EVIDENCE_SHOWN = 3


def size_text(metadata: dict[str, Any]) -> str:
    """Return the best known size of a dataset as short text ('12,000 rows', '10K<n<100K', '?')."""
    if metadata.get("num_rows"):
        return f"{int(metadata['num_rows']):,} rows"
    return str(metadata.get("size_category") or metadata.get("size_stated") or "?")


def _row(session: Any, entry: CatalogEntry) -> dict[str, Any]:
    history = store.entry_history(session, hub_id=entry.hub_id)
    evidence: list[dict[str, Any]] = []
    for candidate in history.get("candidates", []):
        items = candidate.get("evidence", []) if isinstance(candidate, dict) else candidate.evidence
        evidence.extend(items)
    category = best_category(entry)
    return {
        "entry": entry,
        "group": category.value if category else "uncategorised",
        "size": size_text(entry.dataset_metadata),
        "evidence": evidence[:EVIDENCE_SHOWN],
        "evidence_more": max(0, len(evidence) - EVIDENCE_SHOWN),
        "needs_override": entry.verifier_decision == "reject",
    }


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
) -> HTMLResponse:
    """Render the review page for the filters in the query string (an empty or unknown filter means any), or
    the login page when reads need the token and the visitor has no session."""
    if not read_authorised(settings, request):
        return templates.TemplateResponse(request, "login.html", {}, status_code=401)
    status = EntryStatus(status_) if status_ and status_ in EntryStatus._value2member_map_ else None
    category = Category(category_) if category_ and category_ in Category._value2member_map_ else None
    order = [c.value for c in Category]
    with store.open_session(engine) as session:
        entries, total = store.list_entries(
            session,
            status=status.value if status else None,
            category=category.value if category else None,
            license=license or None,
            text=q or None,
            limit=PAGE_SIZE,
            offset=(page - 1) * PAGE_SIZE,
        )
        groups: dict[str, list[dict[str, Any]]] = {}
        for entry in entries:
            row = _row(session, entry)
            groups.setdefault(category.value if category else row["group"], []).append(row)
        latest = store.list_campaigns(session, limit=1)
        campaign = campaign_out(session, latest[0].id, manager) if latest else None
        summary = store.catalog_summary(session)
    ordered = sorted(groups.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))
    filters = {"status": status.value if status else "", "category": category.value if category else "",
               "license": license or "", "q": q or ""}
    context = {
        "groups": ordered,
        "total": total,
        "page": page,
        "pages": max(1, -(-total // PAGE_SIZE)),
        "filters": filters,
        "categories": [c.value for c in Category],
        "statuses": [s.value for s in EntryStatus],
        "campaign": campaign,
        "summary": summary,
    }
    return templates.TemplateResponse(request, "review.html", context)
