"""Acceptance length measured on a running SGLang server, beside a no-speculation baseline's throughput.

Each prompt goes to the native `POST /generate` (greedy, rendered text: the native API applies no template).
With speculation, `meta_info.spec_verify_ct` counts verification rounds, so the set's acceptance length is
sum(completion_tokens) / sum(spec_verify_ct), token-weighted like EAGLE's tau. Throughput is
sum(completion_tokens) / wall time of the sequential run; the same prompts on a server without speculation
give the baseline, so the speedup is measured in one session.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx


class ServerEvalError(RuntimeError):
    """A server that cannot be measured: unreachable, an HTTP error, or no speculation counters."""


@dataclass
class RunStats:
    """One server's pass over the prompts."""

    url: str
    completion_tokens: int = 0
    verify_rounds: int = 0
    wall_s: float = 0.0
    per_request_accept: list[float] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of wall time."""
        return self.completion_tokens / self.wall_s if self.wall_s else 0.0

    @property
    def accept_length(self) -> float | None:
        """Sum of completion tokens over sum of verification rounds; None without speculation."""
        return self.completion_tokens / self.verify_rounds if self.verify_rounds else None


def run_prompts(client: httpx.Client, url: str, prompts: list[str], max_new_tokens: int,
                speculative: bool) -> RunStats:
    """Send each prompt to url's /generate greedily; raise ServerEvalError on HTTP errors or missing counters."""
    stats = RunStats(url=url)
    start = time.perf_counter()
    for prompt in prompts:
        body = {"text": prompt, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0}}
        try:
            response = client.post(f"{url.rstrip('/')}/generate", json=body)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise ServerEvalError(f"{url}/generate failed: {exc}") from None
        meta: dict[str, Any] = response.json().get("meta_info") or {}
        completion = int(meta.get("completion_tokens") or 0)
        stats.completion_tokens += completion
        if speculative:
            rounds = meta.get("spec_verify_ct")
            if not rounds:
                raise ServerEvalError(
                    f"{url} returned no meta_info.spec_verify_ct: the server is not speculating (started without "
                    "--speculative-algorithm?)")
            stats.verify_rounds += int(rounds)
            stats.per_request_accept.append(completion / int(rounds))
    stats.wall_s = time.perf_counter() - start
    return stats


def evaluate_server(url: str, prompts: list[str], max_new_tokens: int = 256, baseline_url: str | None = None,
                    timeout_s: float = 300.0, transport: httpx.BaseTransport | None = None) -> dict[str, Any]:
    """Measure acceptance length on url (and the baseline's tok/s); return a JSON-ready report."""
    if not prompts:
        raise ServerEvalError("no prompts to send")
    with httpx.Client(timeout=timeout_s, transport=transport) as client:
        spec = run_prompts(client, url, prompts, max_new_tokens, speculative=True)
        base = run_prompts(client, baseline_url, prompts, max_new_tokens, speculative=False) if baseline_url else None
    report: dict[str, Any] = {
        "prompts": len(prompts),
        "accept_length": round(spec.accept_length or 0.0, 4),
        "completion_tokens": spec.completion_tokens,
        "spec_verify_ct": spec.verify_rounds,
        "per_request_accept_min": round(min(spec.per_request_accept), 4),
        "per_request_accept_max": round(max(spec.per_request_accept), 4),
        "speculative_tok_s": round(spec.tokens_per_s, 2),
    }
    if base is not None:
        report["baseline_tok_s"] = round(base.tokens_per_s, 2)
        report["speedup"] = round(spec.tokens_per_s / base.tokens_per_s, 3) if base.tokens_per_s else None
    return report
