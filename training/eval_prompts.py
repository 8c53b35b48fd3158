"""The prompts `eval-accept` measures on: each held-out row cut to what the target is asked, rendered once.

A row is `{"text": ...}` (taken literally) or a conversation (`conversations`/`messages`, each turn read by
the one turn reader, `core.samples.read_message`, tool calls and results kept) with the `tools` it offers. A
conversation that ends in an answer is cut before its first assistant turn (a regenerated row asks its first
question); one that ends in a user or tool turn is asked whole (an agentic row at any of its turns, its earlier
calls and results rendered as served). Rendering goes through the one renderer (`core.chat_render`) with the
reasoning mode and tool rendering the draft was trained with, so evaluation sees what training and serving see.
A row with neither text nor turns is a `DataError`. The tokenizer comes from the caller (the target's), so this
module loads nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from core.chat_render import encode_text, render_text
from core.samples import read_message
from core.tool_calls import Tool, ToolFormatError, read_tools
from training.data import DEFAULT_RENDERING, DataError, Rendering

NO_TURNS = "a prompt row has neither 'text' nor user turns"


class PromptRow(TypedDict, total=False):
    """One held-out row (a JSONL line): literal `text`, or a conversation under `conversations` or `messages`,
    each turn in either shape `read_turn` reads; other keys are ignored."""

    text: str
    conversations: list[Mapping[str, object]]
    messages: list[Mapping[str, object]]
    tools: object


def prompt_turns(row: PromptRow) -> list[dict[str, Any]]:
    """What the row asks: the whole conversation when it ends in a user or tool turn, else the turns before its
    first assistant turn; each turn read by the one turn reader (`core.samples.read_message`: `{role, content}`
    or ShareGPT's `{from, value}`, tool calls and results kept)."""
    try:
        turns = [dict(read_message(t, i)) for i, t in enumerate(row.get("conversations") or row.get("messages") or [])]
    except ToolFormatError as exc:
        raise DataError(f"a prompt row's tool call cannot be read: {exc.detail}") from None
    if turns and turns[-1]["role"] != "assistant":
        return turns
    first = next((i for i, turn in enumerate(turns) if turn["role"] == "assistant"), len(turns))
    return turns[:first]


def prompt_tools(row: PromptRow) -> list[Tool] | None:
    """The tools a prompt row offers (None when it offers none); DataError when they cannot be read."""
    try:
        return read_tools(row.get("tools"))
    except ToolFormatError as exc:
        raise DataError(f"a prompt row's tools cannot be read: {exc.detail}") from None


def _turns_or_fail(row: PromptRow) -> list[dict[str, Any]]:
    turns = prompt_turns(row)
    if not turns:
        raise DataError(NO_TURNS)
    return turns


def render_prompt(tokenizer: Any, row: PromptRow, rendering: Rendering = DEFAULT_RENDERING) -> str:
    """The rendered text of a conversation row, generation prompt appended, as the draft's training rendered it."""
    return render_text(tokenizer, _turns_or_fail(row), tools=prompt_tools(row), reasoning=rendering.reasoning,
                       tool_rendering=rendering.tool_rendering, add_generation_prompt=True)


def encode_prompt(tokenizer: Any, row: PromptRow, rendering: Rendering = DEFAULT_RENDERING) -> list[int]:
    """The token ids of `row` for local decoding: its text as is, or its turns through the chat template."""
    if "text" in row:
        return encode_text(tokenizer, row["text"])
    return encode_text(tokenizer, render_prompt(tokenizer, row, rendering))


def server_prompt(row: PromptRow, renderer: Any, send_text: bool, rendering: Rendering = DEFAULT_RENDERING
                  ) -> str | list[int]:
    """One prompt for a server's `/generate`: token ids rendered with `renderer`'s tokenizer (no special tokens
    added), or with `send_text` the rendered text; a `text` row is taken literally either way. `renderer` may be
    None only for a `text` row sent as text."""
    if "text" in row and send_text:
        return str(row["text"])
    if "text" in row:
        return encode_text(renderer.tokenizer, str(row["text"]))
    text = render_prompt(renderer.tokenizer, row, rendering)
    return text if send_text else encode_text(renderer.tokenizer, text)
