"""The prompts `eval-accept` measures on: each held-out row cut to what the target is asked, rendered once.

The prompt files of the field are read as they come, one JSON object a line:
- EAGLE-bench and MT-bench: `{"question_id", "category", "turns": ["first user turn", ...]}`; the first turn is
  the prompt (a later turn follows an answer the file does not hold);
- SpecForge: `{"id", "conversations": [{"role", "content"}, ...]}` (or ShareGPT's `{from, value}` turns);
- OpenAI: `{"messages": [{"role", "content"}, ...]}`, with the `tools` a row offers;
- `{"text": ...}`, taken literally (no chat template).
Each turn is read by the one turn reader (`core.samples.read_message`, tool calls and results kept). A
conversation that ends in an answer is cut before its first assistant turn (a regenerated row asks its first
question); one that ends in a user or tool turn is asked whole (an agentic row at any of its turns, its earlier
calls and results rendered as served). Rendering goes through the one renderer (`core.chat_render`) with the
reasoning mode and tool rendering the draft was trained with, so evaluation sees what training and serving see.
`read_prompts` reads and checks a whole file before anything loads a model: a row in none of these shapes is a
`DataError` naming the file and the row. The tokenizer comes from the caller (the target's), so this module
loads nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

from core.chat_render import encode_text, render_text
from core.jsonl import JsonlError, iter_jsonl
from core.samples import read_message
from core.tool_calls import Tool, ToolFormatError, read_tools
from training.data import DEFAULT_RENDERING, DataError, Rendering

NO_TURNS = "a prompt row has neither 'text' nor user turns"
SHAPES = ("'turns' (EAGLE-bench, MT-bench)", "'conversations' (SpecForge, ShareGPT)", "'messages' (OpenAI)", "'text'")


class PromptRow(TypedDict, total=False):
    """One held-out row (a JSONL line): literal `text`, a conversation under `conversations` or `messages`
    (each turn in either shape `read_turn` reads), or the user turns of a benchmark under `turns`; other keys
    (`id`, `question_id`, `category`, `reference`) are ignored."""

    text: str
    conversations: list[Mapping[str, object]]
    messages: list[Mapping[str, object]]
    turns: list[str]
    tools: object


def prompt_turns(row: PromptRow) -> list[dict[str, Any]]:
    """What the row asks: a benchmark row's first user turn (`turns`); a conversation whole when it ends in a
    user or tool turn, else its turns before its first assistant turn; each turn read by the one turn reader
    (`core.samples.read_message`: `{role, content}` or ShareGPT's `{from, value}`, tool calls and results kept)."""
    if isinstance(row.get("turns"), list) and row["turns"]:
        first_turn = row["turns"][0]
        return [{"role": "user", "content": str(first_turn)}] if isinstance(first_turn, str) and first_turn else []
    raw = row.get("conversations") or row.get("messages") or []

    def read(index: int) -> dict[str, Any]:
        try:
            return dict(read_message(raw[index], index))
        except ToolFormatError as exc:
            raise DataError(f"a prompt row's tool call cannot be read: {exc.detail}") from None

    if raw and read(len(raw) - 1)["role"] != "assistant":
        return [read(i) for i in range(len(raw))]
    turns = []  # only the turns before the first answer are the prompt: a damaged later turn is never read
    for index in range(len(raw)):
        turn = read(index)
        if turn["role"] == "assistant":
            break
        turns.append(turn)
    return turns


def prompt_tools(row: PromptRow) -> list[Tool] | None:
    """The tools a prompt row offers (None when it offers none); DataError when they cannot be read."""
    try:
        return read_tools(row.get("tools"))
    except ToolFormatError as exc:
        raise DataError(f"a prompt row's tools cannot be read: {exc.detail}") from None


def _problem(row: Any) -> str | None:
    """Why `row` is no prompt, or None when it is one."""
    if not isinstance(row, Mapping):
        return f"a prompt row is a JSON object, not {type(row).__name__}"
    if "text" in row:
        return None if isinstance(row["text"], str) and row["text"] else "'text' is not a non-empty string"
    for key in ("turns", "conversations", "messages"):
        if key in row and not isinstance(row[key], list):
            return f"'{key}' is not a list"
    try:
        turns = prompt_turns(row)  # type: ignore[arg-type]  # checked to be a mapping of the shapes above
    except (AttributeError, TypeError, ValueError) as exc:
        return f"a turn cannot be read ({exc})"
    if not any(t["role"] == "user" and t["content"].strip() for t in turns):
        keys = ", ".join(sorted(map(str, row))[:8]) or "none"
        return f"{NO_TURNS}: expected one of {', '.join(SHAPES)} (its keys: {keys})"
    return None


def read_prompts(path: Path, *, limit: int | None = None) -> list[PromptRow]:
    """Return the prompt rows of the JSONL file `path` (the first `limit`), every one checked; raise
    DataError naming the file and the line of the first row that is no prompt, or a file with none."""
    if not path.is_file():
        raise DataError(f"prompts file {path} does not exist")
    rows: list[PromptRow] = []
    try:
        for number, row in iter_jsonl(path):
            if limit is not None and len(rows) >= limit:
                break
            problem = _problem(row)
            if problem is not None:
                raise DataError(f"{path}:{number}: {problem}")
            rows.append(row)
    except JsonlError as exc:
        raise DataError(str(exc)) from None
    except OSError as exc:
        raise DataError(f"prompts file {path} cannot be read: {exc.strerror or exc}") from None
    if not rows:
        raise DataError(f"{path}: no prompts")
    return rows


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
