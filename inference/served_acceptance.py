"""Acceptance length measured on a running SGLang or vLLM server, beside a no-speculation baseline's throughput.

Each prompt goes to SGLang's native `POST /generate` greedily (the body `inference.sglang_api` builds), as
token ids rendered once by the client (the native API applies no template, and text would be tokenized again
with special tokens added: a second BOS for Llama/Gemma tokenizers); a plain string is sent as `text` only
when the caller chose to. With speculation, `meta_info.spec_verify_ct` counts verification rounds, so the
set's acceptance length is sum(completion_tokens) / sum(spec_verify_ct), token-weighted like EAGLE's tau.
SGLang writes the counters only on an answer that verified at least once: an answer without them counts as 0
rounds when the server says it speculates, and the run fails only when no answer carries them.
`spec_num_correct_drafts` and `spec_num_proposed_drafts` give the draft acceptance rate where present.
Throughput is sum(completion_tokens) / wall time of the sequential run; the same prompts on a server without
speculation give the baseline, so the speedup is measured in one session.

vLLM reports no counters on an answer; it keeps them server-wide at `/metrics` (`inference/vllm_info.py`).
`evaluate_vllm` reads them before and after the run (`inference.server_info.get_vllm_counters`, unless the
caller passes its own reader) and differences them, so the server must serve nothing
else meanwhile (other requests' rounds would be counted too). Its prompts go to the OpenAI `/v1/completions`
as token ids (vLLM takes a list of ids as the prompt and adds nothing to it), greedily; the acceptance length
is 1 + accepted / drafts, and position i's acceptance is its accepted count over the count at position i-1.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict

import httpx

from core.spec_counters import SpecCounters, VllmSpecCounters
from inference.errors import InferenceError
from inference.generation import Sampling
from inference.openai_api import COMPLETIONS_PATH
from inference.server_info import get_vllm_counters
from inference.sglang_api import GENERATE_PATH, GenerateRequest, sampling_params

logger = logging.getLogger(__name__)

Prompt = list[int] | str  # token ids (the default), or text the server tokenizes itself


class ServerEvalError(InferenceError, RuntimeError):
    """A server that cannot be measured: unreachable, an HTTP error, or no speculation counters."""


class BaselineComparison(TypedDict, total=False):
    """A report's baseline keys, present when a baseline server was measured too."""

    baseline_tok_s: float
    speedup: float | None  # None when the baseline generated nothing


class ServerEvalReport(BaselineComparison):
    """`evaluate_server`'s report: the acceptance length of the set from SGLang's per-answer counters."""

    prompts: int
    prompt_format: Literal["text", "input_ids"]
    accept_length: float
    completion_tokens: int
    spec_verify_ct: int
    answers_without_counters: int
    per_request_accept_min: float
    per_request_accept_max: float
    speculative_tok_s: float
    spec_num_correct_drafts: NotRequired[int]  # the three draft keys come together, where SGLang reports them
    spec_num_proposed_drafts: NotRequired[int]
    draft_accept_rate: NotRequired[float]


class VllmEvalReport(BaselineComparison):
    """`evaluate_vllm`'s report: the acceptance length from vLLM's `/metrics` counters differenced around the run."""

    engine: Literal["vllm"]
    prompts: int
    prompt_format: Literal["text", "input_ids"]
    accept_length: float
    completion_tokens: int
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    draft_accept_rate: float
    per_position_accept: list[float]
    speculative_tok_s: float


@dataclass
class RunStats:
    """One server's pass over the prompts."""

    url: str
    completion_tokens: int = 0
    verify_rounds: int = 0
    answers_with_counters: int = 0
    answers_without_counters: int = 0
    correct_drafts: int | None = None
    proposed_drafts: int | None = None
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

    def count(self, meta: dict[str, Any]) -> None:
        """Add one answer's speculative counters (an answer without them verified nothing: 0 rounds)."""
        counters = SpecCounters.from_meta_info(meta)
        rounds = counters.spec_verify_ct
        if not rounds:
            self.answers_without_counters += 1
            return
        self.answers_with_counters += 1
        self.verify_rounds += rounds
        self.per_request_accept.append(int(meta.get("completion_tokens") or 0) / rounds)
        if counters.spec_num_correct_drafts is not None:
            self.correct_drafts = (self.correct_drafts or 0) + counters.spec_num_correct_drafts
        if counters.spec_num_proposed_drafts is not None:
            self.proposed_drafts = (self.proposed_drafts or 0) + counters.spec_num_proposed_drafts


def request_body(prompt: Prompt, max_new_tokens: int) -> GenerateRequest:
    """Return the greedy `/generate` body for `prompt`: `input_ids` for ids, `text` for a string."""
    greedy = Sampling(temperature=0.0, top_p=1.0, max_tokens=max_new_tokens)
    body: GenerateRequest = {"sampling_params": sampling_params(greedy), "stream": False}
    if isinstance(prompt, str):
        body["text"] = prompt
    else:
        body["input_ids"] = prompt
    return body


def run_prompts(client: httpx.Client, url: str, prompts: list[Prompt], max_new_tokens: int,
                speculative: bool) -> RunStats:
    """Send each prompt to url's /generate greedily; raise ServerEvalError on HTTP errors or no counters at all."""
    stats = RunStats(url=url)
    start = time.perf_counter()
    for prompt in prompts:
        try:
            response = client.post(url.rstrip("/") + GENERATE_PATH, json=request_body(prompt, max_new_tokens))
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise ServerEvalError(f"{url}/generate failed: {exc}") from None
        meta: dict[str, Any] = response.json().get("meta_info") or {}
        stats.completion_tokens += int(meta.get("completion_tokens") or 0)
        if speculative:
            stats.count(meta)
    stats.wall_s = time.perf_counter() - start
    if speculative and not stats.answers_with_counters:
        raise ServerEvalError(
            f"none of the {len(prompts)} answers from {url} carried meta_info.spec_verify_ct: the server "
            "reports speculation on but verified nothing (every answer stopped before a draft round?)")
    if stats.answers_without_counters:
        logger.info("%d of %d answers from %s verified nothing (no spec counters): counted as 0 rounds",
                    stats.answers_without_counters, len(prompts), url)
    return stats


def evaluate_server(url: str, prompts: list[Prompt], max_new_tokens: int = 256, baseline_url: str | None = None,
                    timeout_s: float = 300.0, transport: httpx.BaseTransport | None = None,
                    speculating: bool = True) -> ServerEvalReport:
    """Measure acceptance length on url (and the baseline's tok/s); return a JSON-ready report.

    `speculating` is what the server's info says; a server that does not speculate cannot be measured.
    """
    if not prompts:
        raise ServerEvalError("no prompts to send")
    if not speculating:
        raise ServerEvalError(f"{url} reports no speculative algorithm: nothing to measure (start it with "
                              "--speculative-algorithm EAGLE3 and the draft)")
    with httpx.Client(timeout=timeout_s, transport=transport) as client:
        spec = run_prompts(client, url, prompts, max_new_tokens, speculative=True)
        base = run_prompts(client, baseline_url, prompts, max_new_tokens, speculative=False) if baseline_url else None
    report: ServerEvalReport = {
        "prompts": len(prompts),
        "prompt_format": "text" if any(isinstance(p, str) for p in prompts) else "input_ids",
        "accept_length": round(spec.accept_length or 0.0, 4),
        "completion_tokens": spec.completion_tokens,
        "spec_verify_ct": spec.verify_rounds,
        "answers_without_counters": spec.answers_without_counters,
        "per_request_accept_min": round(min(spec.per_request_accept), 4),
        "per_request_accept_max": round(max(spec.per_request_accept), 4),
        "speculative_tok_s": round(spec.tokens_per_s, 2),
    }
    if spec.correct_drafts is not None and spec.proposed_drafts:
        report["spec_num_correct_drafts"] = spec.correct_drafts
        report["spec_num_proposed_drafts"] = spec.proposed_drafts
        report["draft_accept_rate"] = round(spec.correct_drafts / spec.proposed_drafts, 4)
    if base is not None:
        report["baseline_tok_s"] = round(base.tokens_per_s, 2)
        report["speedup"] = round(spec.tokens_per_s / base.tokens_per_s, 3) if base.tokens_per_s else None
    return report


def run_completions(client: httpx.Client, url: str, model: str, prompts: list[Prompt], max_new_tokens: int
                    ) -> RunStats:
    """Send each prompt to url's OpenAI `/v1/completions` greedily; count completion tokens and wall time."""
    stats = RunStats(url=url)
    start = time.perf_counter()
    for prompt in prompts:
        body = {"model": model, "prompt": prompt, "max_tokens": max_new_tokens, "temperature": 0.0}
        try:
            response = client.post(url.rstrip("/") + COMPLETIONS_PATH, json=body)
            response.raise_for_status()
            usage = response.json().get("usage") or {}
        except (httpx.HTTPError, ValueError) as exc:
            raise ServerEvalError(f"{url}/v1/completions failed: {exc}") from None
        stats.completion_tokens += int(usage.get("completion_tokens") or 0)
    stats.wall_s = time.perf_counter() - start
    return stats


def _read(read_counters: Callable[[], VllmSpecCounters | None], url: str) -> VllmSpecCounters:
    counters = read_counters()
    if counters is None:
        raise ServerEvalError(f"{url} has no vllm:spec_decode counters at /metrics: it runs without speculation "
                              "(start it with --speculative-config '{\"method\": \"eagle3\", ...}')")
    return counters


def evaluate_vllm(url: str, model: str, prompts: list[Prompt],
                  read_counters: Callable[[], VllmSpecCounters | None] | None = None, max_new_tokens: int = 256,
                  baseline_url: str | None = None, baseline_model: str | None = None, timeout_s: float = 300.0,
                  transport: httpx.BaseTransport | None = None) -> VllmEvalReport:
    """Acceptance on a vLLM server from its `/metrics` counters (`read_counters`, one reading a call; by
    default url's own `/metrics`) differenced around the run; return a JSON-ready report."""
    if not prompts:
        raise ServerEvalError("no prompts to send")
    reader = read_counters or (lambda: get_vllm_counters(url))  # a ServerInfoError ends as one line, exit 1
    before = _read(reader, url)
    with httpx.Client(timeout=timeout_s, transport=transport) as client:
        spec = run_completions(client, url, model, prompts, max_new_tokens)
        run = _read(reader, url) - before
        base = (run_completions(client, baseline_url, baseline_model or model, prompts, max_new_tokens)
                if baseline_url else None)
    if not run.drafts:
        raise ServerEvalError(f"{url} made no draft round over {len(prompts)} prompts: nothing to measure")
    report: VllmEvalReport = {
        "engine": "vllm",
        "prompts": len(prompts),
        "prompt_format": "text" if any(isinstance(p, str) for p in prompts) else "input_ids",
        "accept_length": round(run.accept_length or 0.0, 4),
        "completion_tokens": spec.completion_tokens,
        "num_drafts": run.drafts,
        "num_draft_tokens": run.draft_tokens,
        "num_accepted_tokens": run.accepted,
        "draft_accept_rate": round(run.draft_accept_rate or 0.0, 4),
        "per_position_accept": run.per_position_accept(),
        "speculative_tok_s": round(spec.tokens_per_s, 2),
    }
    if base is not None:
        report["baseline_tok_s"] = round(base.tokens_per_s, 2)
        report["speedup"] = round(spec.tokens_per_s / base.tokens_per_s, 3) if base.tokens_per_s else None
    return report
