"""The generic category subagent: plan queries, search every backend concurrently, merge, score, deliver.

One function serves all ten categories; the category's definition file steers it. Every (query × backend)
call runs concurrently under a per-call timeout, with bounded, capped-backoff retries of transient failures
only. Each call leaves one `QueryRecord` (ok, empty or failed, with attempts and error text), so a failure is
always visible and never costs the hits of other calls. Hits are merged by Hub id into one `Candidate` each,
keeping all evidence; malformed ids are dropped with a note. Relevance comes from the LLM when one is given
and answers sensibly, otherwise (and for anything it skipped) from the deterministic scorer, which weighs
keywords and the embedding similarity to the category's anchors (`agents/semantic.py`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Literal

from agents.categories import CategoryDefinition, load_category
from agents.llm import LLMError, RelevanceLLM
from agents.planning import plan_queries_deterministic
from agents.scoring import guess_format, keyword_evidence, score_candidate
from agents.search.base import SearchBackend, SearchHit, TransientSearchError, is_semantic
from agents.semantic import CategorySimilarity
from core.candidates import Candidate, Deliverable, Evidence, QueryRecord
from core.types import Category, is_hub_id, parse_category

logger = logging.getLogger(__name__)

MAX_BACKOFF_S = 2.0
LLM_JUDGE_LIMIT = 40  # candidates sent to the LLM judge, best deterministic scores first
LOCAL_POOL_DEPTH = 20  # hits per query from the in-process index (50 cost the campaign 5 s in verification)


async def run_subagent(
    category: Category | str,
    *,
    backends: Sequence[SearchBackend],
    llm: RelevanceLLM | None = None,
    similarity: CategorySimilarity | None = None,
    max_queries: int = 8,
    per_query_limit: int = 20,
    local_pool_depth: int = LOCAL_POOL_DEPTH,
    retries: int = 2,
    timeout_s: float = 20.0,
    retry_base_delay_s: float = 0.05,
) -> Deliverable:
    """Return the deliverable of one category: candidates best first, every query run, and notes.

    `similarity` defaults to the shipped offline index's embeddings (keywords alone without the model).
    Remote backends return `per_query_limit` hits per query; the in-process offline index costs nothing per
    hit, so it returns `local_pool_depth` (when deeper), and the scorer picks the best of the larger pool.
    Raises UnknownCategoryError for a name that is not a category and CategoryDefinitionError for a malformed
    definition file; search failures never raise, they are recorded on the queries.
    """
    category = category if isinstance(category, Category) else parse_category(category)
    definition = load_category(category)
    notes: list[str] = []
    with_hub = any(b.name == "hub" for b in backends)
    queries, planner = await _plan(definition, llm, max_queries, notes, with_hub)
    calls = [(query, backend) for query in queries for backend in backends]
    # The exemplars describe good datasets in plain sentences: a semantic index finds their look-alikes, while
    # the Hub's and the web's keyword searches would only waste calls on them.
    calls += [(e, backend) for e in definition.exemplars for backend in backends if is_semantic(backend)]
    await asyncio.to_thread(_prepare, calls)  # embedding is CPU work: off the event loop, beside other categories
    results = await asyncio.gather(
        *(
            _search_once(b, q, _limit(b, per_query_limit, local_pool_depth), retries, timeout_s, retry_base_delay_s)
            for q, b in calls
        )
    )
    records = [record for record, _ in results]
    candidates = _merge(category, [hit for _, hits in results for hit in hits], notes)
    similarity = similarity if similarity is not None else CategorySimilarity.default()
    if not similarity.enabled:
        notes.append("semantic scoring off (embedding model not installed): relevance from keywords alone")
    await _score(definition, candidates, llm, notes, similarity)
    failed = sum(r.status == "failed" for r in records)
    if failed:
        notes.append(f"{failed} of {len(records)} searches failed; see queries for reasons")
    if not candidates:
        notes.append("no candidate found")
    return Deliverable(
        category=category,
        candidates=candidates,
        queries=records,
        planner=planner,
        offline=all(b.name == "offline" for b in backends),
        notes=notes,
    )


def _prepare(calls: Sequence[tuple[str, SearchBackend]]) -> None:
    """Let backends that embed queries (the offline index) embed all of theirs at once: one batched call."""
    by_backend: dict[int, tuple[SearchBackend, list[str]]] = {}
    for query, backend in calls:
        by_backend.setdefault(id(backend), (backend, []))[1].append(query)
    for backend, queries in by_backend.values():
        prepare = getattr(backend, "prepare", None)
        if callable(prepare):
            try:
                prepare(queries)
            except Exception as exc:  # an optimisation only: each search still embeds its own query
                logger.info("%s could not embed queries ahead: %s", backend.name, exc)


def _limit(backend: SearchBackend, per_query_limit: int, local_pool_depth: int) -> int:
    """Return how many hits to ask `backend` for: deeper for the in-process offline index."""
    return max(per_query_limit, local_pool_depth) if backend.name == "offline" else per_query_limit


async def _plan(
    definition: CategoryDefinition,
    llm: RelevanceLLM | None,
    max_queries: int,
    notes: list[str],
    with_hub: bool,
) -> tuple[list[str], Literal["llm", "deterministic"]]:
    deterministic = plan_queries_deterministic(definition, max_queries, hub_filters=with_hub)
    if llm is None:
        return deterministic, "deterministic"
    try:
        extra = await llm.plan_queries(definition, max_queries)
    except LLMError as exc:
        notes.append(f"LLM query planning failed, used the deterministic planner: {exc}")
        return deterministic, "deterministic"
    seeds = definition.seed_queries[: max(1, max_queries // 2)]
    planned = [*seeds, *(q for q in extra if q.lower() not in {s.lower() for s in seeds})]
    return planned[:max_queries], "llm"


async def _search_once(
    backend: SearchBackend, query: str, limit: int, retries: int, timeout_s: float, base_delay_s: float
) -> tuple[QueryRecord, list[SearchHit]]:
    """Run one query on one backend with bounded retries; never raises."""
    started = time.monotonic()
    attempts = 0
    errors: list[str] = []
    while True:
        attempts += 1
        try:
            hits = await asyncio.wait_for(backend.search(query, limit=limit), timeout=timeout_s)
        except (TransientSearchError, TimeoutError) as exc:
            errors.append(str(exc) or f"timed out after {timeout_s:g}s")
            if attempts <= retries:
                await asyncio.sleep(min(base_delay_s * 2 ** (attempts - 1), MAX_BACKOFF_S))
                continue
        except Exception as exc:  # a backend bug or a permanent error: recorded on the query, not retried
            errors.append(f"{type(exc).__name__}: {exc}")
        else:
            record = QueryRecord(
                backend=backend.name,
                query=query,
                status="ok" if hits else "empty",
                hits=len(hits),
                attempts=attempts,
                error="; ".join(errors) or None,
                elapsed_s=round(time.monotonic() - started, 3),
            )
            return record, list(hits)
        logger.info("search %s %r failed after %d attempt(s): %s", backend.name, query, attempts, errors[-1])
        record = QueryRecord(
            backend=backend.name,
            query=query,
            status="failed",
            attempts=attempts,
            error="; ".join(errors),
            elapsed_s=round(time.monotonic() - started, 3),
        )
        return record, []


def _merge(category: Category, hits: list[SearchHit], notes: list[str]) -> list[Candidate]:
    """Return one Candidate per Hub id (case-insensitive), evidence and metadata from every hit kept."""
    merged: dict[str, Candidate] = {}
    malformed: list[str] = []
    for hit in hits:
        hub_id = hit.hub_id.strip()
        if not is_hub_id(hub_id):
            malformed.append(f"{hit.backend}:{hit.hub_id!r}")
            continue
        key = hub_id.lower()
        evidence = Evidence(backend=hit.backend, query=hit.query, rank=hit.rank, score=hit.score, url=hit.url)
        candidate = merged.get(key)
        if candidate is None:
            merged[key] = Candidate(
                hub_id=hub_id,
                title=hit.title,
                description=hit.description,
                categories=[category],
                metadata=hit.metadata.model_copy(),
                evidence=[evidence],
            )
            continue
        candidate.evidence.append(evidence)
        if len(hit.description) > len(candidate.description):
            candidate.description = hit.description
        _fill_metadata(candidate, hit)
    if malformed:
        notes.append(
            f"dropped {len(malformed)} hit(s) with a malformed Hub id: {', '.join(sorted(set(malformed))[:10])}"
        )
    return list(merged.values())


def _fill_metadata(candidate: Candidate, hit: SearchHit) -> None:
    """Fill fields the candidate does not know yet from another hit (Hub answers are the most complete)."""
    current = candidate.metadata
    for field, value in hit.metadata:
        if value in (None, []) or getattr(current, field) not in (None, []):
            continue
        setattr(current, field, value)


async def _score(
    definition: CategoryDefinition,
    candidates: list[Candidate],
    llm: RelevanceLLM | None,
    notes: list[str],
    similarity: CategorySimilarity,
) -> None:
    """Set relevance, reason and format on every candidate, then sort them best first (in place)."""
    similarities = await asyncio.to_thread(similarity.similarities, definition, candidates)  # embeds: off the loop
    others = [load_category(c) for c in Category if c is not definition.category]
    for candidate in candidates:
        rival = max(
            ((o.category.value, keyword_evidence(candidate, o)) for o in others), key=lambda pair: pair[1]
        )
        candidate.relevance, candidate.relevance_reason = score_candidate(
            candidate, definition, similarities.get(candidate.hub_id), rival
        )
        candidate.format_guess = guess_format(candidate)
    candidates.sort(key=_order)
    if llm is not None and candidates:
        judged_pool = candidates[:LLM_JUDGE_LIMIT]
        try:
            judged = await llm.judge(definition, judged_pool)
        except LLMError as exc:
            notes.append(f"LLM relevance judgement failed, kept the deterministic scores: {exc}")
        else:
            for candidate in judged_pool:
                judgement = judged.get(candidate.hub_id)
                if judgement is not None:
                    candidate.relevance = round(judgement.relevance, 3)
                    candidate.relevance_reason = f"LLM: {judgement.reason}"
            missing = [c.hub_id for c in judged_pool if c.hub_id not in judged]
            if missing:
                notes.append(f"LLM skipped {len(missing)} candidate(s); kept their deterministic scores")
            candidates.sort(key=_order)


def _order(candidate: Candidate) -> tuple[float, float, str]:
    """Sort key: relevance first, then the best search rank, helped by how many searches found it."""
    best_rank = min((e.rank for e in candidate.evidence), default=10**6)
    return (-candidate.relevance, best_rank - len(candidate.evidence), candidate.hub_id.lower())
