"""The rows stages hand each other: a chat message, a curated sample, a regenerated sample (DESIGN.md: Contracts).

Curation writes `CuratedSample` rows (Parquet shards, `samples.jsonl`); regeneration reads them and writes
`RegeneratedSample` rows (`regenerated.jsonl`, SpecForge's ShareGPT shape plus `meta`); training reads
either. A `Message` is one `{"role", "content"}` turn: a TypedDict, so curation's steps pass turns around as
plain dicts while the row models validate them (role one of `ROLES`, no other key). `ROLE_ALIASES` is the one
table of speaker names other datasets use (`human`, `gpt`, `bard`, …) for the three roles, and `read_turn` the
one reading of a turn in either shape (`{role, content}` or ShareGPT's `{from, value}`) that every stage's
reader uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, with_config
from typing_extensions import TypedDict  # pydantic reads TypedDicts from typing_extensions on Python 3.11

Role = Literal["system", "user", "assistant"]
ROLES: frozenset[str] = frozenset(get_args(Role))
ROLE_ALIASES: dict[str, Role] = {
    "human": "user",
    "gpt": "assistant", "chatgpt": "assistant", "bard": "assistant", "bing": "assistant", "model": "assistant",
    "bot": "assistant",
}


def canonical_role(name: object) -> str:
    """Return the role `name` stands for, case aside (`gpt` → `assistant`, `User` → `user`); an unknown name is
    returned as it is, for the caller to refuse."""
    text = str(name)
    key = text.strip().lower()
    return key if key in ROLES else ROLE_ALIASES.get(key, text)


def turn_speaker(turn: Mapping[str, Any]) -> str:
    """Return who speaks in `turn` as written: its `role`, else ShareGPT's `from` (empty when neither says)."""
    speaker = turn.get("role")
    if speaker in (None, ""):
        speaker = turn.get("from")
    return "" if speaker is None else str(speaker)


def read_turn(turn: Mapping[str, Any]) -> tuple[str, Any]:
    """Return `(role, content)` of a turn in either shape: the speaker mapped by `canonical_role` and the
    `content`, else ShareGPT's `value` (None when neither is there; the caller decides what text that is)."""
    content = turn.get("content")
    if content is None:
        content = turn.get("value")
    return canonical_role(turn_speaker(turn)), content


@with_config(ConfigDict(extra="forbid"))
class Message(TypedDict):
    """One turn of a conversation."""

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
