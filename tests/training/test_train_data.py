"""Training rows: reading regenerated and curated JSONL, the assistant-only loss mask, and the template check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from training.data import DataError, assistant_spans, check_template, load_conversations, tokenize_row

TURNS = [{"role": "user", "content": "w1 w2"}, {"role": "assistant", "content": "w3 w4"},
         {"role": "user", "content": "w5"}, {"role": "assistant", "content": "w6"}]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_only_assistant_tokens_and_their_end_marker_are_supervised(tokenizer: Any) -> None:
    row = tokenize_row(tokenizer, "r", TURNS, max_length=100)
    tokens = tokenizer.convert_ids_to_tokens(row.input_ids)
    supervised = [t for t, m in zip(tokens, row.loss_mask, strict=True) if m]
    assert supervised == ["w3", "w4", "<|end|>", "w6", "<|end|>"]
    assert tokens[:2] == ["<bos>", "<|user|>"]


def test_template_check_prints_supervised_spans_and_agrees_with_apply_chat_template(tokenizer: Any) -> None:
    check = check_template(tokenizer, TURNS)
    assert check.ids_match, check.detail
    assert check.supervised == ["w3 w4 <|end|>", "w6 <|end|>"]


class _RewritingTemplate:
    """A template that drops earlier assistant turns: no prefix of it is stable, so no mask can be trusted."""

    def apply_chat_template(self, turns: list[dict[str, str]], tokenize: bool = False,
                            add_generation_prompt: bool = False) -> str:
        last = max((i for i, t in enumerate(turns) if t["role"] == "assistant"), default=-1)
        kept = [t for i, t in enumerate(turns) if t["role"] != "assistant" or i == last]
        return "".join(f"[{t['role']}]{t['content']}" for t in kept) + ("[assistant]" if add_generation_prompt else "")


def test_a_template_that_rewrites_history_is_refused() -> None:
    with pytest.raises(DataError, match="not prefix-stable"):
        assistant_spans(_RewritingTemplate(), TURNS)


def test_regenerated_and_curated_fields(tmp_path: Path) -> None:
    path = _write(tmp_path / "rows.jsonl", [
        {"id": "a", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]},
        {"id": "b", "messages": TURNS, "original_messages": TURNS[:2]},
    ])
    rows = load_conversations(path)
    assert [r[0] for r in rows] == ["a", "b"]
    assert rows[0][1][1] == {"role": "assistant", "content": "yo"}
    curated = _write(tmp_path / "curated.jsonl", [{"id": "b", "messages": TURNS, "original_messages": TURNS[:2]}])
    assert len(load_conversations(curated, "original_messages")[0][1]) == 2


@pytest.mark.parametrize(("row", "message"), [
    ({"id": "x"}, "no 'conversations'"),
    ({"conversations": []}, "non-empty list"),
    ({"conversations": [{"role": "user", "content": "hi"}]}, "no assistant turn"),
    ({"conversations": [{"role": "user", "content": ""}, {"role": "assistant", "content": "a"}]}, "non-empty"),
])
def test_bad_rows_name_the_line(tmp_path: Path, row: dict[str, Any], message: str) -> None:
    path = _write(tmp_path / "bad.jsonl", [{"conversations": TURNS[:2]}, row])
    with pytest.raises(DataError, match=message) as err:
        load_conversations(path)
    assert ":2:" in str(err.value)


def test_curated_rows_holding_line_separators_load_whole(tmp_path: Path) -> None:
    # `train --messages-field original_messages` on a curated samples.jsonl with GSM8K's U+2028
    turns = [{"role": "user", "content": "a\u2028b\u2029c\rd"}, {"role": "assistant", "content": "e\u2028f"}]
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps({"id": "s", "original_messages": turns}, ensure_ascii=False) + "\n", encoding="utf-8")
    assert load_conversations(path, "original_messages") == [("s", turns)]
