"""The device plan's distinct-prompt arm (`benchmarks/gpu_scaling_distinct.py`, issue #45): which new prompts
survive vetting, and the rows each curve source trains on at a budget.

Vetting is the written prompts' (curation's dedup and decontamination) with the prompts already answered ranked
first: a planted copy of each kind must be dropped and counted. The curve orders: `distinct` gives every distinct
prompt's one answer before any mirror prompt's second; `distinct-mix` alternates the mirror arm's rows with first
answers to the other prompts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_scaling_distinct as distinct  # noqa: E402  (a benchmark script, importable from its folder)

EVAL = ("Write a Python function that returns the longest palindromic substring of a given string, "
        "and explain its time complexity.")
OLD = "Explain how a hash map handles collisions with separate chaining and open addressing, with an example."
WRITTEN = ("Could you walk me through setting up a small Flask application with user login, sessions stored "
           "in Redis, and a page that lists the logged in users?")


def _row(rid: str, text: str, category: str = "code_explanation") -> dict[str, object]:
    return {"id": rid, "category": category, "source": {"dataset": "x/y", "row": 0},
            "messages": [{"role": "user", "content": text}]}


def test_vetting_keeps_only_prompts_that_are_new() -> None:
    good = "Find all files under the current folder modified in the last two days and print their sizes."
    other = "Translate this Java code to C#:\n\npublic int size() {return count;}"
    candidates = [
        _row("old-1", OLD),  # one of the prompts answered already (same id)
        _row("n1", good),
        _row("n2", OLD.upper()),  # an answered prompt under another id, case aside: exact duplicate
        _row("n3", WRITTEN.replace("small", "tiny")),  # a written prompt with one word changed: near duplicate
        _row("n4", "Please help. " + EVAL),  # an eval prompt inside: contaminated
        _row("n5", "Background: " + OLD + " Then compare both for a cache of ten million keys in detail."),
        _row("n6", good.replace("two", "2")),  # a near copy of another new prompt
        _row("n7", other),
    ]
    old = [{"id": "old-1", "conversations": [{"role": "user", "content": OLD}, {"role": "assistant", "content": "a"}]}]
    written = [{"id": "tw-1", "category": "general_chat", "messages": [{"role": "user", "content": WRITTEN}]}]
    kept, report = distinct.vet(candidates, old, written, [{"set": "humaneval", "id": "humaneval-7", "prompt": EVAL}])
    assert [r["id"] for r in kept] == ["n1", "n7"]
    assert report["already_answered_ids"] == 1
    assert report["exact_duplicate_of_answered"] == 1
    assert report["near_duplicate_of_answered"] == 1 and report["near_duplicate_of_new"] == 1
    assert report["eval_contaminated"] == 1 and report["eval_hits"] == ["humaneval-7"]
    assert report["overlap_with_answered"] == 1 and report["kept"] == 2


def test_single_turn_rule_and_limit() -> None:
    rows = [_row("a", "short"), _row("b", "x " * 50),
            {"id": "c", "category": "general_chat", "source": {}, "messages": [
                {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                {"role": "user", "content": "q2"}]}]
    picked, left = distinct.single_turn(rows, lambda text: len(text) < 20)
    assert [r["id"] for r in picked] == ["a"] and left == {"prompt_too_long": 1, "not_single_turn": 1}


def _jsonl(path: Path, rows: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _answer(rid: str) -> dict[str, object]:
    return {"id": rid, "conversations": [{"role": "user", "content": rid}, {"role": "assistant", "content": "a"}]}


@pytest.fixture
def work(tmp_path: Path) -> Path:
    mirror = [f"m{i}" for i in range(4)]
    _jsonl(tmp_path / "regen" / "regenerated.jsonl",
           [_answer(m) for m in mirror] + [_answer(f"{m}#s{k}") for k in (1, 2) for m in mirror])
    _jsonl(tmp_path / "written_rows.jsonl", [{"id": f"tw-{i}"} for i in range(3)])
    _jsonl(tmp_path / "written_regen" / "regenerated.jsonl", [_answer(f"tw-{i}") for i in range(3)])
    _jsonl(tmp_path / "distinct_rows.jsonl", [{"id": f"d{i}"} for i in range(6)])
    _jsonl(tmp_path / "distinct_regen" / "regenerated.jsonl", [_answer(f"d{i}") for i in range(5)])  # d5: none
    return tmp_path


def test_distinct_gives_every_prompt_one_answer_before_any_second(work: Path) -> None:
    prompts, regen, order = distinct.distinct_source(argparse.Namespace(source="distinct"), work)
    distinct_ids = {"m0", "m1", "m2", "m3", "tw-0", "tw-1", "tw-2", "d0", "d1", "d2", "d3", "d4"}
    assert {p["id"] for p in prompts} == distinct_ids and "d5" not in regen  # an unanswered prompt is left out
    assert set(order[:12]) == distinct_ids and len(order) == 12 + 8
    assert all(a.endswith("#s1") for a in order[12:16]) and all(a.endswith("#s2") for a in order[16:])
    assert sorted(order[12:16]) == [f"m{i}#s1" for i in range(4)]  # the budget past them: second answers


def test_distinct_mix_alternates_the_mirror_arm_with_new_prompts(work: Path) -> None:
    _, _, order = distinct.distinct_source(argparse.Namespace(source="distinct-mix"), work)
    mirror_rows, fresh = order[0::2][:8], order[1::2][:8]
    assert all(a.startswith("m") for a in mirror_rows) and set(fresh) == {f"tw-{i}" for i in range(3)} | \
        {f"d{i}" for i in range(5)}
    assert all("#" not in a for a in mirror_rows[:4]) and all(a.endswith("#s1") for a in mirror_rows[4:8])
    assert order[16:] == [a for a in order[16:] if a.endswith("#s2")] and len(order) == 20  # the mirror's rest


def test_a_source_without_its_answers_is_named(work: Path) -> None:
    (work / "distinct_regen" / "regenerated.jsonl").unlink()
    with pytest.raises(SystemExit, match="regen-distinct makes the new ones"):
        distinct.distinct_source(argparse.Namespace(source="distinct"), work)


def test_carry_check_counts_the_tree_and_the_carried_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("/big/\n")
    (tmp_path / "a.txt").write_bytes(b"x" * 1024 * 1024)
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "part").write_bytes(b"y" * 63 * 1024 * 1024)
    monkeypatch.chdir(tmp_path)
    distinct.carry_check(argparse.Namespace(carry_paths=[]))
    assert json.loads(capsys.readouterr().out)["tree_mib"] == 1.0  # the ignored folder does not travel
    with pytest.raises(SystemExit):
        distinct.carry_check(argparse.Namespace(carry_paths=["big"]))
    assert json.loads(capsys.readouterr().out)["fits"] is False
