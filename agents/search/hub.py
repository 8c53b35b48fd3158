"""The Hugging Face Hub backend: `HfApi.list_datasets` for search, `HfApi.dataset_info` for lookups.

The Hub's `search=` matches substrings of repo ids only, so a spaced query is sent as id-style variants
(`code review` → `code-review`, `code_review`, `codereview`) and their results are merged, best (most
downloaded) first. Tag filters written into the query (`task_categories:text-generation`) go to `filter=`.
Calls run in a bounded thread pool, each under a timeout (a campaign fans out many searches at once), and
successful listings are remembered per instance, since categories share id variants. Errors are mapped onto
the search error tree: 429, 5xx, timeouts and connection errors are transient; offline mode is
`BackendUnavailableError`; any other HTTP error is a plain `SearchError`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from agents.search.base import BackendUnavailableError, SearchError, SearchHit, TransientSearchError
from agents.search.blocking import BlockingRunner
from agents.search.terms import STOPWORDS, split_filters
from core.candidates import BackendName, DatasetMetadata
from core.types import is_hub_id

logger = logging.getLogger(__name__)

EXPAND: list[Any] = ["cardData", "tags", "downloads", "likes", "gated", "description", "sha", "lastModified"]
MAX_VARIANTS = 3  # hyphen, underscore and glued spellings; more adds load, rarely new ids
T = TypeVar("T")


def id_variants(query: str) -> list[str]:
    """Return the id-style spellings of `query` the Hub's id search can match, most specific first."""
    words = [w.lower() for w in re.findall(r"[^\W_]+", query) if w.lower() not in STOPWORDS and len(w) > 1]
    if len(words) <= 1:
        return words
    variants = ["-".join(words)]
    if len(words) == 2:
        variants += ["_".join(words), "".join(words)]
    for first, second in itertools.pairwise(words):  # longer queries: their leading word pairs
        variants += [f"{first}-{second}", f"{first}{second}"]
    unique: list[str] = []
    for variant in variants:
        if variant not in unique:
            unique.append(variant)
    return unique[:MAX_VARIANTS]


class HubSearch:
    """Search backend on the live Hub API."""

    name: BackendName = "hub"

    def __init__(
        self,
        api: Any | None = None,
        *,
        timeout_s: float = 20.0,
        token: str | None = None,
        max_concurrency: int = 8,
    ) -> None:
        if api is None:
            from huggingface_hub import HfApi

            api = HfApi(token=token or False)
        self._api = api
        self.timeout_s = timeout_s
        self._runner = BlockingRunner(max_concurrency, "hub-search")
        # Answers of one (variant, limit, filters) listing: ten categories often share variants ("review").
        self._listed: dict[tuple[str, int, tuple[str, ...]], list[Any]] = {}

    async def search(self, query: str, *, limit: int = 20) -> list[SearchHit]:
        """Return up to `limit` Hub datasets whose id matches a variant of `query`, most downloaded first.

        The variants are listed concurrently; if any of them fails the whole search raises (a permanent error
        before a transient one), so the caller's retry covers every variant and no failure goes unrecorded.
        """
        text, filters = split_filters(query)
        variants = id_variants(text)
        answers = await asyncio.gather(
            *(self._call(partial(self._list, variant, limit, filters)) for variant in variants),
            return_exceptions=True,
        )
        errors = [a for a in answers if isinstance(a, BaseException)]
        if errors:
            permanent = [e for e in errors if not isinstance(e, TransientSearchError)]
            raise (permanent or errors)[0]
        found: dict[str, tuple[int, Any]] = {}
        for order, infos in enumerate(answers):
            for info in infos:  # type: ignore[union-attr]
                hub_id = getattr(info, "id", "") or ""
                if is_hub_id(hub_id) and hub_id not in found:
                    found[hub_id] = (order, info)
        ranked = sorted(found.values(), key=lambda pair: (pair[0], -(getattr(pair[1], "downloads", 0) or 0)))
        hits: list[SearchHit] = []
        for rank, (_, info) in enumerate(ranked[:limit], start=1):
            metadata = info_metadata(info)
            hits.append(
                SearchHit(
                    hub_id=info.id,
                    title=info.id.split("/", 1)[1],
                    description=_description(info),
                    metadata=metadata,
                    backend=self.name,
                    query=query,
                    rank=rank,
                    score=round(1.0 / rank, 4),
                    url=f"https://huggingface.co/datasets/{info.id}",
                )
            )
        return hits

    def _list(self, search: str, limit: int, filters: list[str]) -> list[Any]:
        key = (search, limit, tuple(filters))
        if key not in self._listed:
            self._listed[key] = list(
                self._api.list_datasets(
                    search=search, filter=filters or None, sort="downloads", limit=limit, expand=list(EXPAND)
                )
            )
        return self._listed[key]

    async def lookup(self, hub_id: str) -> DatasetMetadata | None:
        """Return the Hub's metadata of `hub_id`, or None when the Hub says it does not exist."""
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

        def call() -> Any:
            try:
                return self._api.dataset_info(hub_id, timeout=self.timeout_s)
            except GatedRepoError:
                return DatasetMetadata(gated=True)
            except RepositoryNotFoundError:
                return None

        info = await self._call(call)
        if info is None or isinstance(info, DatasetMetadata):
            return info
        return info_metadata(info)

    async def _call(self, function: Callable[[], T]) -> T:
        try:
            return await self._runner.run(partial(_mapped, function), self.timeout_s)
        except TimeoutError:
            raise TransientSearchError(f"hub: no answer within {self.timeout_s:g}s") from None


def _mapped(function: Callable[[], T]) -> T:
    """Run `function`, translating huggingface_hub/httpx errors into the search error tree."""
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    try:
        return function()
    except OfflineModeIsEnabled:
        raise BackendUnavailableError("hub: offline mode is enabled (HF_HUB_OFFLINE)") from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        text = f"hub: HTTP {status}: {str(exc).splitlines()[0]}"
        if status == 429 or (status is not None and status >= 500):
            raise TransientSearchError(text) from None
        raise SearchError(text) from None
    except httpx2.TimeoutException as exc:
        raise TransientSearchError(f"hub: timed out ({type(exc).__name__})") from None
    except httpx2.ConnectError as exc:
        raise BackendUnavailableError(f"hub: cannot connect ({exc})") from None
    except httpx2.TransportError as exc:
        raise TransientSearchError(f"hub: transport error ({type(exc).__name__}: {exc})") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise SearchError(f"hub: unexpected answer ({type(exc).__name__}: {exc})") from None


def info_metadata(info: Any) -> DatasetMetadata:
    """Return DatasetMetadata from a huggingface_hub `DatasetInfo` (tags and card data both read)."""
    tags: list[str] = list(getattr(info, "tags", None) or [])
    card = getattr(info, "card_data", None)
    card_get = card.get if card is not None and hasattr(card, "get") else (lambda key, default=None: default)

    def tagged(prefix: str) -> list[str]:
        return [t.split(":", 1)[1] for t in tags if t.startswith(prefix + ":")]

    licenses = tagged("license") or _as_list(card_get("license"))
    sizes = tagged("size_categories") or _as_list(card_get("size_categories"))
    return DatasetMetadata(
        license=licenses[0] if licenses else None,
        gated=getattr(info, "gated", None),
        size_category=sizes[0] if sizes else None,
        tags=[t for t in tags if ":" not in t],
        task_categories=tagged("task_categories") or _as_list(card_get("task_categories")),
        languages=tagged("language") or _as_list(card_get("language")),
        downloads=getattr(info, "downloads", None),
        likes=getattr(info, "likes", None),
        last_modified=getattr(info, "last_modified", None),
        features=_features(card_get("dataset_info")),
        sha=getattr(info, "sha", None),
    )


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _features(dataset_info: Any) -> list[str] | None:
    infos = dataset_info if isinstance(dataset_info, list) else [dataset_info] if dataset_info else []
    names: list[str] = []
    for item in infos:
        for feature in (item or {}).get("features") or [] if isinstance(item, dict) else []:
            name = feature.get("name") if isinstance(feature, dict) else None
            if name and name not in names:
                names.append(str(name))
    return names or None


def _description(info: Any) -> str:
    text = getattr(info, "description", None) or ""
    return " ".join(str(text).split())[:1000]
