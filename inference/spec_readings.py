"""One reading of a serving engine's cumulative speculative counters, for `datahunt watch`.

vLLM (`GET /metrics`): `vllm:spec_decode_num_drafts_total` (rounds with drafts),
`vllm:spec_decode_num_accepted_tokens_total`, `…_per_pos_total{position=i}`, `vllm:generation_tokens_total`,
`vllm:request_success_total` (finished requests, by reason), the gauge `vllm:num_requests_running`, and
`process_start_time_seconds`, the API server's start, which changes when the server restarts. Every figure
is exact.

SGLang counts no rounds on its `/metrics` (started with `--enable-metrics`): it has `sglang:generation_tokens_total`,
`sglang:num_requests_total`, the gauge `sglang:num_running_reqs` and a gauge `sglang:spec_accept_length` of
its last logging interval only. Its `/server_info` gives `avg_spec_accept_length`, cumulative since start. The
rounds are therefore estimated as generated tokens over that mean (a request's first token comes from the
prefill, not a round, so it reads slightly high), and SGLang reports no acceptance per position.
"""

from __future__ import annotations

import httpx

from core.server_info import Engine
from inference import vllm_info
from inference.server_info import ServerInfoError, fetch_server_info
from inference.spec_window import SpecTotals

Samples = dict[str, list[tuple[dict[str, str], float]]]


def _total(samples: Samples, name: str) -> float:
    return sum(value for _, value in samples.get(name, []))


def _gauge(samples: Samples, name: str) -> float | None:
    values = samples.get(name)
    return sum(value for _, value in values) if values else None


def _epoch(samples: Samples, created: str) -> float | None:
    """When the counters started: the process's start time, else the counter's creation time."""
    start = samples.get("process_start_time_seconds")
    if start:
        return start[0][1]
    stamps = [value for _, value in samples.get(created, [])]
    return min(stamps) if stamps else None


def vllm_totals(metrics_text: str) -> SpecTotals | None:
    """vLLM's counters from its `/metrics` text; None when it runs without speculation."""
    samples = vllm_info.parse_metrics(metrics_text)
    counters = vllm_info.spec_counters(samples)
    if counters is None:
        return None
    return SpecTotals(rounds=counters.drafts, accepted=counters.accepted,
                      tokens=_total(samples, "vllm:generation_tokens_total"),
                      requests=_total(samples, "vllm:request_success_total"),
                      per_position=tuple(float(a) for a in counters.per_position),
                      epoch=_epoch(samples, f"{vllm_info.DRAFTS}_created"),
                      running=_gauge(samples, "vllm:num_requests_running"))


def sglang_totals(metrics_text: str, avg_accept_length: float | None) -> SpecTotals:
    """SGLang's counters from its `/metrics` text and `/server_info`'s cumulative mean acceptance length (None
    before its first speculative round): rounds = tokens / mean, accepted = tokens - rounds."""
    samples = vllm_info.parse_metrics(metrics_text)
    tokens = _total(samples, "sglang:generation_tokens_total")
    rounds = tokens / avg_accept_length if avg_accept_length and avg_accept_length >= 1 else 0.0
    return SpecTotals(rounds=rounds, accepted=tokens - rounds if rounds else 0.0, tokens=tokens,
                      requests=_total(samples, "sglang:num_requests_total"),
                      epoch=_epoch(samples, "sglang:generation_tokens_created"),
                      running=_gauge(samples, "sglang:num_running_reqs"))


async def _metrics_text(client: httpx.AsyncClient, base: str) -> str | None:
    try:
        response = await client.get(base + "/metrics")
    except httpx.HTTPError as exc:
        raise ServerInfoError(f"server at {base} is unreachable: {type(exc).__name__}: {exc}") from None
    if response.status_code in (404, 405):
        return None
    if response.status_code >= 400:
        raise ServerInfoError(f"{base}/metrics answered HTTP {response.status_code}")
    return response.text


async def read_totals(client: httpx.AsyncClient, base_url: str, engine: Engine) -> SpecTotals | None:
    """One reading of the engine's counters (None when it does not speculate); ServerInfoError when the server
    is unreachable or its answers cannot be read."""
    base = base_url.rstrip("/")
    text = await _metrics_text(client, base)
    try:
        if engine == "vllm":
            if text is None:
                raise ServerInfoError(f"{base} has no /metrics: cannot read vLLM's speculative counters")
            return vllm_totals(text)
        if text is None:
            raise ServerInfoError(f"{base} has no /metrics: start SGLang with --enable-metrics (its /server_info "
                                  "alone gives a mean since start, which cannot be windowed)")
        info = await fetch_server_info(client, base)
        if not info.speculating:
            return None
        return sglang_totals(text, info.avg_spec_accept_length)
    except vllm_info.MetricsError as exc:
        raise ServerInfoError(f"{base}: {exc}") from None
