"""Deduplication: keep-best rule, exact stage, and the near stage's precision and recall on planted copies."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from curation.adapters import adapt
from curation.conversation import Drop, Row
from curation.dedup import NUM_PERM, deduplicate, near_duplicates, shingles, signatures
from curation.loading import read_records
from curation.planted import plant_copies, scores
from curation.textkeys import word_hashes

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"


def _real_rows() -> list[Row]:
    rows: list[Row] = []
    for order, (name, fmt) in enumerate(
        [("openai/gsm8k/train.jsonl", "qa"), ("llamafactory/demo_data/alpaca_en_demo.json", "alpaca")]
    ):
        for i, record in enumerate(read_records(MIRROR / name)):
            messages = adapt(record, fmt, {})
            if not isinstance(messages, Drop) and len(messages[0]["content"].split()) >= 25:
                rows.append(Row(name, i, messages, "math", False, order))
    return rows


def test_keep_best_rule() -> None:
    prompt = [{"role": "user", "content": "Explain recursion with an example please."}]
    short = Row("a/a", 0, [*prompt, {"role": "assistant", "content": "short"}], "code_explanation", False, 0)
    long = Row(
        "b/b",
        5,
        [*prompt, {"role": "assistant", "content": "a much longer answer"}],
        "code_explanation",
        False,
        1,
    )
    native = Row("c/c", 9, [*prompt, {"role": "assistant", "content": "x"}], "code_explanation", True, 2)
    result = deduplicate([short, long])
    assert result.kept == [long] and result.exact == [(short, long)]
    result = deduplicate([short, long, native])
    assert result.kept == [native] and {d.source_key for d, _ in result.exact} == {"a/a", "b/b"}


def test_exact_stage_ignores_case_and_spacing() -> None:
    a = Row("a/a", 0, [{"role": "user", "content": "Hello  World\nagain"}], "general_chat")
    b = Row("a/a", 1, [{"role": "user", "content": "hello world AGAIN"}], "general_chat")
    result = deduplicate([a, b], near=False)
    assert result.kept == [a] and len(result.exact) == 1


def test_signature_similarity_estimates_jaccard() -> None:
    text = " ".join(f"w{i}" for i in range(200))
    variant = text.replace("w100 ", "x100 ")
    sigs = signatures([shingles(word_hashes(t)) for t in (text, variant, "something else entirely here now")])
    assert sigs.shape == (3, NUM_PERM)
    similarity = float(np.mean(sigs[0] == sigs[1]))
    assert 0.9 <= similarity <= 1.0  # true Jaccard 195/201 ≈ 0.97
    assert float(np.mean(sigs[0] == sigs[2])) < 0.1


def test_near_stage_precision_recall_on_planted_copies() -> None:
    base = deduplicate(_real_rows()).kept
    planted = plant_copies(base, per_kind=25, seed=7)
    rows = base + [p.row for p in planted]
    truth = {len(base) + n: p.origin for n, p in enumerate(planted)}
    docs = [
        shingles(word_hashes("\n".join(m["content"] for m in r.messages if m["role"] == "user")))
        for r in rows
    ]
    flagged = {d: k for d, (k, _) in near_duplicates(signatures(docs), list(range(len(rows)))).items()}
    precision, recall = scores(flagged, truth)
    reworded = {c: o for c, o in truth.items() if planted[c - len(base)].kind == "reworded"}
    _, reworded_recall = scores(
        {d: k for d, k in flagged.items() if d in reworded or k in reworded}, reworded
    )
    assert precision >= 0.95, precision
    assert recall >= 0.9, recall
    assert reworded_recall >= 0.75, reworded_recall
    # The whole dedup (exact then near) removes every exact, re-cased and re-spaced copy.
    result = deduplicate(rows)
    assert len(result.exact) >= 75
