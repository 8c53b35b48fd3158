"""The prompts `eval-accept` measures on: each held-out row cut to what the user said, rendered once.

The prompt files of the field are read as they come, one JSON object a line:
- EAGLE-bench and MT-bench: `{"question_id", "category", "turns": ["first user turn", ...]}`; the first turn is
  the prompt (a later turn follows an answer the file does not hold);
- SpecForge: `{"id", "conversations": [{"role", "content"}, ...]}` (or ShareGPT's `{from, value}` turns);
- OpenAI: `{"messages": [{"role", "content"}, ...]}`;
- `{"text": ...}`, taken literally (no chat template).
A conversation is cut before its first assistant turn; each turn is read by the one turn reader
(`core.samples.read_turn`). `read_prompts` reads and checks a whole file before anything loads a model: a row
in none of these shapes is a `DataError` naming the file and the row. The tokenizer and chat renderer come
from the caller (the target's), so this module loads no model.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

from core.jsonl import JsonlError, iter_jsonl
from core.samples import read_turn
from training.data import DataError

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


def prompt_turns(row: PromptRow) -> list[dict[str, str]]:
    """The conversation up to its first assistant turn (held-out rows keep only what the user said), each turn
    read by the one turn reader (`core.samples.read_turn`: `{role, content}` or ShareGPT's `{from, value}`);
    a benchmark row's `turns` give its first user turn."""
    if isinstance(row.get("turns"), list) and row["turns"]:
        first_turn = row["turns"][0]
        return [{"role": "user", "content": str(first_turn)}] if isinstance(first_turn, str) and first_turn else []
    turns = [read_turn(t) for t in row.get("conversations") or row.get("messages") or []]
    first = next((i for i, (role, _) in enumerate(turns) if role == "assistant"), len(turns))
    return [{"role": role, "content": "" if content is None else str(content)} for role, content in turns[:first]]


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
