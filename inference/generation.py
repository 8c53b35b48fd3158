"""What every generation backend speaks: sampling settings in, one answered turn out, typed errors.

A backend (the interface: `inference.backend`) answers one turn given the conversation so far. The runner
owns everything around it (endpoint choice, retries, journal), so the HTTP backends (OpenAI-compatible,
SGLang native) and the in-process ones plug in behind the same interface and resume the same way. Errors
are split the way the retry policy needs them: `RetryableError` (connection errors, timeouts, 429, 5xx: try
again, maybe elsewhere) and `RowError` (4xx, malformed answers: recorded on the row). `post_json` and
`new_session` are the HTTP backends' transport.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from pydantic import BaseModel, ConfigDict, Field

from core.chat_render import Reasoning as Reasoning  # the one reasoning mode, re-exported for the backends
from core.tool_calls import ToolCall
from inference.errors import InferenceError

THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|$)\s*", re.DOTALL)


class Sampling(BaseModel):
    """Sampling settings sent with every request and recorded on every row."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(default=0.7, ge=0)
    top_p: float = Field(default=0.95, gt=0, le=1)
    max_tokens: int = Field(default=2048, gt=0)
    seed: int | None = None

    def for_sample(self, sample: int) -> Sampling:
        """The settings for a prompt's `sample`-th answer: with a seed, seed + sample (a server answers the same
        prompt with the same seed identically, so every sample needs its own); without one, unchanged."""
        if sample == 0 or self.seed is None:
            return self
        return self.model_copy(update={"seed": self.seed + sample})


@dataclass
class TurnResult:
    """One answered turn: the text to train on, and what the server said about producing it."""

    content: str
    reasoning: str | None
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float
    model: str | None = None
    spec_verify_ct: int | None = None
    spec_accept_length: float | None = None
    spec_num_correct_drafts: int | None = None
    spec_num_proposed_drafts: int | None = None
    tool_calls: list[ToolCall] | None = None  # structured calls (a server's tool-call parser, or ours)

    def training_text(self, reasoning: Reasoning) -> str:
        """Return the assistant text for the training row: thinking inline in `<think>` markers when it is served
        (`served-on`) or kept (`keep`); none when it is not served (`served-off`) or dropped (`drop`)."""
        if reasoning in (Reasoning.KEEP, Reasoning.SERVED_ON) and self.reasoning:
            return f"<think>\n{self.reasoning.strip()}\n</think>\n\n{self.content}"
        if reasoning in (Reasoning.DROP, Reasoning.SERVED_OFF):
            return strip_thinking(self.content)
        return self.content


class RetryableError(InferenceError):
    """A failure worth retrying: connection error, timeout, 429 or 5xx. `endpoint_fault` marks a dead server."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        endpoint_fault: bool = False,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.endpoint_fault = endpoint_fault
        self.retry_after_s = retry_after_s


class RowError(InferenceError):
    """A failure of this row that a retry would repeat: a 4xx or a malformed answer."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


def strip_thinking(text: str) -> str:
    """Return `text` without `<think>…</think>` blocks (an unclosed block runs to the end)."""
    return THINK_BLOCK.sub("", text).lstrip()


def split_thinking(text: str) -> tuple[str | None, str]:
    """Return (thinking inside the first `<think>` block or None, the answer after it)."""
    match = re.match(r"\s*<think>(.*?)(?:</think>|$)\s*(.*)", text, re.DOTALL)
    if not match:
        return None, text
    return match.group(1).strip(), match.group(2)


def _retry_after_s(value: str | None) -> float | None:
    """Return a `Retry-After` header given in seconds, else None (HTTP dates are left to the backoff)."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


async def post_json(session: aiohttp.ClientSession, url: str, payload: Mapping[str, object]) -> dict[str, Any]:
    """POST `payload` and return the JSON object answered; raise RetryableError or RowError as the policy says."""
    try:
        async with session.post(url, json=payload) as response:
            status = response.status
            retry_after = _retry_after_s(response.headers.get("Retry-After"))
            raw = await response.read()
    except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
        raise RetryableError(f"cannot connect to {url}: {type(exc).__name__}", endpoint_fault=True) from None
    except TimeoutError as exc:  # aiohttp's read timeouts subclass it
        raise RetryableError(f"timeout from {url}: {type(exc).__name__}") from None
    except aiohttp.ClientError as exc:  # dropped connection, payload or protocol error
        raise RetryableError(f"transport error from {url}: {type(exc).__name__}: {exc}") from None
    text = raw.decode("utf-8", errors="replace")
    if status == 429 or status >= 500:
        raise RetryableError(f"HTTP {status} from {url}: {text[:200]}", status_code=status, retry_after_s=retry_after)
    if status >= 400:
        raise RowError(f"HTTP {status} from {url}: {text[:500]}", status_code=status)
    try:
        body = json.loads(raw)
    except ValueError:
        raise RowError(f"malformed answer from {url} (not JSON): {text[:200]!r}", status_code=status) from None
    if not isinstance(body, dict):
        raise RowError(f"malformed answer from {url}: expected a JSON object", status_code=status)
    return body


def new_session(*, connections: int, connect_timeout_s: float, request_timeout_s: float) -> aiohttp.ClientSession:
    """Return the run's one HTTP session: `connections` pooled keep-alive connections and explicit timeouts.

    aiohttp rather than httpx on this path: at a thousand requests a second its per-request CPU is a small
    fraction of httpx's (benchmarks/regen_client.py), and the client must never be the bottleneck.
    """
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, sock_read=request_timeout_s)
    connector = aiohttp.TCPConnector(limit=connections, limit_per_host=0, keepalive_timeout=60)
    return aiohttp.ClientSession(timeout=timeout, connector=connector)
