"""The Hub backend against recorded `/api/datasets` answers served through huggingface_hub's own HTTP client.

huggingface_hub 2.x builds one shared `httpx2.Client` from a factory; the tests install a factory whose client
uses a mock transport that replays recorded JSON, so the real `HfApi` parsing and error mapping run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import HfApi, constants
from huggingface_hub.utils import _http

from agents.search.base import BackendUnavailableError, SearchError, TransientSearchError
from agents.search.hub import HubSearch, id_variants

RECORDED = Path(__file__).parent.parent / "data" / "recorded" / "hub"
Handler = Callable[[httpx2.Request], httpx2.Response]


def recorded(name: str) -> object:
    return json.loads((RECORDED / name).read_text())


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Handler], list[httpx2.Request]]]:
    """Route huggingface_hub's HTTP through a handler; return the list of requests it saw."""

    class NoSleep:
        time = staticmethod(lambda: 0.0)
        sleep = staticmethod(lambda seconds: None)

    monkeypatch.setattr(_http, "time", NoSleep)  # huggingface_hub's own 429/5xx backoff, without waiting

    def install(handler: Handler) -> list[httpx2.Request]:
        seen: list[httpx2.Request] = []

        def record(request: httpx2.Request) -> httpx2.Response:
            seen.append(request)
            return handler(request)

        _http.set_client_factory(lambda: httpx2.Client(transport=httpx2.MockTransport(record)))
        return seen

    yield install
    _http.set_client_factory(_http.default_client_factory)


def hub_answers(request: httpx2.Request) -> httpx2.Response:
    path = request.url.path
    if path == "/api/datasets":
        search = request.url.params.get("search")
        files = {
            "code-review": "list_datasets_code_review.json",
            "codereview": "list_datasets_codereview.json",
        }
        return httpx2.Response(200, json=recorded(files[search]) if search in files else [])
    if path == "/api/datasets/bigcode/commitpack":
        return httpx2.Response(200, json=recorded("dataset_info_commitpack.json"))
    if path == "/api/datasets/meta/gated-one":
        return httpx2.Response(
            401,
            headers={"X-Error-Code": "GatedRepo"},
            json={"error": "Access to this dataset is restricted."},
        )
    return httpx2.Response(
        404, headers={"X-Error-Code": "RepoNotFound"}, json={"error": "Repository not found"}
    )


def test_id_variants_cover_the_ways_ids_glue_words() -> None:
    assert id_variants("code review") == ["code-review", "code_review", "codereview"]
    assert id_variants("gsm8k") == ["gsm8k"]
    assert id_variants("the dataset of") == []
    assert id_variants("pull request review comments") == [
        "pull-request-review-comments",
        "pull-request",
        "pullrequest",
    ]


def test_search_merges_variants_and_maps_metadata(serve) -> None:
    seen = serve(hub_answers)
    hits = asyncio.run(HubSearch(HfApi(token=False)).search("code review", limit=10))
    assert [h.hub_id for h in hits] == [
        "ronantakizawa/github-codereview",
        "Nutanix/codereview-dataset",
        "manishsaini1/github-codereview-dataset",
    ]
    searched = [r.url.params.get("search") for r in seen if r.url.path == "/api/datasets"]
    assert sorted(searched) == ["code-review", "code_review", "codereview"]
    assert all("cardData" in r.url.params.get_list("expand") for r in seen if r.url.path == "/api/datasets")
    first = hits[0]
    assert (first.backend, first.query, first.rank) == ("hub", "code review", 1)
    meta = first.metadata
    assert (meta.license, meta.gated, meta.size_category) == ("mit", False, "100K<n<1M")
    assert meta.task_categories == ["text-generation"] and meta.languages == ["en"]
    assert meta.features == ["repo", "before_code", "reviewer_comment", "after_code"]
    assert "code-review" in meta.tags and not any(":" in t for t in meta.tags)
    assert (meta.downloads, meta.likes, meta.sha) == (2211, 41, "3f6c1a2b9d0e4f5a6b7c8d9e0f1a2b3c4d5e6f70")
    assert hits[1].metadata.gated == "auto"


def test_tag_filters_in_the_query_become_hub_filters(serve) -> None:
    seen = serve(hub_answers)
    hits = asyncio.run(
        HubSearch(HfApi(token=False)).search("code review task_categories:text-generation", limit=10)
    )
    listed = [r for r in seen if r.url.path == "/api/datasets"]
    assert sorted(r.url.params.get("search") for r in listed) == ["code-review", "code_review", "codereview"]
    assert all(r.url.params.get_list("filter") == ["task_categories:text-generation"] for r in listed)
    assert hits and hits[0].query == "code review task_categories:text-generation"


def test_listings_are_remembered_so_shared_variants_cost_one_request(serve) -> None:
    seen = serve(hub_answers)
    hub = HubSearch(HfApi(token=False))

    async def both() -> tuple[list, list]:
        return await hub.search("code review", limit=10), await hub.search("Code-Review", limit=10)

    first, second = asyncio.run(both())
    searched = [r.url.params.get("search") for r in seen if r.url.path == "/api/datasets"]
    assert sorted(searched) == ["code-review", "code_review", "codereview"]
    assert [h.hub_id for h in first] == [h.hub_id for h in second] != []


def test_lookup_returns_metadata_none_or_gated(serve) -> None:
    serve(hub_answers)
    hub = HubSearch(HfApi(token=False))
    metadata = asyncio.run(hub.lookup("bigcode/commitpack"))
    assert metadata is not None
    assert (metadata.license, metadata.size_category, metadata.downloads) == ("mit", "10M<n<100M", 48213)
    assert asyncio.run(hub.lookup("nobody/missing")) is None
    gated = asyncio.run(hub.lookup("meta/gated-one"))
    assert gated is not None and gated.gated is True


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (429, TransientSearchError),
        (500, TransientSearchError),
        (503, TransientSearchError),
        (400, SearchError),
        (401, SearchError),
    ],
)
def test_http_errors_map_onto_the_search_error_tree(serve, status: int, error: type[SearchError]) -> None:
    seen = serve(lambda request: httpx2.Response(status, json={"error": "nope"}))
    with pytest.raises(error, match=f"HTTP {status}") as info:
        asyncio.run(HubSearch(HfApi(token=False)).search("math", limit=5))
    if error is SearchError:
        assert not isinstance(info.value, TransientSearchError)
    assert len(seen) >= 1


def test_one_failing_variant_fails_the_whole_search_so_it_is_retried_whole(serve) -> None:
    def partly_down(request: httpx2.Request) -> httpx2.Response:
        if request.url.params.get("search") == "code_review":
            return httpx2.Response(502, text="Bad Gateway")
        return hub_answers(request)

    serve(partly_down)
    with pytest.raises(TransientSearchError, match="HTTP 502"):
        asyncio.run(HubSearch(HfApi(token=False)).search("code review", limit=10))


def test_connection_refused_means_unavailable(serve) -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("[Errno 111] Connection refused", request=request)

    serve(refuse)
    with pytest.raises(BackendUnavailableError, match="cannot connect"):
        asyncio.run(HubSearch(HfApi(token=False)).search("math", limit=5))


def test_a_read_timeout_is_transient(serve) -> None:
    def slow(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ReadTimeout("timed out", request=request)

    serve(slow)
    with pytest.raises(TransientSearchError, match="timed out"):
        asyncio.run(HubSearch(HfApi(token=False)).search("math", limit=5))


def test_offline_mode_means_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    _http.set_client_factory(_http.default_client_factory)
    with pytest.raises(BackendUnavailableError, match="offline mode"):
        asyncio.run(HubSearch(HfApi(token=False)).search("math", limit=5))


def test_a_hub_that_never_answers_times_out_as_transient() -> None:
    class StuckApi:
        def list_datasets(self, **kwargs: object) -> list[object]:
            import time

            time.sleep(0.5)
            return []

    with pytest.raises(TransientSearchError, match="no answer within"):
        asyncio.run(HubSearch(StuckApi(), timeout_s=0.05).search("math", limit=5))
