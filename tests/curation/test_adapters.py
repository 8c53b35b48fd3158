"""Format adapters on the real (trimmed) mirror files: detection, conversion, tool turns, bad mappings."""

from __future__ import annotations

from pathlib import Path

import pytest

from curation.adapters import ADAPTERS, FormatError, adapt, detect_format, resolve_format
from curation.conversation import Drop, role_order_problem
from curation.loading import read_records

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"

# (file in the mirror, adapter detected from its columns)
CASES = [
    ("sahil2801/CodeAlpaca-20k/code_alpaca_2k.json", "alpaca"),
    ("llamafactory/demo_data/alpaca_en_demo.json", "alpaca"),
    ("tatsu-lab/alpaca/seed_tasks.jsonl", "self_instruct"),
    ("anon8231489123/ShareGPT_Vicuna_unfiltered/dialogstudio_original_example.json", "sharegpt"),
    ("llamafactory/demo_data/dpo_en_demo.json", "sharegpt"),
    ("llamafactory/demo_data/glaive_toolcall_en_demo.json", "sharegpt"),
    ("llamafactory/demo_data/reason_tool_use_demo_50.jsonl", "openai_messages"),
    ("openai/gsm8k/train.jsonl", "qa"),
    ("openai/openai_humaneval/HumanEval.jsonl.gz", "code_problem"),
    ("google-research-datasets/mbpp/mbpp.jsonl", "code_problem"),
    ("google-research-datasets/mbpp/sanitized-mbpp.json", "code_problem"),
    ("Maxscha/commitbench/samples_py.csv", "commit"),
    ("microsoft/CodeReviewer/msg-test-100.jsonl", "code_review"),
    ("gorilla-llm/APIBench/torchhub_train.json", "apibench"),
    ("gorilla-llm/APIBench/tensorflow_eval.json", "apibench"),
    ("princeton-nlp/SWE-bench_Lite/swe-bench-lite-test.json", "swe_bench"),
    ("SWE-agent/trajectories/pydicom__pydicom-1458.gpt4_default.traj", "swe_agent_trajectory"),
    (
        "SWE-agent/trajectories/marshmallow-code__marshmallow-1867.function_calling_replace.traj",
        "swe_agent_trajectory",
    ),
    ("OpenBMB/ToolBench/answer/G1_answer/10_ChatGPT_DFS_woFilter_w2.json", "toolbench_answer"),
    ("OpenBMB/ToolBench/instruction/G1_query.json", "toolbench_query"),
    ("gorilla-llm/Berkeley-Function-Calling-Leaderboard/BFCL_v4_simple_python.json", "bfcl"),
    ("HuggingFaceH4/mt_bench_prompts/question.jsonl", "prompt_only"),
    ("lmsys/vicuna_bench/vicuna_question_80.jsonl", "prompt_only"),
    ("Anthropic/hh-rlhf/harmless-base/test.jsonl.gz", "hh_transcript"),
    ("XueFuzhao/InstructionWild/data_v2/user_1.jsonl", "instruction_only"),
    ("bigcode/octopack/rawin.jsonl.gz", "instruction_only"),
]


def _records(name: str, limit: int = 20) -> list[dict]:
    out = []
    for record in read_records(MIRROR / name):
        out.append(record)
        if len(out) == limit:
            break
    return out


@pytest.mark.parametrize(("name", "fmt"), CASES, ids=[c[0].split("/")[-1] for c in CASES])
def test_adapter_on_real_file(name: str, fmt: str) -> None:
    records = _records(name)
    assert detect_format(records[0].keys()) == fmt
    converted = [adapt(r, fmt, {}) for r in records]
    good = [c for c in converted if not isinstance(c, Drop)]
    assert len(good) >= len(records) * 0.9, [c for c in converted if isinstance(c, Drop)][:3]
    for messages in good:
        assert any(m["role"] == "user" and m["content"].strip() for m in messages)
        assert role_order_problem(messages) is None, messages[:3]


def test_prompt_completion_through_a_mapping_on_a_real_file() -> None:
    # No mirror file is natively prompt/completion; MBPP's sanitized file is, once `code` is mapped to it.
    records = _records("google-research-datasets/mbpp/sanitized-mbpp.json", 5)
    mapping = {"completion": "code"}
    fmt = resolve_format(records[0].keys(), "prompt_completion", mapping, "mbpp")
    messages = adapt(records[0], fmt, mapping)
    assert messages == [
        {"role": "user", "content": records[0]["prompt"]},
        {"role": "assistant", "content": records[0]["code"]},
    ]


def test_every_adapter_is_covered_by_a_real_file() -> None:
    # traffic_request reads a team's own request log, which no public file is: tests/curation/test_local_sources.py;
    # paired_lines reads two files at once: tests/curation/test_plain_text_sources.py
    assert {fmt for _, fmt in CASES} | {"prompt_completion", "traffic_request", "paired_lines"} == set(ADAPTERS)


def test_alpaca_joins_instruction_and_input() -> None:
    record = {"instruction": "Sum these.", "input": "1, 2", "output": "3"}
    assert adapt(record, "alpaca", {}) == [
        {"role": "user", "content": "Sum these.\n\n1, 2"},
        {"role": "assistant", "content": "3"},
    ]


def test_glaive_tool_turns_kept_as_turns() -> None:
    records = _records("llamafactory/demo_data/glaive_toolcall_en_demo.json", 50)
    with_calls = [r for r in records if any(t["from"] == "function_call" for t in r["conversations"])]
    messages = adapt(with_calls[0], "sharegpt", {})
    assert not isinstance(messages, Drop)
    calls = [m for m in messages if m.get("tool_calls")]
    results = [m for m in messages if m["role"] == "tool"]
    assert calls and all(m["role"] == "assistant" for m in calls)
    assert results and [r["tool_call_id"] for r in results] == [c["tool_calls"][0]["id"] for c in calls]
    assert not any("<tool_call>" in m["content"] or "<tool_response>" in m["content"] for m in messages)


def test_swe_agent_trajectory_keeps_actions() -> None:
    record = _records(
        "SWE-agent/trajectories/marshmallow-code__marshmallow-1867.function_calling_replace.traj"
    )[0]
    messages = adapt(record, "swe_agent_trajectory", {})
    assert not isinstance(messages, Drop)
    assert messages[0]["role"] == "system"
    assert sum(bool(m.get("tool_calls")) for m in messages if m["role"] == "assistant") >= 5
    assert sum(m["role"] == "tool" for m in messages) >= 5


def test_commit_becomes_write_the_message_turn() -> None:
    record = _records("Maxscha/commitbench/samples_py.csv", 1)[0]
    messages = adapt(record, "commit", {})
    assert not isinstance(messages, Drop)
    assert messages[0]["content"].startswith("Write a concise commit message")
    assert "```diff" in messages[0]["content"]
    assert messages[1]["content"] == record["message"].strip()


def test_field_mapping_renames_columns() -> None:
    record = {"q": "What is 2+2?", "a": "4"}
    fmt = resolve_format(record.keys(), None, {"question": "q", "answer": "a"}, "x/y")
    assert fmt == "qa"
    assert adapt(record, fmt, {"question": "q", "answer": "a"})[1]["content"] == "4"  # type: ignore[index]


def test_mapping_that_matches_nothing_names_the_columns() -> None:
    with pytest.raises(FormatError, match=r"not in the data; columns are \['a', 'q'\]"):
        resolve_format(["q", "a"], None, {"question": "nope"}, "x/y")
    with pytest.raises(FormatError, match=r"no adapter matches columns \['foo'\]"):
        resolve_format(["foo"], None, {}, "x/y")
    with pytest.raises(FormatError, match="unknown format 'bogus'"):
        resolve_format(["foo"], "bogus", {}, "x/y")


def test_catalog_format_guesses_defer_to_the_columns() -> None:
    assert resolve_format(["diff", "message"], "commits", {}, "x/y") == "commit"  # a hint, not an adapter
    assert resolve_format(["instruction", "output"], "openai_messages", {}, "x/y") == "alpaca"  # wrong guess
    assert (
        resolve_format(["instruction", "output", "messages"], "openai_messages", {}, "x/y")
        == "openai_messages"
    )


def test_malformed_rows_are_drops_not_crashes() -> None:
    assert isinstance(adapt({"conversations": [{"from": "alien", "value": "x"}]}, "sharegpt", {}), Drop)
    assert isinstance(adapt({"conversations": "not a list"}, "sharegpt", {}), Drop)
    assert isinstance(adapt({"messages": [{"role": "robot", "content": "x"}]}, "openai_messages", {}), Drop)
    assert isinstance(adapt({"instruction": None, "output": "x"}, "alpaca", {}), Drop)
