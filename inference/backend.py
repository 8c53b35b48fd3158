"""The one interface every generation backend implements, and the base the HTTP backends share.

A run drives a backend through a fixed lifecycle: `start(requests)` before the first turn (an HTTP backend
opens its connection pool, an in-process engine sizes its slots), `generate_turn` (and, for raw prompts,
`generate_ids`) for every turn, `aclose()` once at the end (the pool is closed, a model's threads and caches
freed). The optional capabilities are declared here with their defaults, so a caller calls them directly:
`check_fits(max_tokens)` (a local engine refuses a KV cache the device cannot hold), `in_flight_tokens()`
(tokens of answers not finished yet, which the status counts in tok/s) and `tool_support_problem()` (a backend
that renders prompts itself says when its template cannot render tool calls). `reasoning` and `tool_rendering`
say how every prompt is rendered (`core.chat_render`); the run sets them on the backend it is given. A backend
says whether it answers through servers at endpoints (`has_endpoints`): only then does the runner balance,
probe and re-probe them; an in-process backend names itself (`describe()`) wherever a record names its server.

The HTTP backends (`OpenAIChatBackend`, `SGLangNativeBackend`) derive from `HttpBackend`, which owns the run's
one aiohttp session (explicit timeouts, one pooled connection per request in flight, plus a few for health
probes) and answers the pool's health checks through it.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from core.chat_render import ToolRendering
from core.tool_calls import Tool
from inference.endpoints import probe
from inference.errors import InferenceError
from inference.generation import Reasoning, Sampling, TurnResult, new_session, post_json

PROBE_CONNECTIONS = 4  # pooled connections beyond the requests in flight, for the health re-probes


class BackendNotStarted(InferenceError, RuntimeError):
    """A turn was asked of an HTTP backend before `start()` opened its session (or after `aclose()`)."""


@dataclass(frozen=True)
class Timeouts:
    """How long an HTTP backend waits: to connect, and for one answer (a read may take this long)."""

    connect_s: float = 10.0
    request_s: float = 600.0


DEFAULT_TIMEOUTS = Timeouts()


class GenerationBackend(ABC):
    """Answers one turn of a conversation; `api` is what records name it (`openai`, `sglang`, `local`)."""

    api: str
    has_endpoints: bool = True  # answers through servers the runner balances and probes
    reasoning: Reasoning = Reasoning.KEEP  # how the target's thinking is served: every prompt asks it so
    tool_rendering: ToolRendering = ToolRendering.NATIVE  # tool calls through the template's own tokens, or text

    def describe(self) -> str:
        """Return what a record names as the server of a turn when there is no endpoint (in-process)."""
        return self.api

    def start(self, requests: int, timeouts: Timeouts = DEFAULT_TIMEOUTS) -> None:
        """Get ready for at most `requests` turns in flight at once; called before the first turn, on the event
        loop the turns will run on."""
        return None  # nothing to prepare by default

    @abstractmethod
    async def generate_turn(self, history: list[dict[str, Any]], sampling: Sampling, *,
                            endpoint: str | None = None, tools: list[Tool] | None = None) -> TurnResult:
        """Return the answer to the last turn of `history` (from the server at `endpoint`, if any), offering
        `tools` (structured calls in `TurnResult.tool_calls` where the server parses them)."""

    def tool_support_problem(self) -> str | None:
        """Return why the chat template this backend renders with cannot render tool use natively (None: it can,
        or the server renders and is not asked here)."""
        return None

    def check_fits(self, max_tokens: int) -> None:
        """Raise ValueError, saying what to lower, when answers of `max_tokens` cannot fit; by default all fit."""
        return None

    def in_flight_tokens(self) -> int:
        """Return the tokens written so far for answers not finished yet (0 where the backend cannot tell)."""
        return 0

    async def healthy(self, endpoint: str) -> bool:
        """Return True when the server at `endpoint` answers its health check (no endpoint: always)."""
        return True

    async def aclose(self) -> None:
        """Free what `start` and the turns took (connections, threads, caches); the run calls it once."""
        return None  # nothing held by default


class RawBackend(GenerationBackend):
    """A backend that also continues raw prompt ids with no template applied (the prompt writer's use)."""

    @abstractmethod
    async def generate_ids(self, ids: list[int], sampling: Sampling, *, stop: tuple[str, ...] = (),
                           endpoint: str | None = None) -> TurnResult:
        """Continue `ids` until `stop` or the model's end of turn; return the continuation."""


class HttpBackend(RawBackend):
    """A backend answering through inference servers over HTTP, on one session it owns from start to aclose."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def start(self, requests: int, timeouts: Timeouts = DEFAULT_TIMEOUTS) -> None:
        """Open the session: `requests` pooled connections (plus a few for probes) and `timeouts`."""
        if self._session is None or self._session.closed:
            self._session = new_session(connections=max(1, requests) + PROBE_CONNECTIONS,
                                        connect_timeout_s=timeouts.connect_s,
                                        request_timeout_s=timeouts.request_s)

    @property
    def session(self) -> aiohttp.ClientSession:
        """Return the open session; raise BackendNotStarted when `start()` has not opened one."""
        if self._session is None or self._session.closed:
            raise BackendNotStarted(f"the {self.api} backend is not started: call start() before a turn")
        return self._session

    async def post(self, url: str, payload: Mapping[str, object]) -> dict[str, Any]:
        """POST `payload` to `url` on the session; the JSON object answered (errors typed as `post_json` says).
        An answer from a hidden-state extraction server (regeneration and capture through one engine) names the
        states file it wrote: regeneration needs none, so it is removed (`hidden_states_client.discard_states`)."""
        answer = await post_json(self.session, url, payload)
        if "kv_transfer_params" in answer:
            from inference.hidden_states_client import discard_states

            await asyncio.to_thread(discard_states, answer)
        return answer

    async def healthy(self, endpoint: str) -> bool:
        """Return True when the server at `endpoint` answers `GET /health` (or lists its models)."""
        return await probe(self.session, endpoint)

    async def aclose(self) -> None:
        """Close the session and its pooled connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None


def require_endpoint(backend: GenerationBackend, endpoint: str | None) -> str:
    """Return `endpoint`; raise ValueError when an HTTP backend was given none."""
    if endpoint is None:
        raise ValueError(f"the {backend.api} backend answers through a server: pass the endpoint")
    return endpoint
