"""The rows stages hand each other: a chat message, a curated sample, a regenerated sample (DESIGN.md: Contracts).

Curation writes `CuratedSample` rows (Parquet shards, `samples.jsonl`); regeneration reads them and writes
`RegeneratedSample` rows (`regenerated.jsonl`, SpecForge's ShareGPT shape plus `meta`); training reads
either. `ROLE_ALIASES` is the one table of ShareGPT-style role names (`human`, `gpt`, …) mapped to the three
roles every stage uses.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant"]
ROLES: frozenset[str] = frozenset({"system", "user", "assistant"})
ROLE_ALIASES: dict[str, str] = {"human": "user", "gpt": "assistant", "model": "assistant", "bot": "assistant"}


def canonical_role(name: object) -> str:
    """Return the role `name` stands for (`gpt` → `assistant`); an unknown name is returned as it is."""
    text = str(name)
    return ROLE_ALIASES.get(text, text)


class Message(BaseModel):
    """One turn of a conversation."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    content: str


class SampleSource(BaseModel):
    """Where a curated row came from: the dataset, its config/split/revision, and the row's index in it."""

    dataset: str
    config: str | None = None
    split: str | None = None
    revision: str | None = None
    row: int


class CuratedSample(BaseModel):
    """A row of the curated set. Prompts to regenerate keep system and user turns only; the dataset's own
    conversation stays in `original_messages`; target-native rows keep their answers and token ids."""

    model_config = ConfigDict(extra="forbid")

    id: str
    category: str
    messages: list[Message]
    needs_regeneration: bool
    target_native: bool
    source: SampleSource
    content_hash: str
    token_count: int = Field(ge=0)
    original_messages: list[Message]
    original_token_count: int = Field(ge=0)
    input_ids: list[int] | None = None
    loss_mask: list[int] | None = None


class RegeneratedSample(BaseModel):
    """A row of `regenerated.jsonl`: SpecForge's `{id, conversations}` plus what the run recorded in `meta`
    (`regenerated`, `finish_reason`, tokens, server, latency, model, sampling, category, source, per-turn data)."""

    id: str
    conversations: list[Message]
    meta: dict[str, Any] = Field(default_factory=dict)
