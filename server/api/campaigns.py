"""Campaign routes: launch, list, inspect, stream progress (Server-Sent Events), re-run one category.

`POST /campaigns` answers 202 as soon as the campaign row exists (status `pending`); the graph runs as a
background task of this process. `GET /campaigns/{id}/events` streams the graph's events as they happen and
falls back to polling the catalog, so a client connected to another replica, or after a restart, still sees
the status.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, status
from fastapi.responses import StreamingResponse
from sqlalchemy import Engine

from core.types import FINAL_CAMPAIGN_STATUSES, CampaignStatus, Category, UnknownCategoryError, parse_category
from curation.catalog import store
from graph.campaign import CampaignBusyError
from server.api.campaign_tasks import CampaignManager
from server.api.deps import EngineDep, get_engine, require_read_token, require_token
from server.api.schemas import CampaignAccepted, CampaignCreate, CampaignOut, RunOut

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/campaigns", tags=["campaigns"])

def get_manager(request: Request) -> CampaignManager:
    """Return the app's campaign manager."""
    manager: CampaignManager = request.app.state.campaigns
    return manager


ManagerDep = Annotated[CampaignManager, Depends(get_manager)]
# Documented as the ten names; read as `parse_category` reads them (case and dashes forgiven, a 422 with the
# closest name otherwise), as a body or a query's category is.
CategoryPath = Annotated[str, Path(description="One of the ten categories.",
                                   json_schema_extra={"enum": [c.value for c in Category]})]


def campaign_out(session: Any, campaign_id: str, manager: CampaignManager) -> CampaignOut:
    """Return the campaign with its latest run per category and run counts by status."""
    campaign = store.get_campaign(session, campaign_id=campaign_id)
    runs = store.list_runs(session, campaign_id=campaign_id, latest_only=True)
    out = CampaignOut.model_validate(campaign)
    out.runs = [RunOut.model_validate(r) for r in sorted(runs, key=lambda r: r.category)]
    out.counts = dict(Counter(r.status for r in runs))
    out.active = manager.is_active(campaign_id)
    return out


@router.post("", status_code=status.HTTP_202_ACCEPTED, dependencies=[Depends(require_token)])
async def create_campaign(body: CampaignCreate, manager: ManagerDep) -> CampaignAccepted:
    """Start a campaign in the background and return its id and status at once."""
    campaign_id = await manager.launch(categories=body.categories or None, offline=body.offline)
    return CampaignAccepted(id=campaign_id, status=CampaignStatus.PENDING)


@router.get("", dependencies=[Depends(require_read_token)])
def list_campaigns(
    engine: EngineDep,
    manager: ManagerDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
) -> list[CampaignOut]:
    """Return campaigns, newest first, each with its per-category runs."""
    with store.open_session(engine) as session:
        campaigns = store.list_campaigns(session, limit=limit, offset=offset)
        return [campaign_out(session, c.id, manager) for c in campaigns]


@router.get("/{campaign_id}", dependencies=[Depends(require_read_token)])
def get_campaign(campaign_id: str, engine: EngineDep, manager: ManagerDep) -> CampaignOut:
    """Return one campaign with per-subagent status, counts and errors."""
    with store.open_session(engine) as session:
        return campaign_out(session, campaign_id, manager)


@router.post(
    "/{campaign_id}/subagents/{category}/rerun",
    status_code=status.HTTP_202_ACCEPTED,
    dependencies=[Depends(require_token)],
)
async def rerun_subagent(
    campaign_id: str, category: CategoryPath, manager: ManagerDep, engine: Annotated[Engine, Depends(get_engine)]
) -> CampaignAccepted:
    """Re-run exactly one category of a campaign in the background; the other categories stay as they are."""
    try:
        cat = parse_category(category)
    except UnknownCategoryError as exc:  # a value that can never name a category: 422, as in a body or query
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None
    campaign_categories = await asyncio.to_thread(_categories_of, engine, campaign_id)
    if cat.value not in campaign_categories:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"campaign {campaign_id} has no category {cat.value!r}")
    try:
        await manager.rerun(campaign_id=campaign_id, category=cat)
    except CampaignBusyError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    return CampaignAccepted(id=campaign_id, status=CampaignStatus.PENDING, category=cat.value)


def _categories_of(engine: Engine, campaign_id: str) -> list[str]:
    with store.open_session(engine) as session:  # CampaignNotFoundError becomes a 404 in the app
        return list(store.get_campaign(session, campaign_id=campaign_id).categories)


def _sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n"


def _poll(engine: Engine, campaign_id: str, manager: CampaignManager) -> dict[str, Any]:
    with store.open_session(engine) as session:
        return campaign_out(session, campaign_id, manager).model_dump(mode="json")


@router.get(
    "/{campaign_id}/events",
    dependencies=[Depends(require_read_token)],
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events"}},
)
async def campaign_events(
    campaign_id: str, request: Request, manager: ManagerDep, engine: Annotated[Engine, Depends(get_engine)]
) -> StreamingResponse:
    """Stream progress as Server-Sent Events: `snapshot`, the graph's events, `status` polls, then `end`."""
    first = await asyncio.to_thread(_poll, engine, campaign_id, manager)  # 404 before the stream starts
    poll_s: float = getattr(request.app.state, "event_poll_s", 1.0)

    async def stream() -> AsyncIterator[str]:
        queue = manager.subscribe(campaign_id)
        try:
            yield _sse("snapshot", first)
            last = (first["status"], first["counts"])
            while not await request.is_disconnected():
                try:
                    event = await asyncio.wait_for(queue.get(), timeout=poll_s)
                    yield _sse(event.kind, event.model_dump(mode="json"))
                    continue
                except TimeoutError:
                    pass
                current = await asyncio.to_thread(_poll, engine, campaign_id, manager)
                if (current["status"], current["counts"]) != last:
                    last = (current["status"], current["counts"])
                    yield _sse("status", current)
                if current["status"] in FINAL_CAMPAIGN_STATUSES and not current["active"] and queue.empty():
                    yield _sse("end", current)
                    return
        finally:
            manager.unsubscribe(campaign_id, queue)

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
