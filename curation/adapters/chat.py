"""Adapters for chat-shaped datasets: Alpaca, self-instruct seed tasks, ShareGPT, OpenAI messages,
prompt/completion, Q&A.

Each adapter is a pure function `record -> list[Message] | Drop`; it never raises on a malformed row but
returns a Drop naming what was missing. Tool turns found in ShareGPT (`function_call`, `observation`) and
OpenAI messages (`tool_calls`, role `tool`, `tool_call` content parts) stay structured: an assistant turn's
`tool_calls` and `tool` turns (`curation.conversation`); a call that cannot be read raises
`core.tool_calls.ToolFormatError`, which `curation.adapters.adapt` turns into the row's drop. `row_tools`
reads the row's `tools` schema (a list, or its JSON text as LLaMA-Factory's files hold it).
"""

from __future__ import annotations

from core.json_types import JSONObject
from core.samples import ROLES, read_turn, turn_speaker
from core.tool_calls import Tool, ToolCall, read_call, read_calls, read_tools
from curation.conversation import Drop, Message, assistant_calls, message, tool_result

# ShareGPT's tool turns: a call the assistant made, and results that come back as user turns. Every other speaker
# name (`human`, `gpt`, `bard`, …) is a role alias, mapped by the one table (`core.samples.ROLE_ALIASES`).
TOOL_CALL_SPEAKERS = frozenset({"function_call"})
TOOL_RESULT_SPEAKERS = frozenset({"observation", "tool", "function"})


def alpaca(record: JSONObject) -> list[Message] | Drop:
    """Alpaca `{instruction, input, output}`: the input is appended to the instruction after a blank line."""
    instruction = record.get("instruction")
    output = record.get("output") if record.get("output") is not None else record.get("response")
    if not isinstance(instruction, str) or output is None:
        return Drop("missing_field", "alpaca row needs instruction and output")
    extra = record.get("input") or ""
    prompt = f"{instruction}\n\n{extra}" if isinstance(extra, str) and extra.strip() else instruction
    messages = [message("user", prompt), message("assistant", output)]
    system = record.get("system")
    if isinstance(system, str) and system.strip():
        messages.insert(0, message("system", system))
    return messages


def self_instruct(record: JSONObject) -> list[Message] | Drop:
    """Self-instruct seed task `{instruction, instances[{input, output}]}`: the first instance becomes the turn pair."""
    instruction = record.get("instruction")
    instances = record.get("instances")
    if not isinstance(instruction, str) or not isinstance(instances, list) or not instances:
        return Drop("missing_field", "self-instruct row needs instruction and instances")
    first = instances[0]
    if not isinstance(first, dict):
        return Drop("missing_field", "self-instruct row needs instruction and instances")
    return alpaca({"instruction": instruction, "input": first.get("input"), "output": first.get("output")})


def _sharegpt_turn(turn: JSONObject, index: int) -> Message | Drop:
    speaker = turn_speaker(turn).lower()
    role, content = read_turn(turn)
    if speaker in TOOL_CALL_SPEAKERS:
        return assistant_calls(None, read_calls(content, f"call_{index}"))
    if speaker in TOOL_RESULT_SPEAKERS:
        return tool_result(content, turn.get("tool_call_id"))
    if role not in ROLES:
        return Drop("unknown_role", f"speaker {speaker!r}")
    tool_calls = turn.get("tool_calls")
    if role == "assistant" and tool_calls:
        return assistant_calls(content, read_calls(tool_calls, f"call_{index}"))
    return message(role, content)


def join_calls(messages: list[Message]) -> list[Message]:
    """Return `messages` with an assistant turn that only calls tools joined to the assistant text before it
    (ShareGPT logs write a `gpt` line, then the `function_call` line, for what the model said in one turn)."""
    out: list[Message] = []
    for turn in messages:
        last = out[-1] if out else None
        if (last is not None and turn["role"] == last["role"] == "assistant" and turn.get("tool_calls")
                and not turn["content"] and not last.get("tool_calls")):
            out[-1] = assistant_calls(last["content"], turn["tool_calls"])
        else:
            out.append(turn)
    return out


def row_tools(record: JSONObject) -> list[Tool] | None:
    """The tools a ShareGPT or OpenAI-messages row offers (`tools`: a list, or its JSON text), else None."""
    return read_tools(record.get("tools"))


def sharegpt(record: JSONObject) -> list[Message] | Drop:
    """ShareGPT `{conversations[{from, value}]}` (also `{role, content}` turns); a DPO `chosen` turn is appended."""
    turns = record.get("conversations")
    if not isinstance(turns, list) or not turns:
        return Drop("missing_field", "sharegpt row needs a non-empty conversations list")
    messages: list[Message] = []
    system = record.get("system")
    if isinstance(system, str) and system.strip():
        messages.append(message("system", system))
    for index, turn in enumerate(turns):
        if not isinstance(turn, dict):
            return Drop("malformed_turn", f"turn is {type(turn).__name__}")
        converted = _sharegpt_turn(turn, index)
        if isinstance(converted, Drop):
            return converted
        messages.append(converted)
    chosen = record.get("chosen")
    if isinstance(chosen, dict) and messages and messages[-1]["role"] == "user":
        converted = _sharegpt_turn(chosen, len(turns))
        if isinstance(converted, Drop):
            return converted
        messages.append(converted)
    return join_calls(messages)


def _content_parts(content: object, index: int) -> tuple[str, list[ToolCall]]:
    """Flatten OpenAI content: a string, or a list of parts `{type, text|value}`, into its text and the calls its
    `tool_call` parts make; reasoning parts are left out."""
    if content is None or isinstance(content, str):
        return content or "", []
    if not isinstance(content, list):
        return str(content), []
    pieces: list[str] = []
    calls: list[ToolCall] = []
    for part in content:
        if isinstance(part, dict):
            kind = part.get("type", "text")
            value = part.get("text") if part.get("text") is not None else part.get("value") or ""
            if kind == "tool_call":
                calls.append(read_call(value, f"call_{index}_{len(calls)}"))
            elif kind != "reasoning":
                pieces.append(str(value))
        else:
            pieces.append(str(part))
    return "\n".join(p for p in pieces if p), calls


def openai_messages(record: JSONObject) -> list[Message] | Drop:
    """OpenAI `{messages[{role, content, tool_calls?, tool_call_id?}]}`: calls and `tool` turns kept structured."""
    turns = record.get("messages")
    if not isinstance(turns, list) or not turns:
        return Drop("missing_field", "openai row needs a non-empty messages list")
    messages: list[Message] = []
    for index, turn in enumerate(turns):
        if not isinstance(turn, dict):
            return Drop("malformed_turn", f"turn is {type(turn).__name__}")
        role = str(turn.get("role", ""))
        text, calls = _content_parts(turn.get("content"), index)
        if role == "tool":
            messages.append(tool_result(text, turn.get("tool_call_id")))
        elif role == "assistant":
            tool_calls = turn.get("tool_calls")
            calls += read_calls(tool_calls, f"call_{index}") if tool_calls else []
            messages.append(assistant_calls(text, calls))
        elif role in {"system", "user"}:
            messages.append(message(role, text))
        else:
            return Drop("unknown_role", f"role {role!r}")
    return messages


def prompt_completion(record: JSONObject) -> list[Message] | Drop:
    """`{prompt, completion}` (or `prompt`/`response`) as one user/assistant pair."""
    prompt = record.get("prompt")
    answer = record.get("completion") if record.get("completion") is not None else record.get("response")
    if not isinstance(prompt, str) or answer is None:
        return Drop("missing_field", "prompt_completion row needs prompt and completion")
    return [message("user", prompt), message("assistant", answer)]


def qa(record: JSONObject) -> list[Message] | Drop:
    """Q&A such as GSM8K `{question, answer}`: the answer is kept whole (worked solution and `#### result`)."""
    question = record.get("question")
    answer = record.get("answer")
    if not isinstance(question, str) or answer is None:
        return Drop("missing_field", "qa row needs question and answer")
    return [message("user", question), message("assistant", answer)]


def prompt_only(record: JSONObject) -> list[Message] | Drop:
    """Prompt sets: MT-bench layout `{turns[str]}` (user turns only) or Vicuna `{text}`; nothing to answer with."""
    turns = record.get("turns")
    if isinstance(turns, list) and turns:
        texts = [t for t in turns if isinstance(t, str)]
        if len(texts) == len(turns):
            # Follow-up user turns are joined into one user turn so the role order stays valid.
            return [message("user", "\n\n".join(texts))]
    text = record.get("text")
    if isinstance(text, str):
        return [message("user", text)]
    return Drop("missing_field", "prompt row needs turns or text")
