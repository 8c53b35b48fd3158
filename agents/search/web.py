"""The web backend: DuckDuckGo-style web search through `ddgs`, keeping results that point at Hub datasets.

A web query is sent as `<query> site:huggingface.co/datasets`; each result URL of the form
`huggingface.co/datasets/<owner>/<name>[/viewer|/tree/…|?…]` yields a Hub id, other URLs are ignored. `ddgs`
is blocking, so calls run in a small bounded thread pool under a timeout. ddgs reports "no results" as an
exception; that becomes an empty answer, rate limits and timeouts become `TransientSearchError`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from functools import partial
from typing import Any
from urllib.parse import unquote, urlsplit

from agents.search.base import SearchError, SearchHit, TransientSearchError
from agents.search.blocking import BlockingRunner
from agents.search.terms import split_filters
from core.candidates import BackendName, DatasetMetadata
from core.types import is_hub_id

logger = logging.getLogger(__name__)

SITE_FILTER = "site:huggingface.co/datasets"
# Path segments after /datasets/ that are Hub pages, not an owner name.
_NOT_OWNERS = {"viewer", "tree", "blob", "resolve", "discussions", "commits", "edit"}
_NO_RESULTS = re.compile(r"no results", re.IGNORECASE)


def hub_id_from_url(url: str) -> str | None:
    """Return the `owner/name` dataset id a huggingface.co URL points at, or None for any other URL."""
    text = url.strip()
    if "://" not in text:
        text = "https://" + text
    try:
        parts = urlsplit(text)
    except ValueError:
        return None
    host = (parts.hostname or "").lower()
    if host not in {"huggingface.co", "www.huggingface.co", "hf.co"}:
        return None
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if len(segments) < 3 or segments[0] != "datasets" or segments[1].lower() in _NOT_OWNERS:
        return None
    candidate = f"{segments[1]}/{segments[2]}"
    return candidate if is_hub_id(candidate) else None


class WebSearch:
    """Search backend on web search results (ddgs), filtered to Hub dataset pages."""

    name: BackendName = "web"

    def __init__(
        self,
        ddgs_factory: Callable[[], Any] | None = None,
        *,
        timeout_s: float = 5.0,
        max_concurrency: int = 4,
    ) -> None:
        if ddgs_factory is None:

            def ddgs_factory() -> Any:
                from ddgs import DDGS

                return DDGS(timeout=int(max(1, timeout_s)))

        self._factory = ddgs_factory
        self.timeout_s = timeout_s
        self._runner = BlockingRunner(max_concurrency, "web-search")

    async def search(self, query: str, *, limit: int = 20) -> list[SearchHit]:
        """Return up to `limit` Hub datasets found in web results for `query`, in result order."""
        text = f"{split_filters(query)[0]} {SITE_FILTER}".strip()
        try:
            results = await self._runner.run(
                partial(_text_search, self._factory, text, max(limit * 2, 10)), self.timeout_s * 2
            )
        except TimeoutError:
            raise TransientSearchError(f"web: no answer within {self.timeout_s * 2:g}s") from None
        hits: list[SearchHit] = []
        seen: set[str] = set()
        for result in results:
            if not isinstance(result, dict):
                continue
            url = str(result.get("href") or result.get("url") or "")
            hub_id = hub_id_from_url(url)
            if hub_id is None or hub_id.lower() in seen:
                continue
            seen.add(hub_id.lower())
            rank = len(hits) + 1
            hits.append(
                SearchHit(
                    hub_id=hub_id,
                    title=str(result.get("title") or hub_id),
                    description=" ".join(str(result.get("body") or "").split()),
                    backend=self.name,
                    query=query,
                    rank=rank,
                    score=round(1.0 / rank, 4),
                    url=url,
                )
            )
            if len(hits) >= limit:
                break
        return hits

    async def lookup(self, hub_id: str) -> DatasetMetadata | None:
        """Web search cannot vouch for existence: always None (the Hub or offline index answers that)."""
        return None


def _text_search(factory: Callable[[], Any], text: str, max_results: int) -> list[Any]:
    from ddgs.exceptions import DDGSException, RatelimitException, TimeoutException

    try:
        return list(factory().text(text, max_results=max_results) or [])
    except RatelimitException as exc:
        raise TransientSearchError(f"web: rate limited ({exc})") from None
    except TimeoutException as exc:
        raise TransientSearchError(f"web: timed out ({exc})") from None
    except DDGSException as exc:
        if _NO_RESULTS.search(str(exc)):
            return []
        raise SearchError(f"web: {exc}") from None
    except (OSError, ValueError) as exc:
        raise TransientSearchError(f"web: {type(exc).__name__}: {exc}") from None
