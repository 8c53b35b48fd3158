"""Adapters for agent data: SWE-agent `.traj` files, ToolBench answers and queries, BFCL function-calling questions.

Tool calls stay in the conversation as turns: the agent's action is an assistant turn ending in a
`<tool_call>` block, the environment's observation a user turn in `<tool_response>`; neighbouring turns of
one role (an agent log's task plus demonstration) are merged so the role order holds.
"""

from __future__ import annotations

import json

from core.json_types import JSONObject
from curation.adapters.chat import _tool_call_text, tool_calls_text
from curation.conversation import (
    Drop,
    Message,
    merge_consecutive,
    message,
    render_tool_response,
)


def swe_agent_trajectory(record: JSONObject) -> list[Message] | Drop:
    """SWE-agent `.traj` `{history[{role, content, tool_calls?}]}`: the agent's own history, tool calls kept."""
    history = record.get("history")
    if not isinstance(history, list) or not history:
        return Drop("missing_field", "trajectory needs a non-empty history")
    messages: list[Message] = []
    for turn in history:
        if not isinstance(turn, dict):
            return Drop("malformed_turn", f"history item is {type(turn).__name__}")
        role = turn.get("role")
        content = turn.get("content")
        if isinstance(content, list):
            content = "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
        tool_calls = turn.get("tool_calls")
        if role == "tool":
            messages.append(message("user", render_tool_response(content)))
        elif role == "assistant" and tool_calls:
            calls = tool_calls_text(tool_calls)
            messages.append(message("assistant", f"{content}\n{calls}" if content else calls))
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
    for turn in max(candidates, key=len):
        if not isinstance(turn, dict):
            return Drop("malformed_turn", f"train message is {type(turn).__name__}")
        role = turn.get("role")
        if role == "function":
            messages.append(message("user", render_tool_response(turn.get("content"))))
        elif role == "assistant":
            text = turn.get("content") or ""
            function_call = turn.get("function_call")
            if function_call:
                call = _tool_call_text(function_call)
                text = f"{text}\n{call}" if text else call
            messages.append(message("assistant", text))
        elif isinstance(role, str) and role in {"system", "user"}:
            messages.append(message(role, str(turn.get("content") or "").strip()))
        else:
            return Drop("unknown_role", f"role {role!r}")
    return merge_consecutive(messages)


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
    """BFCL `{question[[{role, content}]], function[…]}`: the functions as a system turn, then the user turns."""
    question = record.get("question")
    if not isinstance(question, list) or not question:
        return Drop("missing_field", "bfcl row needs question")
    turns = question[0] if isinstance(question[0], list) else question
    messages: list[Message] = [
        message("system", "You can call these functions:\n" + _tool_list(record.get("function")))
    ]
    for turn in turns:
        role = turn.get("role") if isinstance(turn, dict) else None
        if isinstance(turn, dict) and isinstance(role, str) and role in {"system", "user"}:
            messages.append(message(role, turn.get("content")))
    if len(messages) == 1:
        return Drop("missing_field", "bfcl question has no user turn")
    return merge_consecutive(messages)
