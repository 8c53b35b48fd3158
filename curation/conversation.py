"""The one conversation shape every adapter produces, and the drop record every step may return instead.

A conversation is a list of `core.samples.Message` turns (the one contract, imported here for the adapters):
`system`, `user` and `assistant` turns as SpecForge orders them (optional system first, then user/assistant
alternating from user), plus tool use kept structured as OpenAI writes it: an assistant turn's `tool_calls`
and the `tool` turns answering them (`tool_call_id`), which the target's own chat template renders later
(`core.chat_render`). The row's `tools` schema travels beside the turns (`Row.tools`). A tool call or result
that cannot be read is the row's `Drop`, counted under the reason `core.tool_calls` names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TypedDict, cast

import numpy as np

from core.samples import ROLES, Role
from core.samples import Message as Message  # the one turn contract, re-exported for the adapters
from core.tool_calls import Tool, ToolCall, ToolFormatError


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
    tools: list[Tool] | None = None

    @property
    def key(self) -> tuple[str, int]:
        """Return (source key, row index): what tells a row apart from every other row of a run."""
        return self.source_key, self.row_index


def message(role: str, content: object) -> Message:
    """Return a message with `content` coerced to text (None becomes the empty string). An adapter may pass a
    role a dataset names but datahunt does not know: the role check (`role_order_problem`) drops that row."""
    return {"role": cast(Role, role), "content": "" if content is None else str(content)}


def assistant_calls(content: object, calls: list[ToolCall]) -> Message:
    """Return an assistant turn that says `content` (None: nothing) and makes `calls`."""
    turn = message("assistant", content)
    if calls:
        turn["tool_calls"] = calls
    return turn


def tool_result(content: object, call_id: object = None) -> Message:
    """Return a `tool` turn carrying a result (JSON values as their JSON text), answering `call_id` if named."""
    text = content if isinstance(content, str) or content is None else json.dumps(content, ensure_ascii=False,
                                                                                   sort_keys=True)
    turn = message("tool", text)
    if isinstance(call_id, str) and call_id:
        turn["tool_call_id"] = call_id
    return turn


def tool_drop(exc: ToolFormatError) -> Drop:
    """Return the drop of a row whose tool use cannot be read, under the reason the error names."""
    return Drop(exc.reason, exc.detail)


def merge_consecutive(messages: list[Message]) -> list[Message]:
    """Return `messages` with neighbouring turns of the same role joined by a blank line (an assistant turn's
    calls joined too); tool turns are never joined, each answers its own call.

    Used by trajectory adapters, where an agent log records e.g. the task and a demonstration as two user
    turns in a row; chat adapters do not merge, so a broken conversation is dropped by the role check.
    """
    merged: list[Message] = []
    for msg in messages:
        last = merged[-1] if merged else None
        if last is not None and last["role"] == msg["role"] != "tool" and not last.get("tool_calls"):
            text = "\n\n".join(t for t in (last["content"], msg["content"]) if t)
            merged[-1] = {**msg, "content": text}  # the later turn's calls, if any, end the joined turn
        else:
            merged.append(dict(msg))  # type: ignore[arg-type]
    return merged


def role_order_problem(messages: list[Message]) -> str | None:
    """Return why the roles break the order, else None: an optional system turn first, then user and assistant
    alternating from user, where an assistant turn that calls tools may be followed by the `tool` turns
    answering them, and those by the assistant again (or by the user)."""
    if not messages:
        return "no turns"
    body = messages[1:] if messages[0]["role"] == "system" else messages
    if not body:
        return "only a system turn"
    previous = None
    for i, msg in enumerate(body):
        role = msg["role"]
        if role not in ROLES or role == "system":
            return f"unknown role {role!r}" if role not in ROLES else f"turn {i} is a system turn after the first"
        if role == "tool":
            calls = previous is not None and (previous["role"] == "tool" or bool(previous.get("tool_calls")))
            if not calls:
                return f"turn {i} is a tool result with no tool call before it"
        else:
            allowed = {"user": (None, "assistant", "tool"), "assistant": ("user", "tool")}[role]
            if (previous["role"] if previous is not None else None) not in allowed:
                expected = "user" if previous is None or previous["role"] == "assistant" else "assistant"
                return f"turn {i} is {role}, expected {expected}"
        previous = msg
    return None


def turn_text(turn: Message) -> str:
    """Return what a turn says: its text, and for each tool call it makes the function's name and arguments."""
    calls = [f"{c['function']['name']} {c['function']['arguments']}" for c in turn.get("tool_calls") or []]
    return "\n".join([turn["content"], *calls]) if calls else turn["content"]


def prompt_text(messages: list[Message]) -> str:
    """Return the system, user and tool-result turns joined: what decides a prompt's identity once answers are
    regenerated."""
    return "\n".join(m["content"] for m in messages if m["role"] != "assistant")


def assistant_chars(messages: list[Message]) -> int:
    """Return the total length of the assistant turns."""
    return sum(len(m["content"]) for m in messages if m["role"] == "assistant")
