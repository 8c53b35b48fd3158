"""Adapters for agent data: SWE-agent `.traj` files, ToolBench answers and queries, BFCL function-calling questions.

Tool calls stay structured: the agent's action is an assistant turn with its `tool_calls` (a function-calling
agent's own calls; a text agent's action stays the text it wrote), the environment's observation a `tool` turn
answering the call (a text agent's observation stays a user turn); neighbouring turns of one role (an agent
log's task plus demonstration) are merged so the role order holds. The functions a row offers become its
`tools` schema (`answer_tools`, `bfcl_tools`): ToolBench's answer files and BFCL's questions list them.
"""

from __future__ import annotations

import json

from core.json_types import JSONObject
from core.tool_calls import Tool, read_call, read_calls, read_tools
from curation.conversation import (
    Drop,
    Message,
    assistant_calls,
    merge_consecutive,
    message,
    tool_result,
)


def swe_agent_trajectory(record: JSONObject) -> list[Message] | Drop:
    """SWE-agent `.traj` `{history[{role, content, tool_calls?}]}`: the agent's own history, tool calls kept."""
    history = record.get("history")
    if not isinstance(history, list) or not history:
        return Drop("missing_field", "trajectory needs a non-empty history")
    messages: list[Message] = []
    for index, turn in enumerate(history):
        if not isinstance(turn, dict):
            return Drop("malformed_turn", f"history item is {type(turn).__name__}")
        role = turn.get("role")
        content = turn.get("content")
        if isinstance(content, list):
            content = "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
        tool_calls = turn.get("tool_calls")
        if role == "tool":
            ids = turn.get("tool_call_ids")
            first = ids[0] if isinstance(ids, list) and len(ids) == 1 else None  # one call per action
            messages.append(tool_result(content, first))
        elif role == "assistant" and tool_calls:
            messages.append(assistant_calls(content, read_calls(tool_calls, f"call_{index}")))
        elif isinstance(role, str) and role in {"system", "user", "assistant"}:
            messages.append(message(role, content))
        else:
            return Drop("unknown_role", f"role {role!r}")
    return merge_consecutive(messages)


def toolbench_answer(record: JSONObject) -> list[Message] | Drop:
    """ToolBench answer file `{answer_generation{train_messages[[…]]}}`: the longest recorded conversation."""
    generation = record.get("answer_generation")
    if not isinstance(generation, dict):
        return Drop("missing_field", "toolbench answer needs answer_generation")
    recorded = generation.get("train_messages")
    candidates = [c for c in recorded if isinstance(c, list)] if isinstance(recorded, list) else []
    if not candidates:
        return Drop("missing_field", "toolbench answer has no train_messages")
    messages: list[Message] = []
    longest = max(candidates, key=len)
    for index, turn in enumerate(longest):
        if not isinstance(turn, dict):
            return Drop("malformed_turn", f"train message is {type(turn).__name__}")
        role = turn.get("role")
        if role == "function":
            messages.append(tool_result(turn.get("content")))
        elif role == "assistant":
            text = turn.get("content")
            text = "" if text in (None, "None") else text  # ToolBench writes a call's missing text as 'None'
            function_call = turn.get("function_call")
            calls = [read_call(function_call, f"call_{index}")] if function_call else []
            messages.append(assistant_calls(text, calls))
        elif isinstance(role, str) and role in {"system", "user"}:
            messages.append(message(role, str(turn.get("content") or "").strip()))
        else:
            return Drop("unknown_role", f"role {role!r}")
    return merge_consecutive(messages)


def answer_tools(record: JSONObject) -> list[Tool] | None:
    """The functions a ToolBench answer offered (`answer_generation.function`), as the row's tools schema."""
    generation = record.get("answer_generation")
    return read_tools(generation.get("function")) if isinstance(generation, dict) else None


def _tool_list(functions: object) -> str:
    return json.dumps(functions, ensure_ascii=False, sort_keys=True, indent=1)


def toolbench_query(record: JSONObject) -> list[Message] | Drop:
    """ToolBench instruction `{query, api_list}`: the APIs as a system turn, the query as the user turn."""
    query = record.get("query")
    if not isinstance(query, str):
        return Drop("missing_field", "toolbench query needs query")
    system = "You can call these APIs:\n" + _tool_list(record.get("api_list") or [])
    return [message("system", system), message("user", query)]


def bfcl(record: JSONObject) -> list[Message] | Drop:
    """BFCL `{question[[{role, content}]], function[…]}`: the user turns; the functions are the row's tools
    (`bfcl_tools`), which the target's template (or the text rendering's system turn) lists."""
    question = record.get("question")
    if not isinstance(question, list) or not question:
        return Drop("missing_field", "bfcl row needs question")
    turns = question[0] if isinstance(question[0], list) else question
    messages: list[Message] = []
    for turn in turns:
        role = turn.get("role") if isinstance(turn, dict) else None
        if isinstance(turn, dict) and isinstance(role, str) and role in {"system", "user"}:
            messages.append(message(role, turn.get("content")))
    if not any(m["role"] == "user" for m in messages):
        return Drop("missing_field", "bfcl question has no user turn")
    return merge_consecutive(messages)


def bfcl_tools(record: JSONObject) -> list[Tool] | None:
    """The functions a BFCL question offers (`function`), as the row's tools schema."""
    return read_tools(record.get("function"))
