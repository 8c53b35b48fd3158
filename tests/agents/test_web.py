"""The web backend with a hand-written fake DDGS replaying recorded results and raising ddgs's real errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from ddgs.exceptions import DDGSException, RatelimitException, TimeoutException

from agents.search.base import SearchError, TransientSearchError
from agents.search.web import SITE_FILTER, WebSearch, hub_id_from_url

RECORDED = json.loads(
    (Path(__file__).parent.parent / "data" / "recorded" / "web" / "ddgs_code_review.json").read_text()
)


class FakeDDGS:
    """Stands in for `ddgs.DDGS`: returns recorded results or raises a given exception; records calls."""

    def __init__(self, results: list[dict] | None = None, error: Exception | None = None) -> None:
        self.results = results or []
        self.error = error
        self.calls: list[tuple[str, int]] = []

    def text(self, query: str, max_results: int = 10) -> list[dict]:
        self.calls.append((query, max_results))
        if self.error is not None:
            raise self.error
        return self.results[:max_results]


@pytest.mark.parametrize(
    ("url", "hub_id"),
    [
        ("https://huggingface.co/datasets/bigcode/commitpack", "bigcode/commitpack"),
        ("https://huggingface.co/datasets/bigcode/commitpack/viewer/default/train?p=2", "bigcode/commitpack"),
        (
            "https://huggingface.co/datasets/Salesforce/xlam-function-calling-60k/tree/main/data",
            "Salesforce/xlam-function-calling-60k",
        ),
        ("https://huggingface.co/datasets/openai/gsm8k?library=datasets#usage", "openai/gsm8k"),
        ("http://www.huggingface.co/datasets/a/b/blob/main/README.md", "a/b"),
        ("hf.co/datasets/x/y", "x/y"),
        ("https://huggingface.co/datasets/HuggingFaceH4/ultrachat_200k/", "HuggingFaceH4/ultrachat_200k"),
        ("https://huggingface.co/bigcode/starcoder", None),
        ("https://huggingface.co/datasets/viewer", None),
        ("https://huggingface.co/datasets/tree/main/x", None),
        ("https://huggingface.co/datasets/onlyowner", None),
        ("https://github.com/datasets/a/b", None),
        ("https://huggingface.co.evil.com/datasets/a/b", None),
        ("https://huggingface.co/datasets/a--b/c", None),
        ("not a url at all", None),
        ("", None),
    ],
)
def test_hub_ids_are_extracted_only_from_dataset_urls(url: str, hub_id: str | None) -> None:
    assert hub_id_from_url(url) == hub_id


def test_search_keeps_dataset_pages_once_each_in_result_order() -> None:
    fake = FakeDDGS(RECORDED)
    hits = asyncio.run(WebSearch(lambda: fake).search("code review", limit=10))
    assert [h.hub_id for h in hits] == [
        "ronantakizawa/github-codereview",
        "Nutanix/codereview-dataset",
        "VatsaDev/code-review",
    ]
    assert [h.rank for h in hits] == [1, 2, 3]
    assert all(h.backend == "web" and h.query == "code review" for h in hits)
    assert hits[0].description.startswith("Large-scale dataset")
    assert fake.calls == [(f"code review {SITE_FILTER}", 20)]


def test_hub_tag_filters_are_not_sent_to_the_web() -> None:
    fake = FakeDDGS(RECORDED)
    asyncio.run(WebSearch(lambda: fake).search("code review task_categories:text-generation", limit=3))
    assert fake.calls[0][0] == f"code review {SITE_FILTER}"


def test_limit_caps_the_hits() -> None:
    hits = asyncio.run(WebSearch(lambda: FakeDDGS(RECORDED)).search("code review", limit=1))
    assert [h.hub_id for h in hits] == ["ronantakizawa/github-codereview"]


def test_no_results_is_an_empty_answer_not_an_error() -> None:
    fake = FakeDDGS(error=DDGSException("No results found."))
    assert asyncio.run(WebSearch(lambda: fake).search("zzzz", limit=5)) == []


@pytest.mark.parametrize(
    "error",
    [
        RatelimitException("202 Ratelimit"),
        TimeoutException("https://duckduckgo.com timed out"),
        ConnectionResetError("reset"),
    ],
)
def test_rate_limits_timeouts_and_connection_errors_are_transient(error: Exception) -> None:
    with pytest.raises(TransientSearchError, match="web: "):
        asyncio.run(WebSearch(lambda: FakeDDGS(error=error)).search("code review", limit=5))


def test_other_ddgs_errors_are_permanent() -> None:
    with pytest.raises(SearchError, match="web: engine exploded") as info:
        asyncio.run(WebSearch(lambda: FakeDDGS(error=DDGSException("engine exploded"))).search("q", limit=5))
    assert not isinstance(info.value, TransientSearchError)


def test_malformed_result_rows_are_ignored() -> None:
    rows = [
        None,
        "text",
        {"title": "no href"},
        {"href": "https://huggingface.co/datasets/ok/one", "body": None},
    ]
    hits = asyncio.run(WebSearch(lambda: FakeDDGS(rows)).search("q", limit=5))  # type: ignore[arg-type]
    assert [(h.hub_id, h.description) for h in hits] == [("ok/one", "")]


def test_lookup_never_vouches_for_a_dataset() -> None:
    assert asyncio.run(WebSearch(lambda: FakeDDGS(RECORDED)).lookup("bigcode/commitpack")) is None
