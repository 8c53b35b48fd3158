"""The run-scoped context every campaign node receives through LangGraph's `Runtime`: clients, not state.

The catalog (through its async port, `graph.catalog_port`), the subagent runner, the search backends, the
optional LLM and the event callback are handed to `graph.ainvoke(..., context=...)` for one run; they are
never module globals and never checkpointed. `SubagentRunner` is the shape of
`agents.subagent.run_subagent`, so tests and benchmarks can inject their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from agents.search.base import SearchBackend
from core.candidates import Deliverable
from core.types import Category
from graph.catalog_port import CatalogPort
from graph.events import EventCallback


class SubagentRunner(Protocol):
    """Runs one category's subagent and returns its deliverable (the signature of `run_subagent`)."""

    async def __call__(
        self,
        category: Category,
        *,
        backends: list[SearchBackend],
        llm: Any = None,
        max_queries: int = 8,
        per_query_limit: int = 20,
        retries: int = 2,
        timeout_s: float = 20.0,
        retry_base_delay_s: float = 0.05,
    ) -> Deliverable: ...


@dataclass
class CampaignContext:
    """What the nodes of one campaign run share: the catalog, the subagent and its clients, limits, callback."""

    catalog: CatalogPort  # every blocking catalog call of the run goes through it, in a worker thread
    subagent: SubagentRunner
    backends: list[SearchBackend]
    llm: Any = None
    on_event: EventCallback | None = None
    offline: bool = False
    search_retries: int = 2
    search_timeout_s: float = 20.0
    branch_timeout_s: float = 600.0
    lookup_timeout_s: float = 10.0
    lease_ttl_s: float = 30.0  # the campaign's lease in the catalog: renewed every third of it while running
    target_language: str = "en"
