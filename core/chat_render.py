"""The one rendering of a conversation into the target's text and token ids: the target's own chat template.

Training rows, regeneration prompts (SGLang native, in process) and evaluation prompts are all rendered here,
so the three agree token for token, and agree with what an OpenAI-compatible server builds from the same
messages: each turn goes to the template as the contract holds it, tool calls as structured `tool_calls` with
their arguments as an object (what vLLM hands its templates, and what transformers' templates expect), the
row's `tools` as the template's `tools`, the reasoning mode's switch (`enable_thinking`) as a keyword. The text
is rendered with `tokenize=False` and encoded without added special tokens (the template holds them), as a
server encodes a chat prompt. The tokenizer is duck-typed (`transformers`' `apply_chat_template` and call).

Two tool renderings (`ToolRendering`): `native`, the template's own tool-call tokens, and `text`, datahunt's
earlier rendering for a template that cannot render tools (a call becomes a `<tool_call>` JSON block inside the
assistant's text, a result a user turn in `<tool_response>`, the tools a listing in the system turn). Which one
a run used is recorded with it. `tool_support` renders a probe conversation to tell whether a template renders
calls, results and tools at all, so a target without tool support is told so before any row is rendered.

`Reasoning` is how the target's thinking is served: `served-on` / `served-off` set the template's
`enable_thinking` for every rendering (regeneration asks the server the same), `keep` leaves the template's
default and keeps what thinking the server returns; `drop` (the default template, thinking left out of the
stored answers) is kept for runs made before, and `disable`, the old name of `served-off`, still reads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from core.tool_calls import Tool, parse_arguments


class Reasoning(StrEnum):
    """How the target's thinking is served, recorded on every regenerated row and carried to training and eval."""

    KEEP = "keep"
    SERVED_ON = "served-on"
    SERVED_OFF = "served-off"
    DROP = "drop"
    DISABLE = "served-off"  # the old name of served-off, an alias of it

    @classmethod
    def _missing_(cls, value: object) -> Reasoning | None:
        return cls.SERVED_OFF if value == "disable" else None  # the old name, in runs made before


class ToolRendering(StrEnum):
    """How tool calls reach the tokens: the template's own (`native`) or datahunt's text blocks (`text`)."""

    NATIVE = "native"
    TEXT = "text"


TOOLS_LISTING = "You can call these functions:\n"


def template_kwargs(reasoning: Reasoning | str | None) -> dict[str, bool]:
    """Return the template keywords a reasoning mode sets (`enable_thinking`), none for the template's default."""
    mode = Reasoning(reasoning) if reasoning is not None else Reasoning.KEEP
    if mode is Reasoning.SERVED_ON:
        return {"enable_thinking": True}
    if mode is Reasoning.SERVED_OFF:
        return {"enable_thinking": False}
    return {}


def _call_text(call: Mapping[str, Any]) -> str:
    function = call["function"]
    try:
        arguments: object = parse_arguments(function["arguments"])
    except ValueError:
        arguments = function["arguments"]
    payload = json.dumps({"name": function["name"], "arguments": arguments}, ensure_ascii=False, sort_keys=True)
    return f"<tool_call>\n{payload}\n</tool_call>"


def text_turns(messages: Sequence[Mapping[str, Any]], tools: Sequence[Tool] | None = None) -> list[dict[str, str]]:
    """Return the conversation as datahunt's text rendering: `{role, content}` turns only (system, user,
    assistant), calls as `<tool_call>` blocks after the assistant's text, results as user `<tool_response>`
    turns (neighbouring user turns joined by a blank line), the tools listed at the end of the system turn."""
    out: list[dict[str, str]] = []
    for turn in messages:
        role, content = str(turn["role"]), str(turn.get("content") or "")
        if role == "assistant" and turn.get("tool_calls"):
            calls = "\n".join(_call_text(c) for c in turn["tool_calls"])
            content = f"{content}\n{calls}" if content else calls
        elif role == "tool":
            role, content = "user", f"<tool_response>\n{content}\n</tool_response>"
        if out and role == "user" and out[-1]["role"] == "user":
            out[-1] = {"role": "user", "content": out[-1]["content"] + "\n\n" + content}
        else:
            out.append({"role": role, "content": content})
    if tools:
        listing = TOOLS_LISTING + json.dumps([t["function"] for t in tools], ensure_ascii=False, sort_keys=True,
                                             indent=1)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + listing}
        else:
            out.insert(0, {"role": "system", "content": listing})
    return out


def native_turns(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Return the turns as a template gets them: the contract's keys only, tool-call arguments as objects (as an
    OpenAI-compatible server passes them, so `tojson` in the template prints them once, not as quoted text)."""
    out: list[dict[str, Any]] = []
    for turn in messages:
        item: dict[str, Any] = {"role": turn["role"], "content": turn.get("content") or ""}
        if turn.get("tool_calls"):
            item["tool_calls"] = [{"id": c["id"], "type": "function",
                                   "function": {"name": c["function"]["name"],
                                                "arguments": parse_arguments(c["function"]["arguments"])}}
                                  for c in turn["tool_calls"]]
        if turn.get("tool_call_id"):
            item["tool_call_id"] = turn["tool_call_id"]
        out.append(item)
    return out


def has_tool_turns(messages: Sequence[Mapping[str, Any]], tools: Sequence[Tool] | None = None) -> bool:
    """Whether a conversation needs a template's tool support: it calls tools, answers calls or lists tools."""
    return bool(tools) or any(t.get("tool_calls") or t.get("role") == "tool" for t in messages)


def render_text(tokenizer: Any, messages: Sequence[Mapping[str, Any]], *, tools: Sequence[Tool] | None = None,
                reasoning: Reasoning | str | None = None, tool_rendering: ToolRendering = ToolRendering.NATIVE,
                chat_template: str | None = None, add_generation_prompt: bool = False) -> str:
    """Return the conversation rendered by the target's chat template (or `chat_template`), as the text a server
    builds from the same messages, tools and reasoning mode."""
    kwargs: dict[str, Any] = template_kwargs(reasoning)
    if tool_rendering is ToolRendering.TEXT:
        turns: list[dict[str, Any]] = list(text_turns(messages, tools))
    else:
        turns = native_turns(messages)
        if tools:
            kwargs["tools"] = [dict(t) for t in tools]
    if chat_template is not None:
        kwargs["chat_template"] = chat_template
    return str(tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=add_generation_prompt,
                                             **kwargs))


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Return the ids of rendered text: no special tokens added (the template's own are in the text)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def render_ids(tokenizer: Any, messages: Sequence[Mapping[str, Any]], **kwargs: Any) -> list[int]:
    """Return `render_text`'s ids (same keywords)."""
    return encode_text(tokenizer, render_text(tokenizer, messages, **kwargs))


PROBE_TOOL = "datahunt_probe_tool"
PROBE_ARGUMENT = "datahunt_probe_argument"
PROBE_RESULT = "datahunt_probe_result"


def tool_support(tokenizer: Any, chat_template: str | None = None) -> str | None:
    """Return None when the template renders a tool call, its result and the tools offered; else what it does
    not do, in a few words. Tried on a probe conversation, so it holds for any template style."""
    tools: list[Tool] = [{"type": "function", "function": {"name": PROBE_TOOL, "description": "probe",
                                                            "parameters": {"type": "object", "properties": {}}}}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "probe"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_probe", "type": "function",
                     "function": {"name": PROBE_TOOL, "arguments": json.dumps({PROBE_ARGUMENT: 1})}}]},
                {"role": "tool", "content": PROBE_RESULT, "tool_call_id": "call_probe"}]
    try:
        text = render_text(tokenizer, messages, chat_template=chat_template)
        listed = render_text(tokenizer, messages[:1], tools=tools, chat_template=chat_template)
    except Exception as exc:  # a template raises what it likes (jinja's TemplateError, its own raise_exception)
        return f"it fails on a tool turn ({type(exc).__name__}: {str(exc)[:120]})"
    missing = [what for what, found in (("tool calls", PROBE_ARGUMENT in text), ("tool results", PROBE_RESULT in text),
                                        ("the tools offered", PROBE_TOOL in listed)) if not found]
    return f"it drops {', '.join(missing)}" if missing else None
