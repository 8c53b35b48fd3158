"""Decontamination: 13-gram overlap, whole short prompts, boilerplate n-grams ignored, real eval files."""

from __future__ import annotations

from pathlib import Path

from curation.adapters import adapt
from curation.conversation import Drop
from curation.decontam import EvalIndex, find_contaminated
from curation.loading import read_records
from curation.textkeys import word_hashes

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"


def _index(*items: tuple[str, str]) -> EvalIndex:
    index = EvalIndex()
    for item_id, text in items:
        index.add(item_id, text)
    return index


def test_long_prompt_matches_on_a_13_gram() -> None:
    question = (
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
        "in May. How many clips did Natalia sell altogether in April and May?"
    )
    index = _index(("gsm8k#0", question))
    leaked = "Solve this: " + question.upper().replace(" in May", "  in\nMay")
    partial = "Natalia sold clips to 48 of her friends in April and then she"  # 13 words, punctuation differs
    clean = "Natalia sold pencils to 48 of her classmates last year."
    found = find_contaminated(index, [word_hashes(t) for t in (leaked, clean, partial)])
    assert found == {0: "gsm8k#0", 2: "gsm8k#0"}


def test_short_prompt_matched_whole_and_tiny_prompts_ignored() -> None:
    index = _index(
        ("vicuna#1", "How can I improve my time management skills?"), ("tiny#1", "Tell me a joke.")
    )
    docs = [
        "Question: how can I improve my time-management skills? Thanks",
        "Tell me a joke.",
        "How can I improve",
    ]
    assert find_contaminated(index, [word_hashes(d) for d in docs]) == {0: "vicuna#1"}


def test_boilerplate_shared_by_many_eval_prompts_is_not_evidence() -> None:
    preamble = "Write a concise commit message for the following change. diff --git a/"
    index = _index(
        *[(f"commit#{i}", f"{preamble} file{i}.py b/file{i}.py unique tail {i}") for i in range(5)]
    )
    training = f"{preamble} other.py b/other.py something else altogether here"
    assert find_contaminated(index, [word_hashes(training)]) == {}


def test_real_eval_sets_catch_a_leaked_humaneval_prompt() -> None:
    index = EvalIndex()
    for i, record in enumerate(read_records(MIRROR / "openai/openai_humaneval/HumanEval.jsonl.gz")):
        messages = adapt(record, "code_problem", {})
        assert not isinstance(messages, Drop)
        index.add(f"humaneval#{i}", messages[0]["content"])
    leaked = record["prompt"]  # the last HumanEval prompt, pasted into a training row
    found = find_contaminated(
        index, [word_hashes("Please finish this code:\n" + leaked), word_hashes("def f(): pass")]
    )
    assert found == {0: f"humaneval#{i}"}
