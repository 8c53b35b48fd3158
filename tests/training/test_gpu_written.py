"""The device plan's target-written source (`benchmarks/gpu_scaling_written.py`, stage `write-prompts`): what
survives vetting.

The writer's kept prompts go through curation's own steps before anything answers them: exact and near
duplicates among them, any sharing a word 13-gram with an eval prompt (the eval sets the curve measures on),
any overlapping a mirror training prompt. Planted rows of each kind must be dropped and counted; the rest
become regeneration rows of source `target-written`, and the export a later session carries holds them.
"""

from __future__ import annotations

import argparse
import json
import lzma
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_scaling_written  # noqa: E402  (a benchmark script, importable from its folder)

EVAL = ("Write a Python function that returns the longest palindromic substring of a given string, "
        "and explain its time complexity.")
MIRROR = "Explain how a hash map handles collisions with separate chaining and open addressing, with an example."


def _write(path: Path, rows: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _prompt(category: str, k: int, text: str) -> dict[str, object]:
    return {"id": f"{category}-{k:05d}", "category": category, "messages": [{"role": "user", "content": text}],
            "meta": {"topic": f"topic {k}", "writer": "write-prompts"}}


def test_vetting_drops_duplicates_eval_contamination_and_mirror_overlap(tmp_path: Path) -> None:
    work, data, out = tmp_path / "work", tmp_path / "data", tmp_path / "out"
    out.mkdir()
    _write(data / "eval.jsonl", [{"set": "humaneval", "id": "humaneval-7", "prompt": EVAL}])
    _write(work / "prompts.jsonl", [{"id": "m1", "category": "code_explanation",
                                     "messages": [{"role": "user", "content": MIRROR}]}])
    base = ("Could you walk me through setting up a small Flask application with user login, sessions stored "
            "in Redis, and a page that lists the logged in users?")
    good_math = "A farmer has 17 sheep and buys three times as many goats; how many animals does the farmer own now?"
    written = work / "written"
    _write(written / "prompts" / "code_explanation.jsonl", [
        _prompt("code_explanation", 0, base),
        _prompt("code_explanation", 1, base.upper()),  # the same prompt, case aside: exact duplicate
        _prompt("code_explanation", 2, base.replace("small", "tiny")),  # one word changed: near duplicate
        _prompt("code_explanation", 3, "Please help. " + EVAL),  # an eval prompt inside: contaminated
        _prompt("code_explanation", 4, MIRROR + " Keep it short."),  # a mirror training prompt: overlap
    ])
    _write(written / "prompts" / "math.jsonl", [_prompt("math", 0, good_math)])
    _write(written / "dropped.jsonl", [{"id": "math-00001", "reason": "unfinished", "text": "and and"}])
    (written / "report.json").write_text("{}", encoding="utf-8")
    args = argparse.Namespace(data=str(data), work=str(work))

    rows_file = work / "written_rows.jsonl"
    counts = gpu_scaling_written.vet_written(args, written, rows_file)

    assert counts["written_kept"] == 6
    assert (counts["exact_duplicates"], counts["near_duplicates"]) == (1, 1)
    assert (counts["eval_contaminated"], counts["mirror_overlap"]) == (1, 1)
    assert counts["eval_hits"] == ["humaneval-7"]
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["tw-code_explanation-00000", "tw-math-00000"]
    assert counts["kept"] == 2 and counts["per_category"] == {"code_explanation": 1, "math": 1}
    assert {r["source"] for r in rows} == {"target-written"}
    assert rows[1]["messages"] == [{"role": "user", "content": good_math}]

    # What a later session carries back: the vetted prompts, the answers (none yet: an empty file), the drops.
    gpu_scaling_written.export_written(work, out)
    with lzma.open(out / "written_prompts.jsonl.xz", "rt", encoding="utf-8") as fh:
        assert [json.loads(line)["id"] for line in fh.read().splitlines()] == [r["id"] for r in rows]
    with lzma.open(out / "written_answers.jsonl.xz", "rt", encoding="utf-8") as fh:
        assert fh.read() == ""
    with lzma.open(out / "written_dropped.jsonl.xz", "rt", encoding="utf-8") as fh:
        assert json.loads(fh.read())["reason"] == "unfinished"
    assert (out / "written_report.json").exists()
