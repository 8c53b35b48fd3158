"""Which search backends a campaign uses: the Hub, the web and the offline index, or the offline index alone.

Online, all three run (the offline index still contributes its curated snapshot). With `DATAHUNT_OFFLINE=1`,
with huggingface_hub in its own offline mode, or when a cheap probe of the Hub API does not answer within a
few seconds, the campaign uses the offline index alone and the returned notes say so, so no deliverable
silently pretends to have searched the Hub.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import httpx

from agents.search.base import SearchBackend
from agents.search.hub import HubSearch
from agents.search.offline import OfflineIndex
from agents.search.web import WebSearch
from core.settings import Settings

logger = logging.getLogger(__name__)

PROBE_URL = "https://huggingface.co/api/datasets?limit=1"
PROBE_TIMEOUT_S = 3.0


def probe_hub(
    url: str = PROBE_URL, *, timeout_s: float = PROBE_TIMEOUT_S, transport: httpx.BaseTransport | None = None
) -> str | None:
    """Return None when the Hub API answers, else a short reason why it is unreachable."""
    try:
        with httpx.Client(timeout=timeout_s, transport=transport) as client:
            response = client.get(url)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if response.status_code >= 500:
        return f"HTTP {response.status_code}"
    return None


def hub_offline_mode() -> bool:
    """True when huggingface_hub itself is in offline mode (its own `HF_HUB_OFFLINE` setting)."""
    from huggingface_hub import constants

    return bool(constants.is_offline_mode())


def default_backends(
    settings: Settings, *, probe: Callable[[], str | None] = probe_hub
) -> tuple[list[SearchBackend], list[str]]:
    """Return the backends to search with and notes to record in every deliverable."""
    offline = OfflineIndex.default()
    offline.encoder()  # load the query encoder now, so the notes say which retrieval the index really uses
    retrieval = f"offline index retrieval: {offline.retrieval}"
    if settings.offline:
        return [offline], ["offline mode (DATAHUNT_OFFLINE): searched the embedded offline index alone", retrieval]
    if hub_offline_mode():
        return [offline], [
            "huggingface_hub offline mode (HF_HUB_OFFLINE): searched the embedded offline index alone", retrieval
        ]
    problem = probe()
    if problem is not None:
        logger.warning("Hub unreachable (%s); using the offline index alone", problem)
        return [offline], [f"Hub unreachable ({problem}): searched the embedded offline index alone", retrieval]
    token = settings.hf_token.get_secret_value() if settings.hf_token else None
    hub = HubSearch(timeout_s=settings.search_timeout_s, token=token)
    web = WebSearch(timeout_s=min(settings.search_timeout_s, 10.0))
    return [hub, web, offline], [retrieval]
