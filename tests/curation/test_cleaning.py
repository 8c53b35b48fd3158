"""Cleaning steps: each drop reason, the runner's counting and the side channel for dropped rows."""

from __future__ import annotations

from curation.cleaning import (
    DEFAULT_STEPS,
    CleaningConfig,
    StepParams,
    StepRunner,
    language,
    nonempty_turns,
    repetition,
    role_order,
    token_length,
    valid_utf8,
)
from curation.conversation import Drop, Row
from curation.tokens import TokenCounter, approximate_tokens

PARAMS = StepParams(config=CleaningConfig(min_tokens=3, max_tokens=200), counter=TokenCounter())


def _row(*turns: tuple[str, str]) -> Row:
    return Row("a/b", 0, [{"role": r, "content": c} for r, c in turns], "general_chat")


GOOD = _row(("system", "Be brief."), ("user", "What is the capital of France?"), ("assistant", "Paris."))


def test_good_row_passes_every_step() -> None:
    result = GOOD
    for step in DEFAULT_STEPS:
        result = step(result, PARAMS)  # type: ignore[arg-type]
    assert isinstance(result, Row) and result.extra["token_count"] > 3


def test_each_step_drops_with_its_reason() -> None:
    assert valid_utf8(_row(("user", "bad \udce9 byte"), ("assistant", "x")), PARAMS) == Drop(
        "invalid_utf8", "user turn: surrogates not allowed at 4"
    )
    assert nonempty_turns(_row(("user", "hi"), ("assistant", "  \n")), PARAMS).reason == "empty_turn"  # type: ignore[union-attr]
    assert role_order(_row(("assistant", "hi"), ("user", "x")), PARAMS).reason == "role_order"  # type: ignore[union-attr]
    assert role_order(_row(("user", "a"), ("system", "b")), PARAMS).reason == "role_order"  # type: ignore[union-attr]
    assert role_order(_row(("user", "a"), ("user", "b")), PARAMS).reason == "role_order"  # type: ignore[union-attr]
    assert token_length(_row(("user", "hi")), PARAMS).reason == "too_short"  # type: ignore[union-attr]
    assert token_length(_row(("user", "word " * 300)), PARAMS).reason == "too_long"  # type: ignore[union-attr]
    cyrillic = "Привет, как дела? Это длинный текст на русском языке для проверки фильтра."
    assert language(_row(("user", cyrillic), ("assistant", cyrillic)), PARAMS).reason == "language"  # type: ignore[union-attr]
    code = "def add(a, b):\n    return a + b  # сумма\n" * 3
    assert isinstance(language(_row(("user", code)), PARAMS), Row)
    looping = "I am sure. " * 40
    assert repetition(_row(("user", "go"), ("assistant", looping)), PARAMS).reason == "repetition"  # type: ignore[union-attr]


def test_runner_counts_drops_and_hands_them_aside() -> None:
    aside: list[tuple[int, str]] = []
    rows = [GOOD, _row(("assistant", "x y z w")), _row(("user", "")), GOOD]
    runner = StepRunner(DEFAULT_STEPS, PARAMS, lambda row, drop: aside.append((id(row), drop.reason)))
    kept = list(runner.run(rows))
    assert len(kept) == 2
    assert dict(runner.drops) == {"role_order": 1, "empty_turn": 1}
    assert [reason for _, reason in aside] == ["role_order", "empty_turn"]


def test_approximate_tokens_tracks_words_and_punctuation() -> None:
    assert approximate_tokens("Hello, world!") == 4
    assert approximate_tokens("internationalization") == 4
