"""The one conversation shape every adapter produces, and the drop record every step may return instead.

A conversation is a list of `core.samples.Message` turns (`{"role", "content"}` dicts; the one contract,
imported here for the adapters) with roles `system`, `user`, `assistant` only:
tool calls are rendered into the assistant turn as `<tool_call>{json}</tool_call>` text and tool results
become user turns wrapped in `<tool_response>…</tool_response>`, so every row satisfies SpecForge's rule
(optional system first, then user/assistant alternating from user) and any chat template renders it.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import TypedDict, cast

import numpy as np

from core.samples import ROLES, Role
from core.samples import Message as Message  # the one turn contract, re-exported for the adapters


@dataclass(frozen=True)
class Drop:
    """A row left out, with a reason code (counted in the report) and a human-readable detail."""

    reason: str
    detail: str = ""


class RowExtra(TypedDict, total=False):
    """What the steps learn about a row on its way: token counts (cleaning), prompt keys (dedup, decontamination)."""

    token_count: int  # the whole conversation's tokens
    prompt_tokens: int  # its non-assistant turns' tokens
    prompt_hash: str  # content hash of the normalised prompt text
    words: np.ndarray  # CRC-32 of each word of the normalised prompt (`curation.textkeys.word_hashes`)


@dataclass
class Row:
    """One conversation moving through the pipeline, with its provenance."""

    source_key: str
    row_index: int
    messages: list[Message]
    category: str
    target_native: bool = False
    source_order: int = 0
    extra: RowExtra = field(default_factory=RowExtra)

    @property
    def key(self) -> tuple[str, int]:
        """Return (source key, row index): what tells a row apart from every other row of a run."""
        return self.source_key, self.row_index


def message(role: str, content: object) -> Message:
    """Return a message with `content` coerced to text (None becomes the empty string). An adapter may pass a
    role a dataset names but datahunt does not know: the role check (`role_order_problem`) drops that row."""
    return {"role": cast(Role, role), "content": "" if content is None else str(content)}


def render_tool_call(name: str, arguments: object) -> str:
    """Return the text form of one tool call kept inside an assistant turn."""
    if isinstance(arguments, str):
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.loads(arguments)
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False, sort_keys=True)
    return f"<tool_call>\n{payload}\n</tool_call>"


def render_tool_response(content: object) -> str:
    """Return the text form of a tool result, carried as a user turn."""
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, sort_keys=True)
    return f"<tool_response>\n{text}\n</tool_response>"


def merge_consecutive(messages: list[Message]) -> list[Message]:
    """Return `messages` with neighbouring turns of the same role joined by a blank line.

    Used by trajectory adapters, where an agent log records e.g. the task and a demonstration as two user
    turns in a row; chat adapters do not merge, so a broken conversation is dropped by the role check.
    """
    merged: list[Message] = []
    for msg in messages:
        if merged and merged[-1]["role"] == msg["role"]:
            merged[-1] = {"role": msg["role"], "content": merged[-1]["content"] + "\n\n" + msg["content"]}
        else:
            merged.append(dict(msg))  # type: ignore[arg-type]
    return merged


def role_order_problem(messages: list[Message]) -> str | None:
    """Return why the roles break SpecForge's order (system first only, then user/assistant from user), else None."""
    if not messages:
        return "no turns"
    body = messages[1:] if messages[0]["role"] == "system" else messages
    if not body:
        return "only a system turn"
    for i, msg in enumerate(body):
        if msg["role"] not in ROLES:
            return f"unknown role {msg['role']!r}"
        expected = "user" if i % 2 == 0 else "assistant"
        if msg["role"] != expected:
            return f"turn {i} is {msg['role']}, expected {expected}"
    return None


def prompt_text(messages: list[Message]) -> str:
    """Return the system and user turns joined: what decides a prompt's identity once answers are regenerated."""
    return "\n".join(m["content"] for m in messages if m["role"] != "assistant")


def assistant_chars(messages: list[Message]) -> int:
    """Return the total length of the assistant turns."""
    return sum(len(m["content"]) for m in messages if m["role"] == "assistant")
