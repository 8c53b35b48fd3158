"""Cleaning steps in the datatrove manner: each is `(row, params) -> row | Drop(reason)`, applied by one runner.

Steps, in order: `valid_utf8` (text that cannot be encoded, e.g. lone surrogates from bad bytes),
`nonempty_turns` (an empty or whitespace-only turn; an assistant turn that only calls tools, or a tool
result, may have no text), `role_order` (SpecForge's rule: an optional system
turn first, then user/assistant alternating from user), `token_length` (whole conversation within
[min_tokens, max_tokens]), `language` (a script heuristic: among at least 40 letters, under half are Latin
— cheap, no model, and code passes), `repetition` (a turn of 60+ words whose distinct word 3-grams are
under 30% of all its 3-grams, i.e. looping text). The runner counts drops by reason and hands each
dropped row to a callback that writes it aside.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from curation.conversation import Drop, Row, role_order_problem, turn_text
from curation.tokens import TokenCounter


class CleaningConfig(BaseModel):
    """Thresholds of the cleaning steps (part of the manifest; defaults suit chat and code)."""

    model_config = ConfigDict(extra="forbid")

    min_tokens: int = Field(default=8, ge=0, description="Fewest tokens a conversation may have.")
    max_tokens: int = Field(default=32_768, gt=0, description="Most tokens a conversation may have.")
    latin_languages: bool = Field(default=True, description="Keep only text written mostly in Latin script.")
    min_distinct_trigrams: float = Field(default=0.3, ge=0, le=1, description="Repetition threshold.")


@dataclass
class StepParams:
    """What the steps need besides the row: the thresholds and the token counter."""

    config: CleaningConfig
    counter: TokenCounter


Step = Callable[[Row, StepParams], "Row | Drop"]


def valid_utf8(row: Row, params: StepParams) -> Row | Drop:
    """Drop a row whose text is not valid Unicode (cannot be written as UTF-8)."""
    for msg in row.messages:
        try:
            msg["content"].encode("utf-8")
        except UnicodeEncodeError as exc:
            return Drop("invalid_utf8", f"{msg['role']} turn: {exc.reason} at {exc.start}")
    return row


def nonempty_turns(row: Row, params: StepParams) -> Row | Drop:
    """Drop a row with an empty or whitespace-only turn (a tool result, or a turn that calls tools, may be empty)."""
    for i, msg in enumerate(row.messages):
        if not msg["content"].strip() and msg["role"] != "tool" and not msg.get("tool_calls"):
            return Drop("empty_turn", f"turn {i} ({msg['role']}) is empty")
    return row


def role_order(row: Row, params: StepParams) -> Row | Drop:
    """Drop a row whose roles break SpecForge's order (tool results allowed after the calls they answer)."""
    problem = role_order_problem(row.messages)
    return Drop("role_order", problem) if problem else row


def token_length(row: Row, params: StepParams) -> Row | Drop:
    """Count tokens (stored on the row; a turn's tool calls count with its text) and drop conversations outside
    the bounds."""
    per_turn = [params.counter.count(turn_text(m)) for m in row.messages]
    tokens = sum(per_turn)
    row.extra["token_count"] = tokens
    row.extra["prompt_tokens"] = sum(n for n, m in zip(per_turn, row.messages, strict=True) if m["role"] != "assistant")
    if tokens < params.config.min_tokens:
        return Drop("too_short", f"{tokens} tokens < {params.config.min_tokens}")
    if tokens > params.config.max_tokens:
        return Drop("too_long", f"{tokens} tokens > {params.config.max_tokens}")
    return row


_LETTER = re.compile(r"[^\W\d_]")


def latin_share(text: str) -> tuple[float, int]:
    """Return (share of letters in Latin script, number of letters) over the first 2,000 characters."""
    sample = text[:2000]
    letters = _LETTER.findall(sample)
    if sample.isascii():
        return 1.0, len(letters)
    latin = sum(1 for ch in letters if ch.isascii() or "LATIN" in unicodedata.name(ch, ""))
    return (latin / len(letters) if letters else 1.0), len(letters)


def language(row: Row, params: StepParams) -> Row | Drop:
    """Drop a row written mostly outside the Latin script (when the config asks for Latin languages)."""
    if not params.config.latin_languages:
        return row
    share, letters = latin_share(" ".join(m["content"] for m in row.messages))
    if letters >= 40 and share < 0.5:
        return Drop("language", f"{share:.0%} of {letters} letters are Latin")
    return row


def repetition(row: Row, params: StepParams) -> Row | Drop:
    """Drop a row with a looping turn: too few distinct word 3-grams."""
    for i, msg in enumerate(row.messages):
        words = msg["content"].split()
        if len(words) < 60:
            continue
        grams = list(zip(words, words[1:], words[2:], strict=False))
        share = len(set(grams)) / len(grams)
        if share < params.config.min_distinct_trigrams:
            return Drop("repetition", f"turn {i}: {share:.0%} distinct 3-grams")
    return row


DEFAULT_STEPS: tuple[Step, ...] = (valid_utf8, nonempty_turns, role_order, token_length, language, repetition)


@dataclass
class StepRunner:
    """Applies steps to rows, counting drops by reason; `on_drop(row, drop)` receives every dropped row."""

    steps: Iterable[Step]
    params: StepParams
    on_drop: Callable[[Row, Drop], None] = lambda row, drop: None
    drops: Counter[str] = field(default_factory=Counter)

    def run(self, rows: Iterable[Row]) -> Iterator[Row]:
        """Yield the rows that pass every step."""
        steps = tuple(self.steps)
        for row in rows:
            result: Row | Drop = row
            for step in steps:
                result = step(result, self.params)  # type: ignore[arg-type]
                if isinstance(result, Drop):
                    break
            if isinstance(result, Drop):
                self.drops[result.reason] += 1
                self.on_drop(row, result)
            else:
                yield result
