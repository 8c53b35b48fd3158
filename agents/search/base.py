"""The one protocol every search backend implements, and the errors backends raise.

A backend answers a text query with ranked `SearchHit`s and can look one Hub id up (for the verifier's
existence check). A backend that ranks by meaning sets a true `semantic` attribute (the offline index with
its embeddings); the subagent also sends it the category's exemplar descriptions as queries. Backends raise
`SearchError` subclasses; the subagent records them per query and retries only the transient ones.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from agents.errors import AgentError
from core.candidates import BackendName, DatasetMetadata


class SearchHit(BaseModel):
    """One result of one query on one backend."""

    hub_id: str
    title: str = ""
    description: str = ""
    metadata: DatasetMetadata = Field(default_factory=DatasetMetadata)
    backend: BackendName
    query: str
    rank: int = Field(ge=1)
    score: float = 0.0
    url: str | None = None


class SearchError(AgentError):
    """A backend could not answer a query."""


class TransientSearchError(SearchError):
    """A failure worth retrying: timeout, rate limit, connection error, 5xx."""


class BackendUnavailableError(SearchError):
    """The backend cannot be reached at all (offline, DNS failure); do not retry."""


@runtime_checkable
class SearchBackend(Protocol):
    """A source of dataset candidates."""

    name: BackendName

    async def search(self, query: str, *, limit: int = 20) -> list[SearchHit]:
        """Return up to `limit` hits for `query`, best first; raise SearchError on failure."""
        ...

    async def lookup(self, hub_id: str) -> DatasetMetadata | None:
        """Return what the backend knows of `hub_id`, or None when it does not know the dataset."""
        ...


def is_semantic(backend: SearchBackend) -> bool:
    """True when `backend` ranks by meaning (its `semantic` attribute), so plain-sentence queries suit it."""
    return bool(getattr(backend, "semantic", False))
