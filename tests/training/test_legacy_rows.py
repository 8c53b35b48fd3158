"""Curated and regenerated folders written before tool calls were structured still load (issue #43).

`tests/data/legacy/` holds what datahunt wrote at commit e2fca4e (before this change) for the mirror's glaive
tool-call rows and a ToolBench answer: a curated folder (Parquet shard and samples.jsonl, whose tool calls are
`<tool_call>` text in assistant turns and whose results are `<tool_response>` user turns) and a regeneration
run's regenerated.jsonl made from it. The curated folder's `state.json` is in that release's shape
(`final`, `outputs`, no file stamps; its `final` key is a placeholder): a set is read only with its marker.
Every reader takes them as the text they are: the contract validates them, regeneration reads the prompts,
training renders and masks the rows, evaluation cuts the prompts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from core.samples import CuratedSample, RegeneratedSample

LEGACY = Path(__file__).resolve().parents[1] / "data" / "legacy"


def _text_tool_turns(turns: list[dict]) -> bool:
    return any("<tool_call>" in t["content"] for t in turns) and any(
        t["role"] == "user" and t["content"].startswith("<tool_response>") for t in turns)


def test_an_old_curated_folder_validates_and_regeneration_reads_it() -> None:
    from inference.records import load_rows

    shard = [CuratedSample.model_validate(r) for r in pq.read_table(LEGACY / "curated/data/shard-00000.parquet")
             .to_pylist()]
    lines = [CuratedSample.model_validate_json(line) for line in
             (LEGACY / "curated/samples.jsonl").read_text().splitlines()]
    assert [s.model_dump() for s in shard] == [s.model_dump() for s in lines] and len(shard) == 7
    assert all(s.tools is None and not any(t.get("tool_calls") for t in s.original_messages) for s in shard)
    assert any(_text_tool_turns(s.original_messages) for s in shard)  # the old text rendering, read as text
    rows, _ = load_rows(LEGACY / "curated")
    assert len(rows) == 7 and all(r.tools is None for r in rows)
    assert {t["role"] for r in rows for t in r.messages} <= {"system", "user"}


def test_an_old_regeneration_run_trains_and_evaluates_as_text(tokenizer: object) -> None:
    from training.data import load_conversations, run_rendering, tokenize_rows
    from training.eval_prompts import prompt_turns

    path = LEGACY / "regen/regenerated.jsonl"
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(RegeneratedSample.model_validate(r) for r in raw)
    rows = load_conversations(path)
    results_as_text = [t for r in rows for t in r[1] if t["content"].startswith("<tool_response>")]
    assert results_as_text and {t["role"] for t in results_as_text} == {"user"} and all(r.tools is None for r in rows)
    rendering = run_rendering(rows)
    assert rendering.reasoning.value == "keep" and rendering.tool_rendering.value == "native"  # as recorded/none
    tokenized = tokenize_rows(tokenizer, rows, 4096, rendering)
    assert len(tokenized) == len(rows) and all(sum(r.loss_mask) > 0 for r in tokenized)
    assert prompt_turns(raw[0])[-1]["role"] == "user" and "tool_calls" not in prompt_turns(raw[0])[0]
    originals = load_conversations(LEGACY / "curated/samples.jsonl", "original_messages")
    assert len(originals) == 7 and any(_text_tool_turns(r[1]) for r in originals)
