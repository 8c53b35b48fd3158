"""Progress events a running campaign emits, so the CLI's live table and the service can follow it.

Events are plain pydantic models handed to an `on_event` callback the caller supplies; they are never stored
(the catalog's run rows and audit rows are the record). A callback that raises is logged and ignored: a broken
display must not fail a campaign.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

logger = logging.getLogger(__name__)

EventKind = Literal["campaign_started", "run_started", "run_finished", "campaign_finished"]


def _now() -> datetime:
    return datetime.now(UTC)


class CampaignEvent(BaseModel):
    """One step of a campaign: it started, a category's run started or finished, or it finished."""

    campaign_id: str
    kind: EventKind
    category: str | None = None
    status: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)
    at: datetime = Field(default_factory=_now)


EventCallback = Callable[[CampaignEvent], None]


def emit(on_event: EventCallback | None, event: CampaignEvent) -> None:
    """Hand `event` to `on_event` when there is one; log (never raise) when the callback fails."""
    if on_event is None:
        return
    try:
        on_event(event)
    except Exception:  # a display bug must not end a campaign; it is logged with its traceback
        logger.exception("campaign event callback failed on %s event", event.kind)
