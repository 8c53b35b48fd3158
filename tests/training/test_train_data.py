"""Training rows: reading regenerated and curated JSONL, the assistant-only loss mask, and the template check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from training.data import (
    DataError,
    assistant_spans,
    check_template,
    load_conversations,
    tokenize_row,
    tokenize_rows,
)

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


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _byte_level_bpe() -> Any:
    """A small byte-level BPE with a ChatML template: SmolLM2's kind of tokenizer (merges across spaces and
    punctuation, multi-byte characters split into bytes), trained here on a few lines."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["def add(a, b):\n    return a + b", "The answer is 42. Ünïcödé – “quotes” 🙂", "x = [i * i for i in "
              "range(10)]", "Let's think step by step: 3 + 4 = 7."] * 20
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|im_start|>", "<|im_end|>"],
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   chat_template=CHATML)


BPE_ROWS = [
    ("one", [{"role": "user", "content": "add 3 and 4"}, {"role": "assistant", "content": "3 + 4 = 7."}]),
    ("multi", [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Ünïcödé?"},
               {"role": "assistant", "content": "“quotes” 🙂"}, {"role": "user", "content": "code"},
               {"role": "assistant", "content": "def add(a, b):\n    return a + b"}]),
    ("spaces", [{"role": "user", "content": "  lead"}, {"role": "assistant", "content": "  trail  \n\n"}]),
    ("long", [{"role": "user", "content": "x " * 30}, {"role": "assistant", "content": "step by step " * 40}]),
]


@pytest.mark.parametrize("max_length", [10**6, 25, 3])
def test_batched_tokenizing_equals_the_row_by_row_reference(tokenizer: Any, max_length: int,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """`tokenize_rows` (one batched encode, masks by binary search) gives what `tokenize_row` gives, row for row:
    a byte-level BPE and a word-level tokenizer, multi-turn and system turns, truncation, batches that split
    the rows (ENCODE_BATCH 3 over 5 rows)."""
    import training.data

    monkeypatch.setattr(training.data, "ENCODE_BATCH", 3)
    bpe = _byte_level_bpe()
    word_rows = [("w0", TURNS), ("w1", TURNS[:2])]
    for tok, rows in ((bpe, [*BPE_ROWS, ("again", BPE_ROWS[1][1])]), (tokenizer, word_rows)):
        batched = tokenize_rows(tok, rows, max_length)
        assert batched == [tokenize_row(tok, rid, turns, max_length) for rid, turns in rows]
    multi = next(r for r in tokenize_rows(bpe, BPE_ROWS, 10**6) if r.id == "multi")
    supervised = bpe.decode([t for t, m in zip(multi.input_ids, multi.loss_mask, strict=True) if m])
    # Each answer with its end marker and the template's newline after it (the turn's rendering, to its end).
    assert supervised == "“quotes” 🙂<|im_end|>\ndef add(a, b):\n    return a + b<|im_end|>\n"
