"""Per-turn on-policy regeneration: every answer of a row generated against the regenerated history before it.

A row to regenerate holds its system and user turns (any text answers of the dataset's are dropped), and,
where the dataset's conversation used tools, the
recording: each assistant turn that called tools (its calls alone) and the tool results answering them
(`curation.samples.prompt_turns`). Walking the row, the target answers wherever the recording has an answer:
after every user turn (and after a group of tool results) that no recorded call follows, and at every recorded
call. There the target's answer is checked against the recording: when it calls the same functions with the
same arguments, its turn is kept (named by the recorded call ids) and the recorded results are spliced in as
the observations, since the tools would have answered so; when it calls other tools or other arguments, or
answers in text where the recording called, or calls a tool where the recording answered in text, the row stops
after that answer (the prefix is kept, on-policy as it is, and the reason recorded and counted): no tool can be
re-executed offline. A row without tools is the plain multi-turn case: every user turn answered in order.

Thinking is never sent back in the history (a server renders earlier turns without it); the stored turn holds
what `TurnResult.training_text` keeps for the reasoning mode.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from core.chat_render import Reasoning, has_tool_turns
from core.regen_records import TurnMeta
from core.samples import ROLES
from core.tool_calls import ToolCall, same_calls
from inference.errors import InferenceError
from inference.generation import TurnResult, strip_thinking
from inference.records import PromptError
from inference.tool_parser import parse_tool_calls

OTHER_CALL = "other_tool_call"  # the target called other functions, or the same with other arguments
NO_CALL = "no_tool_call"  # the recording called a tool here; the target answered in text
UNRECORDED_CALL = "unrecorded_tool_call"  # the target called a tool where the recording has no result for it

# (history so far, index of the answer in the row) -> (result, server, attempts)
Call = Callable[[list[dict[str, Any]], int], Awaitable[tuple[TurnResult, str, int]]]


@dataclass
class Stop:
    """Why a row stopped before its end: the reason code, in words, and which answer (0-based) diverged."""

    reason: str
    detail: str
    turn: int


@dataclass
class TurnsDone:
    """What a row's walk produced: the stored conversation, each answer's result, and the stop, if any."""

    conversation: list[dict[str, Any]] = field(default_factory=list)
    answers: list[tuple[TurnResult, str, int]] = field(default_factory=list)
    stop: Stop | None = None


class EmptyAnswer(InferenceError):
    """An answer with neither text nor calls; the runner fails the row with it."""

    def __init__(self, result: TurnResult, server: str, attempts: int, turn: int) -> None:
        super().__init__(f"empty answer (finish_reason={result.finish_reason})")
        self.result, self.server, self.attempts, self.turn = result, server, attempts, turn


def check_prompt(messages: list[dict[str, Any]]) -> None:
    """Raise PromptError unless the row can be walked: known roles, system turns only before the first user turn,
    and a user turn to answer."""
    seen_user = False
    for index, turn in enumerate(messages):
        role = turn["role"]
        if role not in ROLES:
            raise PromptError(f"unsupported role {role!r} at message {index}; regeneration needs "
                              "system/user/assistant/tool")
        if role == "system" and seen_user:
            raise PromptError(f"system message at position {index} after a user turn")
        if role in ("assistant", "tool") and not seen_user:
            raise PromptError(f"{role} turn at position {index} before any user turn")
        seen_user = seen_user or role == "user"
    if not seen_user:
        raise PromptError("no user turn to answer")


def _calls_of(result: TurnResult, uses_tools: bool, index: int) -> tuple[str, list[ToolCall]]:
    """The answer's text and calls: a server's structured calls, else (for a row that uses tools) the calls its
    text makes."""
    if result.tool_calls:
        return result.content, list(result.tool_calls)
    if uses_tools:
        return parse_tool_calls(result.content, f"call_{index}")
    return result.content, []


def _names(calls: list[ToolCall]) -> str:
    return ", ".join(f"{c['function']['name']}({c['function']['arguments'][:60]})" for c in calls) or "no call"


async def walk(messages: list[dict[str, Any]], tools: list[Any] | None, call: Call, reasoning: Reasoning
               ) -> TurnsDone:
    """Regenerate every answer of the row in order (see the module's docstring); return what was made. A
    dataset's own answers left in the row (assistant turns that call no tool) are dropped first."""
    messages = [t for t in messages if t["role"] != "assistant" or t.get("tool_calls")]
    check_prompt(messages)
    uses_tools = has_tool_turns(messages, tools)
    done = TurnsDone()
    history: list[dict[str, Any]] = []
    index = 0
    for position, turn in enumerate(messages):
        if turn["role"] != "assistant":
            history.append(dict(turn))
            done.conversation.append(dict(turn))
            upcoming = messages[position + 1]["role"] if position + 1 < len(messages) else None
            if turn["role"] == "system" or upcoming in ("tool", "assistant"):
                continue  # more results to splice, or the recorded call is where the target answers
            recorded: list[ToolCall] | None = None
        else:
            recorded = list(turn.get("tool_calls") or [])
        result, server, attempts = await call(history, index)
        text, calls = _calls_of(result, uses_tools, index)
        result.content = text
        stored = result.training_text(reasoning)
        if not stored.strip() and not calls:
            raise EmptyAnswer(result, server, attempts, index)
        done.answers.append((result, server, attempts))
        stop = _divergence(recorded, calls, index)
        if stop is None and recorded:  # the recorded results answer these calls: keep their ids
            calls = [{**ours, "id": theirs["id"]} for ours, theirs in zip(calls, recorded, strict=True)]
        answer: dict[str, Any] = {"role": "assistant", "content": stored}
        sent: dict[str, Any] = {"role": "assistant", "content": strip_thinking(text)}
        if calls:
            answer["tool_calls"] = sent["tool_calls"] = calls
        done.conversation.append(answer)
        history.append(sent)
        index += 1
        if stop is not None:
            done.stop = stop
            break
    return done


def _divergence(recorded: list[ToolCall] | None, calls: list[ToolCall], index: int) -> Stop | None:
    """Why the walk cannot go on after this answer (None: it can)."""
    if recorded is None:  # the recording answered here (or the row ends): a call would need a result it lacks
        if calls:
            return Stop(UNRECORDED_CALL, f"answer {index} calls {_names(calls)} where the recording has no result",
                        index)
        return None
    if not calls:
        return Stop(NO_CALL, f"answer {index} answers in text where the recording calls {_names(recorded)}", index)
    if not same_calls(calls, recorded):
        return Stop(OTHER_CALL, f"answer {index} calls {_names(calls)} where the recording calls "
                    f"{_names(recorded)}", index)
    return None


def turn_meta(result: TurnResult, server: str, attempts: int) -> TurnMeta:
    """Return what a row's meta records of one answered turn (the speculative counters where reported)."""
    meta: TurnMeta = {
        "finish_reason": result.finish_reason,
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "server": server,
        "latency_s": round(result.latency_s, 4),
        "attempts": attempts,
        "model": result.model,
    }
    if result.spec_verify_ct is not None:
        meta["spec_verify_ct"] = result.spec_verify_ct
    if result.spec_accept_length is not None:
        meta["spec_accept_length"] = result.spec_accept_length
    if result.spec_num_correct_drafts is not None:
        meta["spec_num_correct_drafts"] = result.spec_num_correct_drafts
    if result.spec_num_proposed_drafts is not None:
        meta["spec_num_proposed_drafts"] = result.spec_num_proposed_drafts
    if result.reasoning:
        meta["reasoning_chars"] = len(result.reasoning)
    return meta


def total(values: list[int | None]) -> int | None:
    """Return the sum of the values given, None when every one is None."""
    given = [v for v in values if v is not None]
    return sum(given) if given else None
