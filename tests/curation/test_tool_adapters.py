"""Tool use stays structured from the mirror's real files to the curated shards (issue #43, part 1).

Each adapter that meets tool use (ShareGPT/glaive, OpenAI messages with `tool_call` parts, SWE-agent
function-calling trajectories, ToolBench answers, BFCL questions) gives OpenAI-shaped `tool_calls`, `tool` turns
naming the call they answer, and the row's `tools`; bad input (arguments that are not JSON, a result with no
call, a tools value that is not a list) is a counted drop, never a crash; the curated shards carry it all and
read back through the contract.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from core.samples import CuratedSample
from core.settings import get_settings
from core.tool_calls import MALFORMED_ARGUMENTS, TOOLS_NOT_LIST, UNMATCHED_RESULT, parse_arguments
from curation.adapters import adapt, adapt_tools
from curation.conversation import Drop, role_order_problem
from curation.loading import read_records

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"


def _first(name: str, keep: object = None, limit: int = 200) -> dict:
    for n, record in enumerate(read_records(MIRROR / name)):
        if keep is None or keep(record):  # type: ignore[operator]
            return record
        if n > limit:
            break
    raise AssertionError(f"no fitting record in {name}")


def _checked(record: dict, fmt: str) -> list:
    messages = adapt(record, fmt, {})
    assert not isinstance(messages, Drop), messages
    assert role_order_problem(messages) is None
    for turn in messages:
        assert "<tool_call>" not in turn["content"] and "<tool_response>" not in turn["content"]
        for call in turn.get("tool_calls", []):
            assert call["type"] == "function" and call["id"] and call["function"]["name"]
            assert isinstance(parse_arguments(call["function"]["arguments"]), dict)
    ids = {c["id"] for t in messages for c in t.get("tool_calls", [])}
    assert all(t["tool_call_id"] in ids for t in messages if t["role"] == "tool")
    return messages


def test_glaive_calls_results_and_tools_text() -> None:
    record = _first("llamafactory/demo_data/glaive_toolcall_en_demo.json",
                    lambda r: any(t["from"] == "function_call" for t in r["conversations"]))
    messages = _checked(record, "sharegpt")
    call = next(t for t in messages if t.get("tool_calls"))["tool_calls"][0]
    assert call["function"]["name"] == "search_recipes"
    assert parse_arguments(call["function"]["arguments"]) == {"ingredients": ["chicken", "bell peppers", "rice"]}
    tools = adapt_tools(record, "sharegpt", {})
    assert isinstance(tools, list) and tools[0]["type"] == "function"  # the file holds them as JSON text
    assert tools[0]["function"]["name"] == "search_recipes" and tools[0]["function"]["parameters"]["required"]


def test_openai_messages_tool_call_parts_become_calls() -> None:
    record = _first("llamafactory/demo_data/reason_tool_use_demo_50.jsonl",
                    lambda r: any(m["role"] == "tool" for m in r["messages"]))
    messages = _checked(record, "openai_messages")
    calls = [t for t in messages if t.get("tool_calls")]
    assert calls[0]["tool_calls"][0]["function"]["name"] == "get_movie_details"
    assert "Inception" in calls[0]["tool_calls"][0]["function"]["arguments"]
    assert sum(t["role"] == "tool" for t in messages) == sum(len(t["tool_calls"]) for t in calls)
    assert adapt_tools(record, "openai_messages", {})


def test_swe_agent_function_calling_trajectory_keeps_its_call_ids() -> None:
    record = _first("SWE-agent/trajectories/marshmallow-code__marshmallow-1867.function_calling_replace.traj")
    messages = _checked(record, "swe_agent_trajectory")
    first = next(t for t in messages if t.get("tool_calls"))["tool_calls"][0]
    assert first["id"] == "call_cyI71DYnRdoLHWwtZgIaW2wr" and first["function"]["name"] == "create"
    assert next(t for t in messages if t["role"] == "tool")["tool_call_id"] == first["id"]


def test_swe_agent_text_trajectory_stays_text() -> None:
    """A text agent's actions are its own text (a command in a code block), not calls: nothing to structure."""
    messages = _checked(_first("SWE-agent/trajectories/pydicom__pydicom-1458.gpt4_default.traj"),
                        "swe_agent_trajectory")
    assert not any(t.get("tool_calls") or t["role"] == "tool" for t in messages)


def test_toolbench_answer_reads_python_literal_calls_and_offers_its_functions() -> None:
    record = _first("OpenBMB/ToolBench/answer/G1_answer/10_ChatGPT_DFS_woFilter_w2.json")
    messages = _checked(record, "toolbench_answer")
    calls = [c for t in messages for c in t.get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "transitaires_for_transitaires"
    assert calls[-1]["function"]["name"] == "Finish"
    assert not any(t["content"] == "None" for t in messages)  # ToolBench's 'None' text is no text
    tools = adapt_tools(record, "toolbench_answer", {})
    assert isinstance(tools, list) and {t["function"]["name"] for t in tools} >= {"transitaires_for_transitaires"}


def test_bfcl_functions_are_the_rows_tools() -> None:
    record = _first("gorilla-llm/Berkeley-Function-Calling-Leaderboard/BFCL_v4_simple_python.json")
    messages = _checked(record, "bfcl")
    assert [t["role"] for t in messages] == ["user"]
    tools = adapt_tools(record, "bfcl", {})
    assert isinstance(tools, list) and tools[0]["function"]["name"] == record["function"][0]["name"]


def test_specforge_row_with_broken_arguments_is_a_counted_drop() -> None:
    """The mirror's SpecForge tool-use sample has a call whose arguments are cut JSON: dropped, with the reason."""
    record = _first("sgl-project/SpecForge/tool_use_conversation.jsonl")
    dropped = adapt(record, "sharegpt", {})
    assert isinstance(dropped, Drop) and dropped.reason == MALFORMED_ARGUMENTS
    # Mended, the same row keeps its calls; its tool turns name no id, so each answers the call before it.
    for turn in record["conversations"]:
        for call in turn.get("tool_calls") or []:
            try:
                json.loads(call["function"]["arguments"])
            except json.JSONDecodeError:
                call["function"]["arguments"] = "{}"
    messages = _checked(record, "sharegpt")
    assert [t["tool_call_id"] for t in messages if t["role"] == "tool"][:2] == ["call_111", "call_222"]


@pytest.mark.parametrize(("record", "fmt", "reason"), [
    ({"messages": [{"role": "user", "content": "q"}, {"role": "tool", "content": "r"}]}, "openai_messages",
     UNMATCHED_RESULT),
    ({"messages": [{"role": "user", "content": "q"},
                   {"role": "assistant", "content": "", "tool_calls": [
                       {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                   {"role": "tool", "content": "r", "tool_call_id": "b"}]}, "openai_messages", UNMATCHED_RESULT),
    ({"messages": [{"role": "user", "content": "q"},
                   {"role": "assistant", "content": "", "tool_calls": [
                       {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{'x': 1"}}]}]},
     "openai_messages", MALFORMED_ARGUMENTS),
    ({"messages": [{"role": "user", "content": "q"},
                   {"role": "assistant", "content": "", "tool_calls": [
                       {"id": "a", "type": "function", "function": {"name": "f", "arguments": "[1, 2]"}}]}]},
     "openai_messages", MALFORMED_ARGUMENTS),
    ({"conversations": [{"from": "human", "value": "q"}, {"from": "function_call", "value": "{not json"}]},
     "sharegpt", "malformed_tool_call"),
])
def test_bad_tool_use_is_a_drop_with_its_reason(record: dict, fmt: str, reason: str) -> None:
    dropped = adapt(record, fmt, {})
    assert isinstance(dropped, Drop) and dropped.reason == reason, dropped


@pytest.mark.parametrize("tools", ['{"name": "f"}', 7, {"name": "f"}, "not json"])
def test_a_tools_schema_that_is_not_a_list_is_a_drop(tools: object) -> None:
    dropped = adapt_tools({"conversations": [], "tools": tools}, "sharegpt", {})
    assert isinstance(dropped, Drop) and dropped.reason == TOOLS_NOT_LIST


def test_role_order_takes_tool_turns_after_calls_only() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    good = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
            {"role": "assistant", "content": "", "tool_calls": [call, {**call, "id": "d"}]},
            {"role": "tool", "content": "1"}, {"role": "tool", "content": "2"},
            {"role": "assistant", "content": "done"}, {"role": "user", "content": "thanks"}]
    assert role_order_problem(good) is None  # type: ignore[arg-type]
    assert "no tool call" in str(role_order_problem([good[1], {"role": "tool", "content": "x"}]))  # type: ignore[list-item]
    assert "no tool call" in str(role_order_problem(  # type: ignore[arg-type]
        [good[1], {"role": "assistant", "content": "a"}, {"role": "tool", "content": "x"}]))
    assert role_order_problem([good[1], {"role": "assistant", "content": "a"},  # type: ignore[list-item]
                               {"role": "assistant", "content": "b"}]) is not None


def test_curated_shards_carry_tools_and_calls_and_count_drops(tmp_path: Path) -> None:
    """Curate the mirror's tool sources: shards hold structured calls and tools (as the contract reads them
    back), prompts keep the recorded calls and results for per-turn regeneration, and the broken row is counted."""
    from core.types import Category
    from curation.manifest import Manifest, Source
    from curation.pipeline import curate

    manifest = Manifest(mirror=str(MIRROR), sources=[
        Source(hub_id="llamafactory/demo_data", config="glaive_toolcall_en_demo", category=Category.TOOL_USE,
               max_rows=40),
        Source(hub_id="sgl-project/SpecForge", category=Category.TOOL_USE),
        Source(hub_id="OpenBMB/ToolBench", config="answer", category=Category.AGENTIC_TRAJECTORIES),
    ])
    result = curate(manifest, tmp_path / "out", settings=get_settings(), jsonl=True)
    assert result.report.drops.get(MALFORMED_ARGUMENTS) == 1
    table = pq.read_table(next((tmp_path / "out" / "data").glob("*.parquet")))
    rows = [CuratedSample.model_validate(r) for r in table.to_pylist()]
    agentic = [r for r in rows if any(t["role"] == "tool" for t in r.messages)]
    assert agentic and all(r.tools for r in agentic)
    for row in agentic:
        kept = [t for t in row.messages if t["role"] == "assistant"]
        assert kept and all(t.get("tool_calls") and t["content"] == "" for t in kept)  # the recording's calls
        assert sum(t["role"] == "assistant" for t in row.original_messages) >= len(kept)
    jsonl = [CuratedSample.model_validate_json(line) for line in
             (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert [r.model_dump() for r in jsonl] == [r.model_dump() for r in rows]
