"""Hand-written fakes for the campaign tests: a scripted subagent, an index backend, flaky search backends.

The scripted subagent follows `run_subagent`'s signature; per category it can deliver candidates, deliver
nothing, raise, hang, or return garbage, and it records every call so tests can tell which branches ran.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, text

from agents.search.base import SearchHit, TransientSearchError
from core.candidates import Candidate, DatasetMetadata, Deliverable, Evidence, QueryRecord
from core.types import Category

SHARED_ID = "shared-org/everything-instruct"  # every category finds it: one entry, ten categories


def good_metadata() -> DatasetMetadata:
    """Metadata of a dataset that passes every check."""
    return DatasetMetadata(license="apache-2.0", gated=False, num_rows=25_000, features=["messages", "source"])


def deliverable_for(category: Category, hub_ids: list[str] | None = None) -> Deliverable:
    """A realistic deliverable: two datasets of its own plus the shared one, found by the offline index."""
    ids = hub_ids if hub_ids is not None else [f"org-{category.value}/{category.value}-set-a",
                                               f"org-{category.value}/{category.value}-set-b", SHARED_ID]
    candidates = [
        Candidate(
            hub_id=hub_id, title=hub_id.split("/")[-1], description=f"{category.value} data", categories=[category],
            metadata=good_metadata(), relevance=0.9 - 0.1 * rank,
            evidence=[Evidence(backend="offline", query=f"{category.value} dataset", rank=rank + 1, score=3.0)],
        )
        for rank, hub_id in enumerate(ids)
    ]
    queries = [QueryRecord(backend="offline", query=f"{category.value} dataset", status="ok" if ids else "empty",
                           hits=len(ids))]
    return Deliverable(category=category, candidates=candidates, queries=queries, offline=True)


Behaviour = Callable[[Category], Any]


class ScriptedSubagent:
    """A subagent whose behaviour per category is scripted; unscripted categories deliver normally."""

    def __init__(self, script: dict[str, Behaviour] | None = None) -> None:
        self.script = script or {}
        self.calls: list[str] = []

    async def __call__(
        self, category: Category, *, backends: Any, llm: Any = None, max_queries: int = 8, per_query_limit: int = 20,
        retries: int = 2, timeout_s: float = 20.0, retry_base_delay_s: float = 0.05,
    ) -> Deliverable:
        self.calls.append(category.value)
        behaviour = self.script.get(category.value)
        if behaviour is None:
            return deliverable_for(category)
        result = behaviour(category)
        return await result if asyncio.iscoroutine(result) else result


def raises(category: Category) -> Deliverable:
    raise RuntimeError(f"search backend exploded for {category.value}")


def empty(category: Category) -> Deliverable:
    return deliverable_for(category, hub_ids=[])


class FakeIndex:
    """An offline-index backend that knows a fixed set of datasets (for the verifier's existence lookups)."""

    name = "offline"

    def __init__(self, known: dict[str, DatasetMetadata] | None = None) -> None:
        self.known = known or {}

    async def search(self, query: str, *, limit: int = 20) -> list[SearchHit]:
        return []

    async def lookup(self, hub_id: str) -> DatasetMetadata | None:
        return self.known.get(hub_id)


class FlakySearch:
    """A search backend that fails a fixed share of calls (timeouts, rate limits, crashes) and logs each call.

    Successful calls return hits with ids derived from the query, so a test can check that every hit of a
    successful call reached the catalog.
    """

    def __init__(self, name: str, *, failure_rate: float, seed: int) -> None:
        self.name = name
        self.failure_rate = failure_rate
        self.random = random.Random(seed)
        self.calls: list[tuple[str, str]] = []  # (query, outcome)

    async def search(self, query: str, *, limit: int = 20) -> list[SearchHit]:
        await asyncio.sleep(0)
        roll = self.random.random()
        if roll < self.failure_rate / 3:
            self.calls.append((query, "timeout"))
            raise TimeoutError("read timed out")
        if roll < 2 * self.failure_rate / 3:
            self.calls.append((query, "ratelimit"))
            raise TransientSearchError("HTTP 429: rate limited")
        if roll < self.failure_rate:
            self.calls.append((query, "crash"))
            raise RuntimeError("backend bug: unexpected payload")
        self.calls.append((query, "ok"))
        return [self.hit(query, rank) for rank in range(1, 4)]

    def hit(self, query: str, rank: int) -> SearchHit:
        slug = re.sub(r"[^a-z0-9]+", "-", query.lower())[:60].strip("-") or "q"
        return SearchHit(hub_id=f"{self.name}-org/{slug}-{rank}", title=f"{query} {rank}", description=query,
                         metadata=good_metadata(), backend=self.name, query=query, rank=rank, score=1.0 / rank)

    async def lookup(self, hub_id: str) -> DatasetMetadata | None:
        return None


def stored_branch_results(engine: Engine, thread_id: str) -> int:
    """How many finished branches the checkpointer holds as pending writes for `thread_id`."""
    table = "checkpoint_writes" if engine.dialect.name == "postgresql" else "writes"
    query = text(f"SELECT COUNT(DISTINCT task_id) FROM {table} WHERE thread_id = :t AND channel = 'results'")
    with engine.connect() as conn:
        return int(conn.execute(query, {"t": thread_id}).scalar_one())


def stored_checkpoints(engine: Engine, thread_id: str) -> int:
    """How many checkpoints (and pending writes) the checkpointer keeps for threads starting with `thread_id`."""
    writes = "checkpoint_writes" if engine.dialect.name == "postgresql" else "writes"
    with engine.connect() as conn:
        return sum(int(conn.execute(text(f"SELECT COUNT(*) FROM {table} WHERE thread_id LIKE :t"),
                                    {"t": thread_id + "%"}).scalar_one()) for table in ("checkpoints", writes))
