"""Per-turn on-policy regeneration of agentic rows (issue #43, part 3), through the real runner and journal.

A hand-written backend plays the target: it answers each turn from a script keyed by what the history holds,
so the test sees exactly which history every answer was generated against. Checked: each answer is generated
against the regenerated history (the recorded tool results spliced in as observations, the target's own
earlier answers, never the dataset's), structured calls are stored with the recording's ids, and the row stops
where the target's calls leave the recording (other tool, other arguments, text instead of a call, a call
where the recording answered), its prefix kept and the reason recorded on the row and counted in the status.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.samples import RegeneratedSample
from core.tool_calls import ToolCall
from inference.backend import GenerationBackend
from inference.generation import Sampling, TurnResult
from inference.runner import RunConfig, regenerate
from inference.status import read_status
from inference.tool_parser import parse_tool_calls
from inference.turns import NO_CALL, OTHER_CALL, UNRECORDED_CALL

TOOLS = [{"type": "function", "function": {"name": "weather", "description": "Weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {}}}}}]


def _call(name: str, arguments: dict[str, Any], call_id: str = "rec_1") -> ToolCall:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


RECORDED = [
    {"role": "system", "content": "You answer with tools."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [_call("weather", {"city": "Paris"})]},
    {"role": "tool", "content": '{"temp": 21}', "tool_call_id": "rec_1"},
    {"role": "user", "content": "And tomorrow?"},
]


class ScriptedTarget(GenerationBackend):
    """Answers by looking at the history: `script(history)` returns the TurnResult; every history is kept."""

    api = "scripted"
    has_endpoints = False

    def __init__(self, script: Callable[[list[dict[str, Any]]], TurnResult]) -> None:
        self.script = script
        self.seen: list[list[dict[str, Any]]] = []
        self.tools_seen: list[Any] = []

    async def generate_turn(self, history: list[dict[str, Any]], sampling: Sampling, *,
                            endpoint: str | None = None, tools: Any = None) -> TurnResult:
        self.seen.append(json.loads(json.dumps(history)))
        self.tools_seen.append(tools)
        return self.script(history)


def _result(content: str = "", calls: list[ToolCall] | None = None) -> TurnResult:
    return TurnResult(content=content, reasoning=None, finish_reason="tool_calls" if calls else "stop",
                      prompt_tokens=10, completion_tokens=5, latency_s=0.01, tool_calls=calls)


def _run(tmp_path: Path, rows: list[dict[str, Any]], target: GenerationBackend) -> list[dict[str, Any]]:
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = RunConfig(tmp_path / "in.jsonl", tmp_path / "run", [], concurrency=1, status_interval_s=0.05)
    summary = regenerate(config, target)
    assert summary.failed == 0
    return [json.loads(line) for line in (tmp_path / "run" / "regenerated.jsonl").read_text().splitlines()]


def test_same_call_splices_the_recorded_result_and_goes_on(tmp_path: Path) -> None:
    def script(history: list[dict[str, Any]]) -> TurnResult:
        if history[-1]["role"] == "user" and history[-1]["content"] == "Weather in Paris?":
            return _result("Let me look.", [_call("weather", {"city": "Paris"}, "srv_9")])  # its own id
        return _result(f"answer after {history[-1]['role']}")

    target = ScriptedTarget(script)
    (row,) = _run(tmp_path, [{"id": "a", "messages": RECORDED, "tools": TOOLS}], target)
    conv = row["conversations"]
    assert [t["role"] for t in conv] == ["system", "user", "assistant", "tool", "assistant", "user", "assistant"]
    assert conv[2]["tool_calls"][0]["id"] == "rec_1" and conv[2]["content"] == "Let me look."
    assert conv[3] == RECORDED[3]  # the recorded observation, spliced as it was
    assert conv[4]["content"] == "answer after tool" and conv[6]["content"] == "answer after user"
    # The second answer was generated against the target's own call and the spliced result, not the dataset's.
    assert target.seen[1][-2]["tool_calls"][0]["id"] == "rec_1" and target.seen[1][-1]["role"] == "tool"
    assert target.seen[2][-2]["content"] == "answer after tool"  # the third saw the regenerated second
    assert all(tools == TOOLS for tools in target.tools_seen)
    assert row["tools"] == TOOLS and row["meta"]["tool_rendering"] == "native" and "stopped" not in row["meta"]
    assert len(row["meta"]["turns"]) == 3
    RegeneratedSample.model_validate(row)


@pytest.mark.parametrize(("answer", "reason"), [
    (_result("", [_call("forecast", {"city": "Paris"})]), OTHER_CALL),
    (_result("", [_call("weather", {"city": "Lyon"})]), OTHER_CALL),
    (_result("It is sunny, probably."), NO_CALL),
])
def test_a_call_that_leaves_the_recording_stops_the_row_with_its_prefix(tmp_path: Path, answer: TurnResult,
                                                                         reason: str) -> None:
    target = ScriptedTarget(lambda history: answer)
    (row,) = _run(tmp_path, [{"id": "a", "messages": RECORDED, "tools": TOOLS}], target)
    assert [t["role"] for t in row["conversations"]] == ["system", "user", "assistant"]  # the diverging answer kept
    assert row["meta"]["stopped"]["reason"] == reason and row["meta"]["stopped"]["turn"] == 0
    assert len(target.seen) == 1  # nothing asked after the divergence
    assert read_status(tmp_path / "run")["stopped"] == {reason: 1}  # type: ignore[index]


def test_a_call_where_the_recording_answered_in_text_stops_the_row(tmp_path: Path) -> None:
    def script(history: list[dict[str, Any]]) -> TurnResult:
        if history[-1]["content"] == "And tomorrow?":
            return _result("", [_call("weather", {"city": "Paris", "day": 2}, "x")])
        return _result("ok", [_call("weather", {"city": "Paris"})]) if history[-1]["role"] == "user" else \
            _result("21 degrees.")

    (row,) = _run(tmp_path, [{"id": "a", "messages": RECORDED, "tools": TOOLS}], ScriptedTarget(script))
    assert row["meta"]["stopped"]["reason"] == UNRECORDED_CALL and row["meta"]["stopped"]["turn"] == 2
    assert row["conversations"][-1]["tool_calls"][0]["function"]["name"] == "weather"  # kept: on-policy tokens


def test_calls_written_as_text_are_read_by_the_parser(tmp_path: Path) -> None:
    """A backend without a server parser (native /generate, in process) returns text: hermes blocks are calls."""
    def script(history: list[dict[str, Any]]) -> TurnResult:
        if history[-1]["role"] == "user" and "Paris" in history[-1]["content"]:
            return _result('Checking.\n<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>')
        return _result("done")

    (row,) = _run(tmp_path, [{"id": "a", "messages": RECORDED, "tools": TOOLS}], ScriptedTarget(script))
    assert "stopped" not in row["meta"] and row["conversations"][2]["content"] == "Checking."
    assert json.loads(row["conversations"][2]["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}


def test_plain_multi_turn_rows_answer_every_user_turn_on_the_regenerated_history(tmp_path: Path) -> None:
    rows = [{"id": "p", "messages": [{"role": "user", "content": "one"}, {"role": "assistant", "content": "x"},
                                     {"role": "user", "content": "two"}, {"role": "assistant", "content": "y"}]}]
    target = ScriptedTarget(lambda history: _result("<tool_call>\n{}\n</tool_call> " + history[-1]["content"]))
    (row,) = _run(tmp_path, rows, target)
    assert [t["role"] for t in row["conversations"]] == ["user", "assistant", "user", "assistant"]
    assert target.seen[1][1]["content"].endswith(" one")  # its own first answer, not the dataset's "x"
    assert "tool_calls" not in row["conversations"][1]  # a row without tools is never parsed for calls


@pytest.mark.parametrize(("text", "content", "names"), [
    ('<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>', "", ["a"]),
    ('Sure.\n<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>{"name": "b", "arguments": {}}',
     "Sure.", ["a", "b"]),
    ('<|python_tag|>{"name": "get", "parameters": {"q": "x"}}', "", ["get"]),
    ('{"name": "get", "parameters": {}}; {"name": "put", "parameters": {}}', "", ["get", "put"]),
    ('{"answer": 42}', '{"answer": 42}', []),
    ("<tool_call>{not json}</tool_call>", "<tool_call>{not json}</tool_call>", []),
    ("plain text", "plain text", []),
])
def test_tool_call_parser_styles(text: str, content: str, names: list[str]) -> None:
    got, calls = parse_tool_calls(text)
    assert got == content and [c["function"]["name"] for c in calls] == names
