"""Refuse JSON request bodies that are not JSON by RFC 8259 before any route sees them: 422 with a message.

Python's `json` module, which FastAPI parses bodies with, accepts `NaN`, `Infinity` and `-Infinity`, turns
`1e400` into infinity, hands back unpaired surrogates from `"\\ud800"` escapes, and reads bytes that are
not UTF-8. None of these can be stored or even encoded in the answer (the validation error would echo them),
so they used to end as 500s. This middleware parses every JSON body once more, strictly, and answers such a
body with a 422 in FastAPI's own validation-error shape (`{"detail": [{"type", "loc", "msg"}]}`) naming what
was wrong. Syntax errors are left to FastAPI, which reports them the same way. It runs inside the body-size
limit, so it buffers at most that. A body nesting arrays or objects deeper than `MAX_DEPTH` is refused the same
way before anything parses it: a thousand levels made the parsers (ours and FastAPI's) raise RecursionError, a
500 that bypassed the security headers; no request of this API nests more than three.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from curation.catalog.storable import unstorable_reason

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
MAX_DEPTH = 64
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]')


class NotStrictJson(ValueError):
    """The body parses only because Python's json is lenient."""


def _constant(name: str) -> Any:
    raise NotStrictJson(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotStrictJson(f"the number {text[:40]} is out of range for a 64-bit float")
    return value


def _check_strings(value: Any, path: list[str | int]) -> None:
    if isinstance(value, str):
        reason = unstorable_reason(value.replace("\x00", ""))  # a NUL is valid JSON; the store names its field
        if reason is not None:
            where = ".".join(str(p) for p in path) or "the body"
            raise NotStrictJson(f"{where}: a string contains {reason}")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_strings(key, [*path, "(key)"])
            _check_strings(item, [*path, key])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_strings(item, [*path, index])


def strict_json_problem(body: bytes) -> str | None:
    """Return why `body` is not strict JSON (not UTF-8, NaN/Infinity, an overflowing or endless number, a lone
    surrogate), or None when it is strict JSON or has a syntax error (FastAPI reports those itself)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"the body is not valid UTF-8 (byte {exc.start})"
    if _depth(text) > MAX_DEPTH:
        return f"the body nests deeper than {MAX_DEPTH} levels of arrays and objects"
    try:
        parsed = json.loads(text, parse_constant=_constant, parse_float=_finite)
        _check_strings(parsed, [])
    except NotStrictJson as exc:
        return str(exc)
    except json.JSONDecodeError:  # a syntax error: FastAPI answers it itself, with the position
        return None
    except ValueError:  # an integer past the interpreter's digit limit
        return "a number in the body has too many digits"
    return None


def _depth(text: str) -> int:
    """Return how deep `text` nests brackets outside strings (without parsing it, so without recursion)."""
    depth = deepest = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers", []):
        if name == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))
    return True  # FastAPI parses a body without a content type as JSON


class StrictJsonMiddleware:
    """Answer 422 to a JSON body with NaN, Infinity, an out-of-range number or an unpaired surrogate."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS or not _is_json(scope):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        message: Message = {"type": "http.request", "body": b"", "more_body": True}
        while message.get("more_body", False):
            message = await receive()
            if message["type"] != "http.request":  # the client went away: let the app see it
                break
            chunks.append(message.get("body", b""))
        body = b"".join(chunks)
        problem = strict_json_problem(body) if body else None
        if problem is not None:
            await _refuse(send, problem)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if message["type"] != "http.request":
            pending = message

            async def disconnected() -> Message:
                return pending

            await self.app(scope, disconnected, send)
            return
        await self.app(scope, replay, send)


async def _refuse(send: Send, problem: str) -> None:
    body = json.dumps({"detail": [{"type": "json_invalid", "loc": ["body"], "msg": problem}]}).encode()
    await send({"type": "http.response.start", "status": 422,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
