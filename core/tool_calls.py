"""Tool calls as every stage carries them: OpenAI's shapes, read from any dataset's spelling, and their checks.

An assistant turn may carry `tool_calls`: `[{"id", "type": "function", "function": {"name", "arguments"}}]`,
the arguments the JSON text of an object, as OpenAI sends them (a chat template gets them as an object:
`core.chat_render`). A `tool` turn answers one call, named by its `tool_call_id`. A row may carry the `tools`
it offers the model: `[{"type": "function", "function": {"name", "description", "parameters"}}]`, every key
present (`None` where the dataset gave none: that is what an OpenAI-compatible server hands its template).

`read_call` and `read_tools` read the spellings datasets use (OpenAI's, the bare `{name, arguments}` or
`{name, parameters}`, either as JSON text or as Python-literal text, as ToolBench and SWE-agent logs hold them);
`link_results` gives every tool turn the id of the call it answers. Each raises `ToolFormatError` with a reason
code on bad input (arguments that are not a JSON object, a tool turn with no call to answer, a `tools` value
that is not a list), which curation counts as a dropped row and never lets crash a run.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from typing_extensions import TypedDict  # pydantic reads TypedDicts from typing_extensions on Python 3.11

MALFORMED_ARGUMENTS = "malformed_tool_arguments"
MALFORMED_CALL = "malformed_tool_call"
UNMATCHED_RESULT = "unmatched_tool_result"
TOOLS_NOT_LIST = "tools_not_list"
MALFORMED_TOOLS = "malformed_tools"


class FunctionCall(TypedDict):
    """What a call asks for: the function's name and its arguments as the JSON text of an object."""

    name: str
    arguments: str


class ToolCall(TypedDict):
    """One call an assistant turn makes (OpenAI's shape)."""

    id: str
    type: Literal["function"]
    function: FunctionCall


class ToolFunction(TypedDict):
    """A function the model may call: name, description and JSON-schema parameters (None where not given)."""

    name: str
    description: str | None
    parameters: dict[str, Any] | None


class Tool(TypedDict):
    """One entry of a row's `tools` (OpenAI's shape)."""

    type: Literal["function"]
    function: ToolFunction


class ToolFormatError(ValueError):
    """A tool call, tool turn or tools schema that cannot be read; `reason` is the code a drop is counted under."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _literal(text: str) -> object:
    """Return the value `text` spells as JSON, else as a Python literal (ToolBench, SWE-agent); raise ValueError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        raise ValueError(f"neither JSON nor a literal: {text[:80]!r}") from None


def parse_arguments(arguments: object) -> dict[str, Any]:
    """Return a call's arguments as an object: given as one, or as its JSON text (empty text or None: no
    arguments). Raise ToolFormatError(MALFORMED_ARGUMENTS) for anything else."""
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    if isinstance(arguments, str):
        text = arguments
        try:
            arguments = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ToolFormatError(MALFORMED_ARGUMENTS, f"arguments are not JSON ({exc.msg} at {exc.pos}): "
                                  f"{text[:80]!r}") from None
    if not isinstance(arguments, dict):
        raise ToolFormatError(MALFORMED_ARGUMENTS, f"arguments are a {type(arguments).__name__}, not an object")
    return arguments


def arguments_text(arguments: object) -> str:
    """Return the arguments as the JSON text of an object: recorded text kept as it is once it parses."""
    parsed = parse_arguments(arguments)
    if isinstance(arguments, str) and arguments.strip():
        return arguments
    return json.dumps(parsed, ensure_ascii=False)


def read_call(raw: object, default_id: str) -> ToolCall:
    """Return one tool call from OpenAI's `{id?, type?, function: {name, arguments}}`, a bare `{name, arguments}`
    (or `parameters`), or the JSON/Python-literal text of either; `default_id` when it names none.
    Raise ToolFormatError (MALFORMED_CALL, MALFORMED_ARGUMENTS)."""
    if isinstance(raw, str):
        try:
            raw = _literal(raw)
        except ValueError as exc:
            raise ToolFormatError(MALFORMED_CALL, f"tool call is {exc}") from None
    if not isinstance(raw, Mapping):
        raise ToolFormatError(MALFORMED_CALL, f"tool call is a {type(raw).__name__}, not an object")
    inner = raw.get("function", raw)
    if not isinstance(inner, Mapping) or not isinstance(inner.get("name"), str) or not inner["name"]:
        raise ToolFormatError(MALFORMED_CALL, f"tool call names no function: {str(raw)[:80]}")
    arguments = inner.get("arguments", inner.get("parameters"))
    call_id = raw.get("id")
    return {"id": call_id if isinstance(call_id, str) and call_id else default_id, "type": "function",
            "function": {"name": inner["name"], "arguments": arguments_text(arguments)}}


def read_calls(raw: object, first_id: str) -> list[ToolCall]:
    """Return a turn's calls: a list (or its text), or one call given alone; ids `<first_id>_<k>` where none."""
    if isinstance(raw, str):
        try:
            raw = _literal(raw)
        except ValueError as exc:
            raise ToolFormatError(MALFORMED_CALL, f"tool calls are {exc}") from None
    items = raw if isinstance(raw, list) else [raw]
    return [read_call(item, f"{first_id}_{k}") for k, item in enumerate(items)]


def _tool(raw: object) -> Tool:
    if not isinstance(raw, Mapping):
        raise ToolFormatError(MALFORMED_TOOLS, f"a tool is a {type(raw).__name__}, not an object")
    inner = raw.get("function", raw)
    if not isinstance(inner, Mapping) or not isinstance(inner.get("name"), str) or not inner["name"]:
        raise ToolFormatError(MALFORMED_TOOLS, f"a tool names no function: {str(raw)[:80]}")
    description, parameters = inner.get("description"), inner.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise ToolFormatError(MALFORMED_TOOLS, f"tool {inner['name']!r}: parameters are not an object")
    return {"type": "function", "function": {"name": inner["name"],
                                             "description": None if description is None else str(description),
                                             "parameters": parameters}}


def read_tools(raw: object) -> list[Tool] | None:
    """Return a row's tools schema in OpenAI's shape (None when it has none), from a list of tools or its JSON
    text; each tool OpenAI's `{type, function: {…}}` or a bare `{name, description, parameters}`.
    Raise ToolFormatError(TOOLS_NOT_LIST) when it is not a list, MALFORMED_TOOLS for a bad entry."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if isinstance(raw, str):
        text = raw
        try:
            raw = json.loads(text)
        except json.JSONDecodeError:
            raise ToolFormatError(TOOLS_NOT_LIST, f"tools are text that is not JSON: {text[:80]!r}") from None
    if not isinstance(raw, list):
        raise ToolFormatError(TOOLS_NOT_LIST, f"tools are a {type(raw).__name__}, not a list")
    return [_tool(item) for item in raw] or None


def link_results(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Return the turns with every `tool` turn naming the call it answers: its own `tool_call_id` when that is a
    call of the assistant turn before it not answered yet, else the next such call in order. Raise
    ToolFormatError(UNMATCHED_RESULT) for a tool turn with no call left to answer or naming an unknown call."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for index, turn in enumerate(messages):
        turn = dict(turn)
        role = turn.get("role")
        if role == "assistant":
            pending = [call["id"] for call in turn.get("tool_calls") or []]
        elif role == "tool":
            given = turn.get("tool_call_id")
            if given and given in pending:
                pending.remove(given)
            elif given and given not in pending:
                raise ToolFormatError(UNMATCHED_RESULT, f"turn {index} answers call {given!r}, which the assistant "
                                      "turn before it did not make (or was answered already)")
            elif pending:
                turn["tool_call_id"] = pending.pop(0)
            else:
                raise ToolFormatError(UNMATCHED_RESULT, f"turn {index} is a tool result with no call to answer")
        else:
            pending = []
        out.append(turn)
    return out


def same_calls(ours: Sequence[ToolCall], recorded: Sequence[ToolCall]) -> bool:
    """Whether two turns call the same functions with the same arguments, in the same order (ids aside; the
    arguments compared as objects, so spacing and key order do not count)."""
    if len(ours) != len(recorded):
        return False
    for a, b in zip(ours, recorded, strict=True):
        if a["function"]["name"] != b["function"]["name"]:
            return False
        try:
            if parse_arguments(a["function"]["arguments"]) != parse_arguments(b["function"]["arguments"]):
                return False
        except ToolFormatError:
            return False
    return True
