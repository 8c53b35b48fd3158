"""The records a regeneration run writes, key by key: the rows of `regenerated.jsonl` and `errors.jsonl`.

`core/samples.py`'s `RegeneratedSample` validates a row as SpecForge reads it (`{id, conversations, meta}`,
`meta` left open); these TypedDicts say what the runner writes in it, so the writer and the readers of a
run's files name the same keys. A row the target answered (`RegeneratedRow`) carries a `RegenMeta` with one
`TurnMeta` per answered user turn (the speculative counters only where the server reported them;
`sample`/`prompt_id` only with several answers per prompt); a target-native row written through unchanged
(`PassthroughRow`) carries a `PassthroughMeta`; a row that finally failed is a `FailedRecord` in
`errors.jsonl`. A row that uses tools carries its `tools`, its assistant turns their structured `tool_calls`,
and, when the target's calls left the recording, where and why it stopped (`StopMeta`: the prefix before is
kept). Rows written by earlier versions may lack keys added since, so readers of files use `.get`.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from core.tool_calls import Tool


class TurnMeta(TypedDict):
    """One answered turn: how it ended, its tokens, which server answered, how long and how many attempts."""

    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    server: str  # the endpoint URL, or an in-process backend's own name
    latency_s: float
    attempts: int
    model: str | None
    spec_verify_ct: NotRequired[int]
    spec_accept_length: NotRequired[float]
    spec_num_correct_drafts: NotRequired[int]
    spec_num_proposed_drafts: NotRequired[int]
    reasoning_chars: NotRequired[int]


class StopMeta(TypedDict):
    """Where a row's regeneration stopped before its end: the answer (0-based), the reason code, in words."""

    turn: int
    reason: str
    detail: str


class RegenMeta(TypedDict):
    """A regenerated row's meta: the last turn's finish and server, totals over the turns, and the settings."""

    regenerated: bool  # True
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    server: str
    latency_s: float
    api: str
    model: str | None
    sampling: dict[str, float | int | None]  # Sampling.model_dump(): temperature, top_p, max_tokens, seed
    reasoning: str  # how the target's thinking was served (core.chat_render.Reasoning)
    tool_rendering: NotRequired[str]  # native | text: how tool calls reached the prompts (core.chat_render)
    stopped: NotRequired[StopMeta]
    turns: list[TurnMeta]
    category: str | None
    source: Any  # the curated row's source, as curation wrote it
    sample: NotRequired[int]
    prompt_id: NotRequired[str]
    spec_verify_ct: NotRequired[int]
    spec_num_correct_drafts: NotRequired[int]
    spec_num_proposed_drafts: NotRequired[int]


class PassthroughMeta(TypedDict):
    """A target-native row's meta: written through unchanged, and why."""

    regenerated: bool  # False
    reason: str
    category: str | None
    source: Any


class RegeneratedRow(TypedDict):
    """A row of `regenerated.jsonl` that the target answered."""

    id: str
    conversations: list[dict[str, Any]]
    meta: RegenMeta
    tools: NotRequired[list[Tool]]


class PassthroughRow(TypedDict):
    """A row of `regenerated.jsonl` written through unchanged (target-native)."""

    id: str
    conversations: list[dict[str, Any]]
    meta: PassthroughMeta
    tools: NotRequired[list[Tool]]


RegeneratedRecord = RegeneratedRow | PassthroughRow  # any row of `regenerated.jsonl`


class FailedRecord(TypedDict):
    """A row of `errors.jsonl`: the final error of a row, and where it happened."""

    id: str
    error: str
    status_code: int | None
    attempts: int
    turn: int
    server: str | None
    api: str
    category: str | None
    source: Any
