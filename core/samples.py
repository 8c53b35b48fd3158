"""The rows stages hand each other: a chat message, a curated sample, a regenerated sample (DESIGN.md: Contracts).

Curation writes `CuratedSample` rows (Parquet shards, `samples.jsonl`); regeneration reads them and writes
`RegeneratedSample` rows (`regenerated.jsonl`, SpecForge's ShareGPT shape plus `meta`); training reads
either. A `Message` is one `{"role", "content"}` turn, OpenAI-style: an assistant turn may carry structured
`tool_calls`, a `tool` turn answers one of them by `tool_call_id` (`core.tool_calls`), and a row may carry the
`tools` it offers; tool calls stay structured until the target's own chat template renders them
(`core.chat_render`). A Message is a TypedDict, so curation's steps pass turns around as plain dicts while the
row models validate them (role one of `ROLES`, no unknown key). `ROLE_ALIASES` is the one table of speaker
names other datasets use (`human`, `gpt`, `bard`, …) for the roles, `read_turn` the one reading of a turn's
speaker and text in either shape (`{role, content}` or ShareGPT's `{from, value}`), and `read_message` the one
reading of a whole turn, tool fields included, that every stage's reader uses. Rows written before tool turns
were structured hold them as text (`<tool_call>` blocks, `<tool_response>` user turns): they read as the text
they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NotRequired, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, with_config
from typing_extensions import TypedDict  # pydantic reads TypedDicts from typing_extensions on Python 3.11

from core.tool_calls import Tool, ToolCall, read_calls, read_tools

Role = Literal["system", "user", "assistant", "tool"]
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
    """One turn of a conversation: an assistant turn may carry `tool_calls`, a `tool` turn its `tool_call_id`."""

    role: Role
    content: str
    tool_calls: NotRequired[list[ToolCall]]
    tool_call_id: NotRequired[str]


def read_message(turn: Mapping[str, Any], index: int = 0) -> Message:
    """Return one turn in the contract's shape from any reader's row: role and text as `read_turn` reads them
    (None text is the empty string), an assistant turn's `tool_calls` (ids `call_<index>_<k>` where a call names
    none) and a tool turn's `tool_call_id`; keys a columnar file fills with None are left out. The role is not
    checked here (the caller refuses one outside `ROLES`). Raise `core.tool_calls.ToolFormatError` for calls
    that cannot be read."""
    role, content = read_turn(turn)
    out: dict[str, Any] = {"role": role, "content": "" if content is None else str(content)}
    calls = turn.get("tool_calls")
    if role == "assistant" and calls:
        out["tool_calls"] = read_calls(calls, f"call_{index}")
    call_id = turn.get("tool_call_id")
    if role == "tool" and isinstance(call_id, str) and call_id:
        out["tool_call_id"] = call_id
    return out  # type: ignore[return-value]  # the keys above are Message's


def _drop_nones(turns: object) -> object:
    """Turns as written, less the optional keys a Parquet column holds as None (a turn without tool calls)."""
    if not isinstance(turns, list):
        return turns
    return [{k: v for k, v in t.items() if v is not None or k in ("role", "content")} if isinstance(t, dict) else t
            for t in turns]


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
    tools: list[Tool] | None = None

    @field_validator("messages", "original_messages", mode="before")
    @classmethod
    def _columnar_turns(cls, value: object) -> object:
        return _drop_nones(value)

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, value: object) -> object:
        """The tools as written: a list, or (in the Parquet shards) its JSON text."""
        return read_tools(value)


class RegeneratedSample(BaseModel):
    """A row of `regenerated.jsonl`: SpecForge's `{id, conversations}` plus what the run recorded in `meta`
    (`regenerated`, `finish_reason`, tokens, server, latency, model, sampling, category, source, per-turn data)."""

    id: str
    conversations: list[Message]
    meta: dict[str, Any] = Field(default_factory=dict)
    tools: list[Tool] | None = None
