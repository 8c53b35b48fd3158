"""Hidden states from a running vLLM server: the client side of vLLM's `extract_hidden_states` method.

A server started with `speculative_config = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
"draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": IDS}}}` and a hidden-states KV
connector as `kv_producer` keeps, for every request, the residual stream entering each layer in IDS (id L, the
layer count, is the last layer's output before the final norm) and writes them, when the request finishes, to
`<shared_storage_path>/<request id>.safetensors`: `hidden_states` [tokens, len(IDS), hidden] and `token_ids`.
The path comes back in the response's `kv_transfer_params.hidden_states_path`; a `.lock` beside the file is
held by the writer until the file is whole (a reader takes it shared and so waits). The engine sorts and
deduplicates IDS and records none of them in the file, and it deletes nothing it wrote: this client reads each
file once and removes it and its lock, so the engine's disk stays bounded by the requests in flight.

Each row is sent as token ids (`/v1/completions` with a list-of-ids prompt, one greedy token), so the engine
sees exactly the ids datahunt trains on; the ids in the file are checked against them. `probe` asks the server
what it serves (`/v1/models`: the model's path and context; `/server_info` in dev mode: the extraction layers)
and whether it extracts at all, before any row is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import torch

from core.engine_states import layers_in_path
from core.json_types import JSONObject, JSONValue
from inference.errors import InferenceError

EXTRACT_METHOD = "extract_hidden_states"


class EngineStatesError(InferenceError, RuntimeError):
    """A server that gives no hidden states, or gives states that cannot be the row's."""


class EngineUnreachable(EngineStatesError):
    """The server stopped answering (refused, reset, timed out) after the retries."""


@dataclass(frozen=True)
class ExtractionServer:
    """What a vLLM server says about itself: the model it serves, its context, its version, and (dev mode only)
    its speculative method. (vLLM shows no extraction layer ids: `core.engine_states` says how they are known.)"""

    url: str
    model: str  # the served model's name, as requests must give it
    root: str | None  # the path (or Hub id) the engine loaded
    max_model_len: int | None
    version: str | None
    method: str | None  # the speculative method, where the server shows its config (dev mode)


@dataclass(frozen=True)
class RowStates:
    """One row's states as the engine wrote them: [tokens, layers, hidden] and the ids it read, its greedy next
    token (an identity check: the target's head over its own final state must agree), and the layer ids its
    file's folder names (None: a folder not named by datahunt's launch line)."""

    states: torch.Tensor
    token_ids: list[int]
    next_token: int | None
    layer_ids: tuple[int, ...] | None


def _as_object(value: JSONValue) -> JSONObject:
    return value if isinstance(value, dict) else {}


async def probe(client: httpx.AsyncClient, url: str) -> ExtractionServer:
    """The served model and, where the server shows its config, its extraction layers; EngineUnreachable when
    it does not answer, EngineStatesError when what it says rules out extraction."""
    try:
        models = (await client.get(f"{url}/v1/models")).json()
    except (httpx.HTTPError, ValueError) as exc:
        raise EngineUnreachable(f"{url} does not answer /v1/models ({type(exc).__name__}: {exc})") from None
    listed = models.get("data") if isinstance(models, dict) else None
    model = next((m for m in listed if isinstance(m, dict)), None) if isinstance(listed, list) else None
    if model is None:
        raise EngineStatesError(f"{url}/v1/models lists no model: is it a vLLM server?")
    version = None
    with contextlib.suppress(httpx.HTTPError, ValueError):
        answer = (await client.get(f"{url}/version")).json()
        version = str(answer.get("version")) if isinstance(answer, dict) else None
    method: str | None = None
    with contextlib.suppress(httpx.HTTPError, ValueError):
        info = await client.get(f"{url}/server_info", params={"config_format": "json"})
        if info.status_code == 200:
            config = _as_object(_as_object(info.json()).get("vllm_config"))
            spec = _as_object(config.get("speculative_config"))
            method = str(spec.get("method") or "none") if config else None
    if method is not None and method != EXTRACT_METHOD:
        runs = "no speculative method" if method == "none" else f"speculative method {method!r}"
        raise EngineStatesError(f"{url} runs {runs}, not {EXTRACT_METHOD!r}: it hands out no hidden states; start "
                                "a server with the line `datahunt vllm-command --target T --extract` prints")
    context = model.get("max_model_len")
    return ExtractionServer(url=url, model=str(model.get("id")), root=str(model["root"]) if model.get("root") else None,
                            max_model_len=context if isinstance(context, int) else None, version=version,
                            method=method)


def read_states_file(path: Path) -> tuple[torch.Tensor, list[int]]:
    """Read one file the connector wrote (waiting on its lock while the engine writes), then remove it and its
    lock: (hidden_states [tokens, layers, hidden], token_ids)."""
    from safetensors.torch import load_file

    lock = Path(str(path) + ".lock")
    if not path.exists() and not lock.exists():
        raise EngineStatesError(f"the engine wrote the states to {path}, which is not on this machine: run capture "
                                "where the server's shared_storage_path is mounted")
    try:
        if lock.exists():
            with lock.open() as held:
                fcntl.flock(held, fcntl.LOCK_SH)  # the writer holds it exclusively until the file is whole
                data = load_file(str(path), device="cpu")
        else:
            data = load_file(str(path), device="cpu")
    except (OSError, RuntimeError, ValueError) as exc:
        raise EngineStatesError(f"cannot read the engine's states file {path}: {exc}") from None
    finally:
        for leftover in (path, lock):
            with contextlib.suppress(FileNotFoundError):
                os.remove(leftover)
    states, ids = data.get("hidden_states"), data.get("token_ids")
    if states is None or ids is None or states.dim() != 3:
        raise EngineStatesError(f"{path} holds no [tokens, layers, hidden] `hidden_states` and `token_ids`")
    return states, [int(t) for t in ids.tolist()]


def _next_token(choice: JSONObject) -> int | None:
    """The greedy token the engine sampled, from `logprobs` given as `token_id:N` strings."""
    logprobs = _as_object(choice.get("logprobs"))
    tokens = logprobs.get("tokens")
    if isinstance(tokens, list) and tokens and isinstance(tokens[0], str) and tokens[0].startswith("token_id:"):
        with contextlib.suppress(ValueError):
            return int(tokens[0].split(":", 1)[1])
    return None


class HiddenStatesClient:
    """Sends rows to one extraction server, `concurrency` at a time, and returns their states in order.

    Connection errors, timeouts, 429 and 5xx are retried with capped backoff; anything else, or a server that
    stays down, raises (EngineUnreachable names how far it got)."""

    def __init__(self, server: ExtractionServer, *, concurrency: int = 32, timeout_s: float = 600.0,
                 retries: int = 4) -> None:
        self.server, self.retries = server, retries
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0),
                                         limits=httpx.Limits(max_connections=concurrency))
        self._slots = asyncio.Semaphore(concurrency)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def fetch(self, ids: Sequence[int]) -> RowStates:
        """The engine's states for one row of token ids."""
        body: JSONObject = {"model": self.server.model, "prompt": [int(t) for t in ids], "max_tokens": 1,
                            "temperature": 0.0,
                "logprobs": 0, "return_tokens_as_token_ids": True}
        async with self._slots:
            answer = await self._post(body)
        params = _as_object(answer.get("kv_transfer_params"))
        path = params.get("hidden_states_path")
        if not isinstance(path, str):
            raise EngineStatesError(
                f"{self.server.url} answered without hidden states (no kv_transfer_params.hidden_states_path): it "
                "was not started with the extraction config; start it with the line `datahunt vllm-command "
                "--target T --extract` prints")
        states, token_ids = read_states_file(Path(path))
        choices = answer.get("choices")
        first = _as_object(choices[0]) if isinstance(choices, list) and choices else {}
        return RowStates(states=states, token_ids=token_ids, next_token=_next_token(first),
                         layer_ids=layers_in_path(path))

    async def tokenize_chat(self, messages: list[JSONObject]) -> list[int] | None:
        """The engine's own token ids for a conversation rendered by its chat template (vLLM's `/tokenize` with
        `messages`), or None when it has no such endpoint."""
        body = {"model": self.server.model, "messages": messages, "add_generation_prompt": False}
        try:
            response = await self._client.post(f"{self.server.url}/tokenize", json=body)
            answer = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        return [int(t) for t in tokens if isinstance(t, int)] if isinstance(tokens, list) else None

    async def fetch_many(self, rows: Sequence[Sequence[int]]) -> list[RowStates]:
        """States of several rows, sent concurrently, returned in the rows' order."""
        return list(await asyncio.gather(*(self.fetch(ids) for ids in rows)))

    async def _post(self, body: JSONObject) -> JSONObject:
        delay = 1.0
        for attempt in range(self.retries + 1):
            try:
                response = await self._client.post(f"{self.server.url}/v1/completions", json=body)
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                if attempt == self.retries:
                    raise EngineUnreachable(f"{self.server.url} stopped answering ({type(exc).__name__})") from None
            else:
                if response.status_code == 200:
                    answer = response.json()
                    return answer if isinstance(answer, dict) else {}
                if response.status_code != 429 and response.status_code < 500:
                    raise EngineStatesError(f"{self.server.url} refused a row: HTTP {response.status_code} "
                                            f"{response.text[:300]}")
                if attempt == self.retries:
                    raise EngineUnreachable(f"{self.server.url} kept answering HTTP {response.status_code}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 15.0)
        raise EngineUnreachable(f"{self.server.url} did not answer")  # not reached: the loop returns or raises
