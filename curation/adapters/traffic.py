"""Adapter for a team's own traffic: OpenAI chat-completion request bodies, bare or inside a request-log record.

Accepted shapes, checked in this order (a record is scrubbed of PII before it gets here, `curation.pii`):
- a request body: `{"model", "messages": [...], ...}`;
- a log record wrapping it under `request` or `body` (also `request.body`), e.g. `{"request": {...},
  "response": {...}}` or `{"body": {...}, "status": 200}`;
- the answer, when the record carries it, under `response` (or `response.body`) as a chat completion
  (`choices[0].message`); it becomes the assistant turn after the last user turn, kept as an existing answer.
A completions request (`prompt`, no `messages`) is dropped as `not_chat`; a record with neither is `missing_field`.
"""

from __future__ import annotations

from core.json_types import JSONObject
from curation.adapters.chat import openai_messages
from curation.conversation import Drop, Message, message

REQUEST_KEYS = ("request", "body")
RESPONSE_KEYS = ("response",)


def _unwrap(record: JSONObject, keys: tuple[str, ...]) -> JSONObject | None:
    """Return the first dict under `keys` (a `body` inside it holding `choices` unwrapped too), else None."""
    for key in keys:
        inner = record.get(key)
        if isinstance(inner, dict):
            body = inner.get("body")
            return body if isinstance(body, dict) and "choices" in body else inner
    return None


def request_body(record: JSONObject, depth: int = 3) -> JSONObject | None:
    """Return the chat request inside a traffic record (the record itself when it is one), else None."""
    if "messages" in record:
        return record
    for key in REQUEST_KEYS if depth else ():
        inner = record.get(key)
        if isinstance(inner, dict):
            found = request_body(inner, depth - 1)
            if found is not None:
                return found
    return None


def _answer(record: JSONObject) -> str | None:
    response = _unwrap(record, RESPONSE_KEYS)
    if response is None:
        return None
    choices = response.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(first, dict):
        return None
    msg = first.get("message")
    content = msg.get("content") if isinstance(msg, dict) else None
    return content if isinstance(content, str) and content.strip() else None


def traffic_request(record: JSONObject) -> list[Message] | Drop:
    """Return the conversation of one logged chat request, its logged answer appended when present."""
    body = request_body(record)
    if body is None:
        inner = _unwrap(record, REQUEST_KEYS) or record
        if "prompt" in inner or "prompt" in record:
            return Drop("not_chat", "a completions request (prompt), not a chat request (messages)")
        return Drop("missing_field", "traffic row needs messages, or a request/body holding them")
    messages = openai_messages(body)
    if isinstance(messages, Drop):
        return messages
    answer = _answer(record)
    if answer is not None and messages and messages[-1]["role"] == "user":
        messages.append(message("assistant", answer))
    return messages
