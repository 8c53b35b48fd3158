"""The prompts `eval-accept` measures on: each held-out row cut to what the user said, rendered once.

A row is `{"text": ...}` (taken literally) or a conversation (`conversations`/`messages`, each turn read by
the one turn reader, `core.samples.read_turn`) cut before its first assistant turn. A row with neither is a
`DataError`. The tokenizer and chat renderer come from the caller (the target's), so this module loads nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from core.samples import read_turn
from training.data import DataError

NO_TURNS = "a prompt row has neither 'text' nor user turns"


class PromptRow(TypedDict, total=False):
    """One held-out row (a JSONL line): literal `text`, or a conversation under `conversations` or `messages`,
    each turn in either shape `read_turn` reads; other keys are ignored."""

    text: str
    conversations: list[Mapping[str, object]]
    messages: list[Mapping[str, object]]


def prompt_turns(row: PromptRow) -> list[dict[str, str]]:
    """The conversation up to its first assistant turn (held-out rows keep only what the user said), each turn
    read by the one turn reader (`core.samples.read_turn`: `{role, content}` or ShareGPT's `{from, value}`)."""
    turns = [read_turn(t) for t in row.get("conversations") or row.get("messages") or []]
    first = next((i for i, (role, _) in enumerate(turns) if role == "assistant"), len(turns))
    return [{"role": role, "content": "" if content is None else str(content)} for role, content in turns[:first]]


def _turns_or_fail(row: PromptRow) -> list[dict[str, str]]:
    turns = prompt_turns(row)
    if not turns:
        raise DataError(NO_TURNS)
    return turns


def encode_prompt(tokenizer: Any, row: PromptRow) -> list[int]:
    """The token ids of `row` for local decoding: its text as is, or its turns through the chat template."""
    if "text" in row:
        return list(tokenizer(row["text"], add_special_tokens=False)["input_ids"])
    encoded = tokenizer.apply_chat_template(_turns_or_fail(row), tokenize=True, add_generation_prompt=True)
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


def server_prompt(row: PromptRow, renderer: Any, send_text: bool) -> str | list[int]:
    """One prompt for a server's `/generate`: token ids rendered by `renderer` (no special tokens added), or
    with `send_text` the rendered text; a `text` row is taken literally either way. `renderer` may be None
    only for a `text` row sent as text."""
    if "text" in row and send_text:
        return str(row["text"])
    if "text" in row:
        return list(renderer.tokenizer(str(row["text"]), add_special_tokens=False)["input_ids"])
    turns = _turns_or_fail(row)
    return str(renderer.render(turns)) if send_text else list(renderer.render_ids(turns))
