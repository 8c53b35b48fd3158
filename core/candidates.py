"""The candidate contracts that cross stage doors: what a subagent delivers and what the verifier hands the catalog.

DESIGN.md's *Candidate* (with its evidence and metadata) and the payload of a *SubagentRun* (the queries run,
the deliverable) are pydantic models, so the graph can checkpoint their JSON and the catalog can build its rows
from them. `VerifiedCandidate` is one candidate with the verifier's decision and reasons, as the graph state
carries it and the catalog stores it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict  # pydantic reads TypedDicts from typing_extensions on Python 3.11

from core.types import Category, Decision, Reason

BackendName = Literal["hub", "web", "offline"]


class DatasetMetadata(BaseModel):
    """What is known about a Hub dataset. `None` means unknown, never 'bad'. Other keys a source stated (a Hub
    card's `card_data`, read for its license) are kept as given."""

    model_config = ConfigDict(extra="allow")

    license: str | None = None
    gated: bool | str | None = None  # False, "auto", "manual", or None when unknown
    num_rows: int | None = None
    size_category: str | None = None  # e.g. "10K<n<100K"
    size_stated: str | None = None  # free text such as "558k" from a curated list
    tags: list[str] = Field(default_factory=list)
    task_categories: list[str] = Field(default_factory=list)
    languages: list[str] = Field(default_factory=list)
    downloads: int | None = None
    likes: int | None = None
    last_modified: datetime | None = None
    features: list[str] | None = None  # column names where known
    sha: str | None = None  # pinned revision where known
    sections: list[str] = Field(default_factory=list)  # curated-list sections naming the dataset (offline index)
    # Draft-training recipes (`agents/source_repos.py`) that name the dataset among their training sets (offline index)
    draft_recipes: list[str] = Field(default_factory=list)
    # Media libraries (`agents/source_repos.py`: image generation, robot learning, audio) whose documentation names
    # the dataset (offline index): its rows need images, video or sound
    media_libraries: list[str] = Field(default_factory=list)


class Evidence(BaseModel):
    """Why a candidate was found: which backend, query, rank and score."""

    backend: BackendName
    query: str
    rank: int
    score: float
    url: str | None = None


class Candidate(BaseModel):
    """A dataset a subagent proposes for its category, with the evidence that found it."""

    hub_id: str
    title: str = ""
    description: str = ""
    categories: list[Category]
    metadata: DatasetMetadata = Field(default_factory=DatasetMetadata)
    evidence: list[Evidence] = Field(default_factory=list)
    relevance: float = Field(default=0.0, description="Category relevance in [0, 1], higher is better.")
    relevance_reason: str = ""
    format_guess: str | None = None  # alpaca, sharegpt, openai_messages, qa, code, commits, trajectories, …


class QueryRecord(BaseModel):
    """One query a subagent ran on one backend, and how it went."""

    backend: BackendName
    query: str
    status: Literal["ok", "empty", "failed"]
    hits: int = 0
    attempts: int = 1
    error: str | None = None
    elapsed_s: float = 0.0


class Deliverable(BaseModel):
    """What one subagent returns: its candidates, best first, and every query it ran."""

    category: Category
    candidates: list[Candidate] = Field(default_factory=list)
    queries: list[QueryRecord] = Field(default_factory=list)
    planner: Literal["llm", "deterministic"] = "deterministic"
    offline: bool = False
    notes: list[str] = Field(default_factory=list)


class VerifiedCandidate(TypedDict):
    """A candidate with the verifier's decision and every reason (blocking or flag) behind it."""

    # `Candidate.model_dump(mode="json")`, metadata enriched by lookups: graph state is plain JSON (checkpointed);
    # the catalog reads it back through `Candidate.model_validate`
    candidate: dict[str, Any]
    decision: Decision
    reasons: list[Reason]
