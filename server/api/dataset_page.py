"""One dataset's review page: evidence, the verifier's verdict per category, the audit trail, a mirror preview.

`GET /datasets/{owner}/{name}` renders for a person what `GET /catalog/{owner}/{name}` returns as JSON: the
entry and its review buttons (the same `static/review.js` sends them), the latest verdict of each category whose
subagent proposed it and the search hits of that find, every status change, and the first rows of its local
mirror copy as a table, one column per field. What earlier campaigns (or re-runs) said and found is there too,
folded away as history (`server.api.verdict_view.split_current`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from curation.catalog import store
from server.api.catalog import valid_hub_id
from server.api.deps import EngineDep, SettingsDep, require_read_token
from server.api.pages import size_text
from server.api.preview import sample_preview
from server.api.verdict_view import split_current

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).resolve().parent.parent / "templates")

PREVIEW_COLUMNS = 8
CELL_CHARS = 300


def _cell(value: Any) -> str:
    """Return one preview value as text: strings as they are, anything else as compact JSON, clipped."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS] + "…"


class PreviewTable(TypedDict):
    """The preview's table: its column names and each row's cells as text."""

    columns: list[str]
    rows: list[list[str]]


def preview_table(rows: list[Any]) -> PreviewTable:
    """Return `{columns, rows}` for the preview rows: the first PREVIEW_COLUMNS fields seen, cells as text."""
    columns: list[str] = []
    for row in rows:
        for key in row if isinstance(row, dict) else ["value"]:
            if key not in columns:
                columns.append(str(key))
    columns = columns[:PREVIEW_COLUMNS]
    cells = [[_cell(row.get(c, "")) if isinstance(row, dict) else _cell(row) for c in columns] for row in rows]
    return {"columns": columns, "rows": cells}


def _verdicts(history: dict[str, Any]) -> list[dict[str, Any]]:
    category_of = {c.id: c.category for c in history["candidates"]}
    return [
        {"at": v.created_at, "campaign": v.campaign_id, "decision": v.decision, "reasons": _distinct(v.reasons),
         "category": category_of.get(v.candidate_id, "—")}
        for v in history["verdicts"]
    ]


def _distinct(reasons: list[Any]) -> list[Any]:
    seen: set[tuple[str, str, bool]] = set()
    out = []
    for r in reasons:
        key = (str(r.get("code")), str(r.get("detail") or ""), bool(r.get("blocking")))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def _evidence(history: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per search hit, each with its category and campaign; each find's hits together, oldest first."""
    return [
        {**item, "category": c.category, "campaign": c.campaign_id, "find": c.id}
        for c in history["candidates"]
        for item in c.evidence
    ]


@router.get("/datasets/{hub_id:path}", response_class=HTMLResponse, dependencies=[Depends(require_read_token)])
def dataset_page(hub_id: str, request: Request, engine: EngineDep, settings: SettingsDep) -> HTMLResponse:
    """Render one catalog entry for a reviewer (404 for an unknown id, 422 for a malformed one)."""
    valid = valid_hub_id(hub_id)
    with store.open_session(engine) as session:
        history = store.entry_history(session, hub_id=valid)
        entry = history["entry"]
        verdicts, older_verdicts = split_current(_verdicts(history))
        finds, _ = split_current([{"category": c.category, "id": c.id} for c in history["candidates"]])
        current_finds = {f["id"] for f in finds}
        evidence = _evidence(history)
        context = {
            "e": entry,
            "size": size_text(entry.dataset_metadata),
            "evidence": [ev for ev in evidence if ev["find"] in current_finds],
            "older_evidence": [ev for ev in evidence if ev["find"] not in current_finds],
            "verdicts": verdicts,
            "older_verdicts": older_verdicts,
            "campaigns_before": sorted({str(v["campaign"]) for v in older_verdicts}),
            "audit": history["audit"],
            "needs_override": entry.verifier_decision == "reject",
        }
    preview = sample_preview(valid, settings.mirror)
    context["preview"] = {**preview, "table": preview_table(preview["rows"])}
    return templates.TemplateResponse(request, "dataset.html", context)
