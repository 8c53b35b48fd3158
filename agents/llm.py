"""The optional LLM of the subagents: query expansion and relevance judgement through langchain-openai.

`make_llm` returns a `RelevanceLLM` only when `DATAHUNT_LLM_BASE_URL` is set; otherwise the subagents use the
deterministic planner and scorer. Both calls use `ChatOpenAI.with_structured_output` (JSON schema) with
prompts rendered from `prompts/agents/`. Every way an answer can be unusable (HTTP error, timeout, text that
is not JSON, JSON of the wrong shape, out-of-range scores) raises `LLMError` with a short reason, which the
subagent records before falling back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field, SecretStr

from agents.categories import CategoryDefinition
from agents.errors import AgentError
from core.candidates import Candidate
from core.settings import Settings
from prompts import render_prompt

logger = logging.getLogger(__name__)

MAX_DESCRIPTION_CHARS = 300


class LLMError(AgentError, RuntimeError):
    """The LLM could not be reached or gave an unusable answer."""


class PlannedQueries(BaseModel):
    """Search queries proposed for one category."""

    queries: list[str] = Field(
        description="Short, distinct search queries, each likely to find a different dataset."
    )


class Judgement(BaseModel):
    """The relevance of one candidate dataset to the category."""

    hub_id: str = Field(description="The candidate's id exactly as listed (owner/name).")
    relevance: float = Field(ge=0.0, le=1.0, description="1 = exactly this category, 0 = unrelated.")
    reason: str = Field(description="One sentence saying why.")


class Judgements(BaseModel):
    """Relevance judgements for a list of candidates."""

    judgements: list[Judgement] = Field(description="One judgement per listed candidate.")


class RelevanceLLM:
    """Query expansion and relevance judgement on an OpenAI-compatible chat model.

    `aclose()` closes the HTTP client it owns (the one `make_llm` made for it), from the event loop that used it.
    """

    def __init__(self, chat_model: Any, *, owned_client: Any | None = None) -> None:
        self._chat = chat_model
        self._owned_client = owned_client

    async def aclose(self) -> None:
        """Close the owned HTTP client's connections (a no-op for a client passed in: its owner closes it)."""
        if self._owned_client is not None:
            await self._owned_client.aclose()

    async def plan_queries(self, definition: CategoryDefinition, max_queries: int) -> list[str]:
        """Return up to `max_queries` new queries for `definition` (seed queries excluded)."""
        prompt = render_prompt(
            "agents/plan_queries",
            category=definition.category.value,
            description=definition.description,
            good_dataset=definition.good_dataset,
            seed_queries="; ".join(definition.seed_queries),
            max_queries=max_queries,
        )
        answer = await self._structured(PlannedQueries, prompt)
        seeds = {q.lower() for q in definition.seed_queries}
        queries: list[str] = []
        for query in answer.queries:
            text = " ".join(str(query).split())[:120]
            if text and text.lower() not in seeds and text.lower() not in (q.lower() for q in queries):
                queries.append(text)
        if not queries:
            raise LLMError("the LLM proposed no new query")
        return queries[:max_queries]

    async def judge(
        self, definition: CategoryDefinition, candidates: Sequence[Candidate]
    ) -> dict[str, Judgement]:
        """Return judgements keyed by hub id for the listed candidates (ids the LLM invented are dropped)."""
        lines = []
        for c in candidates:
            description = " ".join(c.description.split())[:MAX_DESCRIPTION_CHARS]
            tags = ", ".join([*c.metadata.tags, *c.metadata.task_categories][:8])
            lines.append(f"{c.hub_id}: {description} [{tags}]")
        prompt = render_prompt(
            "agents/judge_relevance",
            category=definition.category.value,
            description=definition.description,
            good_dataset=definition.good_dataset,
            candidates="\n".join(lines),
        )
        answer = await self._structured(Judgements, prompt)
        wanted = {c.hub_id.lower(): c.hub_id for c in candidates}
        judged: dict[str, Judgement] = {}
        for judgement in answer.judgements:
            hub_id = wanted.get(judgement.hub_id.strip().lower())
            if hub_id is not None:
                judged[hub_id] = judgement
        if not judged:
            raise LLMError("the LLM judged none of the listed candidates")
        return judged

    async def _structured(self, schema: type[BaseModel], prompt: str) -> Any:
        runnable = self._chat.with_structured_output(schema, method="json_schema", include_raw=True)
        try:
            result = await runnable.ainvoke(prompt)
        except Exception as exc:  # openai/httpx raise many types; each becomes one recorded reason
            raise LLMError(f"LLM call failed: {type(exc).__name__}: {_first_line(exc)}") from exc
        parsed = result.get("parsed") if isinstance(result, dict) else None
        if isinstance(parsed, schema):
            return parsed
        error = result.get("parsing_error") if isinstance(result, dict) else None
        raise LLMError(
            f"LLM answer did not match {schema.__name__}: {_first_line(error) if error else 'no content'}"
        )


def _first_line(value: object) -> str:
    text = str(value).strip().splitlines()
    return text[0][:200] if text else type(value).__name__


def make_llm(
    settings: Settings, *, http_async_client: Any | None = None, max_retries: int = 1
) -> RelevanceLLM | None:
    """Return the agents' LLM configured from `settings`, or None when no `llm_base_url` is set.

    `http_async_client` (an `httpx.AsyncClient`) replaces the OpenAI client's transport, e.g. in tests. Without
    one the LLM gets an HTTP client of its own, closed by its `aclose()`: langchain-openai's default client is
    shared by the whole process, and a campaign's connections must close with the campaign (a CLI campaign
    runs under its own `asyncio.run`, whose loop ends with it), not outlive the loop that opened them.
    """
    if not settings.llm_base_url:
        return None
    import httpx
    from langchain_openai import ChatOpenAI

    owned = None
    if http_async_client is None:
        owned = http_async_client = httpx.AsyncClient(timeout=settings.llm_timeout_s)

    api_key = settings.llm_api_key or SecretStr("not-needed")  # local servers accept any key
    chat = ChatOpenAI(
        base_url=settings.llm_base_url,
        model=settings.llm_model,
        api_key=api_key,
        timeout=settings.llm_timeout_s,
        max_retries=max_retries,
        temperature=0.0,
        http_async_client=http_async_client,
    )
    return RelevanceLLM(chat, owned_client=owned)
