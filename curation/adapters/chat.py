"""Adapters for chat-shaped datasets: Alpaca, self-instruct seed tasks, ShareGPT, OpenAI messages, prompt/completion, Q&A.

Each adapter is a pure function `record -> list[Message] | Drop`; it never raises on a malformed row but
returns a Drop naming what was missing. Tool turns found in ShareGPT (`function_call`, `observation`) and
OpenAI messages (`tool_calls`, role `tool`) follow the rendering in `curation.conversation`.
"""

from __future__ import annotations

from core.json_types import JSONObject, JSONValue
from core.samples import ROLES, read_turn, turn_speaker
from curation.conversation import Drop, Message, message, render_tool_call, render_tool_response

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


def _sharegpt_turn(turn: JSONObject) -> Message | Drop:
    speaker = turn_speaker(turn).lower()
    role, content = read_turn(turn)
    if speaker in TOOL_CALL_SPEAKERS:
        return message("assistant", _tool_call_text(content))
    if speaker in TOOL_RESULT_SPEAKERS:
        return message("user", render_tool_response(content))
    if role not in ROLES:
        return Drop("unknown_role", f"speaker {speaker!r}")
    tool_calls = turn.get("tool_calls")
    if role == "assistant" and tool_calls:
        calls = tool_calls_text(tool_calls)
        content = f"{content}\n{calls}" if content else calls
    return message(role, content)


def tool_calls_text(calls: JSONValue) -> str:
    """Render a turn's `tool_calls`, a list of calls (or one call given alone), one `<tool_call>` block each."""
    return "\n".join(_tool_call_text(call) for call in (calls if isinstance(calls, list) else [calls]))


def _tool_call_text(call: object) -> str:
    """Render a tool call given as JSON text, `{name, arguments}`, or OpenAI `{function: {name, arguments}}`."""
    if isinstance(call, str):
        import json

        try:
            call = json.loads(call)
        except json.JSONDecodeError:
            return f"<tool_call>\n{call}\n</tool_call>"
    if isinstance(call, dict):
        inner = call.get("function", call)
        if isinstance(inner, dict) and "name" in inner:
            return render_tool_call(str(inner["name"]), inner.get("arguments", inner.get("parameters")))
    return f"<tool_call>\n{call}\n</tool_call>"


def sharegpt(record: JSONObject) -> list[Message] | Drop:
    """ShareGPT `{conversations[{from, value}]}` (also `{role, content}` turns); a DPO `chosen` turn is appended."""
    turns = record.get("conversations")
    if not isinstance(turns, list) or not turns:
        return Drop("missing_field", "sharegpt row needs a non-empty conversations list")
    messages: list[Message] = []
    system = record.get("system")
    if isinstance(system, str) and system.strip():
        messages.append(message("system", system))
    for turn in turns:
        if not isinstance(turn, dict):
            return Drop("malformed_turn", f"turn is {type(turn).__name__}")
        converted = _sharegpt_turn(turn)
        if isinstance(converted, Drop):
            return converted
        messages.append(converted)
    chosen = record.get("chosen")
    if isinstance(chosen, dict) and messages and messages[-1]["role"] == "user":
        converted = _sharegpt_turn(chosen)
        if isinstance(converted, Drop):
            return converted
        messages.append(converted)
    return messages


def _content_text(content: object) -> str:
    """Flatten OpenAI content: a string, or a list of parts `{type, text|value}`; reasoning parts are left out."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, dict):
                kind = part.get("type", "text")
                value = part.get("text") if part.get("text") is not None else part.get("value") or ""
                if kind == "reasoning":
                    continue
                if kind == "tool_call":
                    pieces.append(_tool_call_text(value))
                else:
                    pieces.append(str(value))
            else:
                pieces.append(str(part))
        return "\n".join(p for p in pieces if p)
    return str(content)


def openai_messages(record: JSONObject) -> list[Message] | Drop:
    """OpenAI `{messages[{role, content, tool_calls?}]}`; role `tool` becomes a user `<tool_response>` turn."""
    turns = record.get("messages")
    if not isinstance(turns, list) or not turns:
        return Drop("missing_field", "openai row needs a non-empty messages list")
    messages: list[Message] = []
    for turn in turns:
        if not isinstance(turn, dict):
            return Drop("malformed_turn", f"turn is {type(turn).__name__}")
        role = str(turn.get("role", ""))
        text = _content_text(turn.get("content"))
        if role == "tool":
            messages.append(message("user", render_tool_response(text)))
        elif role in {"system", "user", "assistant"}:
            tool_calls = turn.get("tool_calls")
            if role == "assistant" and tool_calls:
                calls = tool_calls_text(tool_calls)
                text = f"{text}\n{calls}" if text else calls
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
