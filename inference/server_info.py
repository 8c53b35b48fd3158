"""What an inference server says about itself: model, tokenizer, speculative settings, acceptance length.

SGLang answers `GET /server_info` with every resolved server argument at top level plus `internal_states[*]`
(where `avg_spec_accept_length` lives once speculation has run), `version` and `launch_command`; `GET
/model_info` adds `model_path`/`tokenizer_path`. Those are the current endpoints: `/get_server_info` and
`/get_model_info` are deprecated aliases that log a warning on the server at every call, so they are asked
only when the current ones are absent (an older server). Regeneration uses this to refuse a server that
serves another model than the manifest's target; the training preflight uses it to check the draft setup.
vLLM is the other engine a draft is served on: `fetch_server_info` tells the two apart (SGLang's
`/server_info` answers its server args flat; vLLM has no such endpoint, or with `VLLM_SERVER_DEV_MODE=1`
answers it as `{"vllm_config": ...}`, and always has `/version` and `/metrics`) and returns one `ServerInfo`
(the contract, in `core/server_info.py`, which the training preflight reads too) whose `engine` says which;
`inference/vllm_info.py` reads vLLM's answers. Anything else (llama.cpp, a proxy) raises `ServerInfoError`
naming both, or with `fetch_model_name` gives at least the model name from the OpenAI `/v1/models` list.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx

from core.json_types import JSONObject
from core.server_info import Engine, ServerInfo
from core.spec_counters import VllmSpecCounters
from inference import vllm_info
from inference.errors import InferenceError

logger = logging.getLogger(__name__)

INFO_PATHS = ("/server_info", "/get_server_info")  # current first; the deprecated alias only as fallback
MODEL_INFO_PATHS = ("/model_info", "/get_model_info")


class ServerInfoError(InferenceError):
    """The server is unreachable or does not answer SGLang's introspection endpoints; the message says which."""


def _as_int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _as_str(value: Any) -> str | None:
    return str(value) if value is not None else None


def parse_server_info(info: JSONObject, model_info: JSONObject | None = None) -> ServerInfo:
    """Return a ServerInfo built from a `/server_info` answer and an optional `/model_info` answer."""
    merged = dict(info)
    if model_info:
        merged["model_info"] = model_info
    model_info = model_info or {}
    states = info.get("internal_states")
    accepts = [
        float(accept)
        for state in (states if isinstance(states, list) else [])
        if isinstance(state, dict) and isinstance(accept := state.get("avg_spec_accept_length"), (int, float, str))
    ]
    engine: Engine = "vllm" if info.get("engine") == "vllm" else "sglang"
    nested = info.get("server_args")
    if isinstance(nested, dict):  # an older SGLang nested its arguments: both shapes read alike
        info = {**nested, **info}
    return ServerInfo(
        raw=merged,
        engine=engine,
        model_path=_as_str(info.get("model_path") or model_info.get("model_path")),
        tokenizer_path=_as_str(info.get("tokenizer_path") or model_info.get("tokenizer_path")),
        dtype=_as_str(info.get("dtype")),
        context_length=_as_int(info.get("context_length")),
        speculative_algorithm=_as_str(info.get("speculative_algorithm")),
        speculative_draft_model_path=_as_str(info.get("speculative_draft_model_path")),
        speculative_num_steps=_as_int(info.get("speculative_num_steps")),
        speculative_eagle_topk=_as_int(info.get("speculative_eagle_topk")),
        speculative_num_draft_tokens=_as_int(info.get("speculative_num_draft_tokens")),
        enable_deterministic_inference=bool(info.get("enable_deterministic_inference")),
        launch_command=_as_str(info.get("launch_command")),
        avg_spec_accept_length=sum(accepts) / len(accepts) if accepts else None,
        version=_as_str(info.get("version")),
        dev_mode=bool(info.get("dev_mode")),
    )


async def _get_text(client: httpx.AsyncClient, url: str) -> str | None:
    """The text at `url`, None when the endpoint is absent (404/405); ServerInfoError when unreachable or on
    another HTTP error."""
    try:
        response = await client.get(url)
    except httpx.HTTPError as exc:
        raise ServerInfoError(f"server at {url} is unreachable: {type(exc).__name__}: {exc}") from None
    if response.status_code in (404, 405):
        return None
    if response.status_code >= 400:
        raise ServerInfoError(f"{url} answered HTTP {response.status_code}: {response.text[:200]}")
    return response.text


async def _get_json(client: httpx.AsyncClient, url: str) -> JSONObject | None:
    """Return the JSON object at `url`, None on 404/405 (endpoint absent); raise ServerInfoError otherwise."""
    text = await _get_text(client, url)
    if text is None:
        return None
    try:
        body = json.loads(text)
    except ValueError:
        raise ServerInfoError(f"{url} did not answer JSON: {text[:200]!r}") from None
    if not isinstance(body, dict):
        raise ServerInfoError(f"{url} answered {type(body).__name__}, expected a JSON object")
    return body


async def _first_json(client: httpx.AsyncClient, base: str, paths: tuple[str, ...]) -> JSONObject | None:
    """Return the answer of the first of `paths` the server has (None when it has none of them)."""
    for path in paths:
        body = await _get_json(client, base + path)
        if body is not None:
            if path != paths[0]:
                logger.info("%s has no %s; read the deprecated %s instead", base, paths[0], path)
            return body
    return None


async def fetch_vllm_metrics(client: httpx.AsyncClient, base_url: str) -> VllmSpecCounters | None:
    """vLLM's speculative counters now (None when it does not speculate); ServerInfoError without /metrics."""
    text = await _get_text(client, base_url.rstrip("/") + "/metrics")
    if text is None:
        raise ServerInfoError(f"{base_url} has no /metrics: cannot read vLLM's speculative counters")
    try:
        return vllm_info.spec_counters(vllm_info.parse_metrics(text))
    except vllm_info.MetricsError as exc:
        raise ServerInfoError(f"{base_url}: {exc}") from None


async def _fetch_vllm(client: httpx.AsyncClient, base: str, dev_info: JSONObject | None) -> ServerInfo | None:
    """A vLLM server's info, or None when the server is not vLLM (no `vllm:` metrics and no vLLM version)."""
    # Another server may answer these paths with errors (llama.cpp's /metrics is a 501 unless started with
    # --metrics): an error here only means "not vLLM"; an unreachable server was already refused above.
    try:
        version_body = await _get_json(client, base + "/version")
    except ServerInfoError:
        version_body = None
    try:
        metrics = await _get_text(client, base + "/metrics")
    except ServerInfoError:
        metrics = None
    if dev_info is None and not (metrics and "vllm:" in metrics):
        return None
    if dev_info is not None:  # dev mode: ask again for the config as JSON (the default is one string)
        dev_info = await _get_json(client, base + "/server_info?config_format=json") or dev_info
    models = await _get_json(client, base + "/v1/models")
    try:
        raw = vllm_info.normalise((version_body or {}).get("version"), models, metrics, dev_info)
    except vllm_info.MetricsError as exc:
        raise ServerInfoError(f"{base}: {exc}") from None
    return parse_server_info(raw)


async def fetch_server_info(client: httpx.AsyncClient, base_url: str) -> ServerInfo:
    """Return the server's info: SGLang's `/server_info` merged with `/model_info` (deprecated aliases as
    fallback), or vLLM's `/version`, `/v1/models` and `/metrics` normalised to the same fields."""
    base = base_url.rstrip("/")
    info = await _first_json(client, base, INFO_PATHS)
    if info is not None and "vllm_config" not in info:
        model_info = await _first_json(client, base, MODEL_INFO_PATHS)
        return parse_server_info(info, model_info)
    vllm = await _fetch_vllm(client, base, info)
    if vllm is None:
        raise ServerInfoError(
            f"{base} is neither an SGLang server (no {' or '.join(INFO_PATHS)}) nor a vLLM server (no vllm: "
            "metrics at /metrics): check-server and eval-accept --server measure those two engines")
    return vllm


def get_server_info(base_url: str, *, timeout_s: float = 10.0) -> ServerInfo:
    """Synchronous `fetch_server_info` with its own short-lived client; returns the ServerInfo."""

    async def _run() -> ServerInfo:
        async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s)) as client:
            return await fetch_server_info(client, base_url)

    return asyncio.run(_run())


def get_vllm_counters(base_url: str, *, timeout_s: float = 10.0) -> VllmSpecCounters | None:
    """One synchronous reading of a vLLM server's speculative counters (None without speculation)."""

    async def _run() -> VllmSpecCounters | None:
        async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s)) as client:
            return await fetch_vllm_metrics(client, base_url)

    return asyncio.run(_run())


async def fetch_model_name(client: httpx.AsyncClient, base_url: str) -> str | None:
    """Return the model a server serves: SGLang's model path, else the first id of `/v1/models`, else None."""
    base = base_url.rstrip("/")
    try:
        return (await fetch_server_info(client, base)).model_path
    except ServerInfoError as exc:
        logger.debug("no SGLang server info at %s (%s); trying /v1/models", base, exc)
    try:
        body = await _get_json(client, base + "/v1/models")
    except ServerInfoError:
        return None
    models = (body or {}).get("data")
    if isinstance(models, list) and models and isinstance(models[0], dict) and models[0].get("id"):
        return str(models[0]["id"])
    return None


def same_model(expected: str, served: str) -> bool:
    """True when `served` names the `expected` model: equal ids, or equal last path parts (local copies)."""
    a, b = expected.strip().rstrip("/"), served.strip().rstrip("/")
    return a == b or a.rsplit("/", 1)[-1].lower() == b.rsplit("/", 1)[-1].lower()


async def find_model_mismatches(client: httpx.AsyncClient, urls: list[str], expected: str) -> list[str]:
    """Return one message per server whose advertised model is not `expected` (servers that say nothing pass)."""
    names = await asyncio.gather(*(fetch_model_name(client, url) for url in urls))
    return [
        f"{url} serves {name!r}, not the manifest's target {expected!r}" + (
            f" (llama.cpp names a model by its GGUF file: start llama-server with --alias {expected})"
            if name.lower().endswith(".gguf") else "")
        for url, name in zip(urls, names, strict=True)
        if name is not None and not same_model(expected, name)
    ]


def seed_warning(info: ServerInfo | None, seed: int | None) -> str | None:
    """Return a warning when `seed` is asked of an SGLang server that will ignore it, else None.

    SGLang only honours `sampling_seed` (the native parameter; the OpenAI `seed` maps onto it) when it runs
    with `--enable-deterministic-inference`; otherwise the same seed gives different answers run to run.
    """
    if seed is None or info is None or info.enable_deterministic_inference:
        return None
    return (f"--seed {seed} will be ignored: SGLang honours sampling_seed only when started with "
            "--enable-deterministic-inference, which this server's /server_info does not report")
