"""Acceptance length and speedup of a draft against its target, on this machine, with KV caches.

`evaluate` runs every prompt twice over the same static-cache target: alone (the baseline: one token per
forward) and speculatively (chain of k drafts per verification round, `inference.decoding.speculative`), timing both.
One round yields accepted + 1 tokens, so acceptance length (EAGLE's tau, SGLang's avg_spec_accept_length) is
sum(tokens) / sum(rounds) over the whole set, at least 1.0; the speedup is speculative tokens/s over the
baseline's on the same prompts at batch 1. At temperature 0 (greedy chain) the speculative output must equal
the baseline's token for token (`identical`); above 0 both sample, and the speculative output is distributed
exactly as the target's own sampling (tested statistically), so only the counts are compared.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

import torch

from inference.decoding.attention_kernels import without_cudnn
from inference.decoding.draft_model import Eagle3Draft
from inference.decoding.hidden_states import AuxLayers
from inference.decoding.spec_batch import BatchedGreedyBaseline, BatchedGreedyRounds
from inference.decoding.spec_graph import GreedyBaseline, GreedyRoundGraph
from inference.decoding.spec_sampled import SampledBaseline, SampledRoundGraph
from inference.decoding.speculative import (
    GreedyRule,
    RoundCounts,
    SamplingRule,
    speculative_decode,
    target_decode,
    target_runner,
    verify_sampled,
)
from inference.decoding.static_llama import SUPPORTED
from training.break_even import break_even_accept_length, describe, expected_speedup, round_cost

SCHEDULES = ("continuous", "static")  # how a batched run fills its rows (see _evaluate_batched)

__all__ = ["AcceptReport", "evaluate", "evaluate_acceptance", "evaluate_sampled_acceptance", "speculative_generate",
           "target_greedy", "verify_sampled"]


class AcceptSummary(TypedDict):
    """`AcceptReport.as_dict`: the JSON `datahunt eval-accept` prints."""

    accept_length: float
    rounds: int
    tokens: int
    position_rates: list[float]
    prompts: int
    temperature: float
    batch: int
    k: int
    schedule: NotRequired[str]  # batched runs only
    speculative_tok_s: NotRequired[float]  # the three timings, when the baseline was timed
    baseline_tok_s: NotRequired[float]
    speedup: NotRequired[float]
    round_cost_target_steps: NotRequired[float]  # the three costs, when both sides were timed
    break_even_accept_length: NotRequired[float]
    expected_speedup: NotRequired[float]
    identical_to_target_greedy: NotRequired[bool]  # greedy decoding only


@dataclass
class AcceptReport:
    """Token-weighted acceptance length, per-position acceptance rates, timings, and the identity check."""

    rounds: int = 0
    tokens: int = 0
    attempted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    prompts: int = 0
    identical: bool = True
    temperature: float = 0.0
    speculative_s: float = 0.0
    baseline_s: float = 0.0
    baseline_tokens: int = 0
    batch: int = 1
    schedule: str = "continuous"  # batched runs: rows refilled as they finish, or static groups of `batch`
    k: int = 0
    round_steps: int = 0  # rounds run over the whole batch (a round of B rows is one step)
    baseline_steps: int = 0  # the baseline's forwards over the whole batch (prefill included)

    @property
    def accept_length(self) -> float:
        """Sum of tokens per round over sum of rounds (1.0 means no draft token was ever accepted)."""
        return self.tokens / self.rounds if self.rounds else 0.0

    @property
    def position_rates(self) -> list[float]:
        """P(draft i accepted | drafts before it accepted), for i = 1..k."""
        return [a / n if n else 0.0 for a, n in zip(self.accepted, self.attempted, strict=True)]

    @property
    def speculative_tok_s(self) -> float:
        return self.tokens / self.speculative_s if self.speculative_s else 0.0

    @property
    def baseline_tok_s(self) -> float:
        return self.baseline_tokens / self.baseline_s if self.baseline_s else 0.0

    @property
    def speedup(self) -> float:
        """Speculative over baseline tokens/s, same prompts, batch 1 (0 when either was not timed)."""
        return self.speculative_tok_s / self.baseline_tok_s if self.baseline_tok_s else 0.0

    @property
    def round_cost(self) -> float:
        """One round's time in baseline steps, from this run's own timings (0 when either was not timed)."""
        if not (self.round_steps and self.baseline_steps and self.speculative_s and self.baseline_s):
            return 0.0
        return round_cost(self.speculative_s / self.round_steps, self.baseline_s / self.baseline_steps)

    def break_even(self) -> str:
        """'AL 2.09 vs break-even 1.42 at k=5: 1.47x expected, 1.44x measured' (empty when not timed)."""
        return describe(self.accept_length, self.round_cost, self.k, self.speedup) if self.round_cost else ""

    def add(self, counts: RoundCounts) -> None:
        """Pool one prompt's round counts into the report."""
        if len(self.attempted) != len(counts.attempted) and counts.attempted:
            self.attempted, self.accepted = [0] * len(counts.attempted), [0] * len(counts.attempted)
        self.attempted = [a + b for a, b in zip(self.attempted, counts.attempted, strict=True)]
        self.accepted = [a + b for a, b in zip(self.accepted, counts.accepted, strict=True)]
        self.rounds += counts.rounds
        self.tokens += counts.tokens

    def summary(self) -> str:
        """The result in words, e.g. 'accept 2.41 tokens per round, 1.62x faster than the target alone'."""
        words = f"accept {self.accept_length:.2f} tokens per round"
        if self.speedup:
            words += f", {self.speedup:.2f}x the target's own speed"
            if self.speedup < 1.05:
                words += " (no real speed-up)"
        elif self.accept_length < 1.1:
            words += " (about no speed-up)"
        return words

    def as_dict(self) -> AcceptSummary:
        """A JSON-ready summary."""
        out: AcceptSummary = {
            "accept_length": round(self.accept_length, 4), "rounds": self.rounds, "tokens": self.tokens,
            "position_rates": [round(r, 4) for r in self.position_rates], "prompts": self.prompts,
            "temperature": self.temperature, "batch": self.batch, "k": self.k}
        if self.batch > 1:
            out["schedule"] = self.schedule
        if self.baseline_s:
            out["speculative_tok_s"] = round(self.speculative_tok_s, 1)
            out["baseline_tok_s"] = round(self.baseline_tok_s, 1)
            out["speedup"] = round(self.speedup, 3)
        if self.round_cost:
            out["round_cost_target_steps"] = round(self.round_cost, 3)
            out["break_even_accept_length"] = round(break_even_accept_length(self.round_cost), 3)
            out["expected_speedup"] = round(expected_speedup(self.accept_length, self.round_cost), 3)
        if self.temperature == 0:  # the identity check only applies to greedy decoding
            out["identical_to_target_greedy"] = self.identical
        return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def evaluate(target: Any, draft: Eagle3Draft, layers: AuxLayers, prompts: list[list[int]], *, max_new: int, k: int,
             eos: set[int] | None = None, temperature: float = 0.0, seed: int = 0, baseline: bool = True,
             use_graph: bool = True, on_prompt: Callable[[int], None] | None = None, batch: int = 1,
             schedule: str = "continuous") -> AcceptReport:
    """Decode every prompt with the target alone (timed) and speculatively (timed); return the pooled report.

    No attention runs on cuDNN's kernel (inference.decoding.attention_kernels): it would charge a plan build to the
    first decoder that meets a prompt's length, and the baseline and the speculative decoder would not pay alike.
    """
    with without_cudnn():
        report = _evaluate(target, draft, layers, prompts, max_new=max_new, k=k, eos=eos, temperature=temperature,
                           seed=seed, baseline=baseline, use_graph=use_graph, on_prompt=on_prompt, batch=batch,
                           schedule=schedule)
        report.k = k
        return report


def _evaluate(target: Any, draft: Eagle3Draft, layers: AuxLayers, prompts: list[list[int]], *, max_new: int, k: int,
              eos: set[int] | None, temperature: float, seed: int, baseline: bool, use_graph: bool,
              on_prompt: Callable[[int], None] | None, batch: int, schedule: str) -> AcceptReport:
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, not {schedule!r}")
    eos = eos or set()
    device = next(target.parameters()).device
    max_len = max(map(len, prompts)) + max_new + k + 2
    draft.eval()
    if batch > 1:
        if temperature > 0 or getattr(target.config, "model_type", None) not in SUPPORTED:
            raise ValueError("batched speculative decoding is greedy on a Llama-family target (use batch 1)")
        return _evaluate_batched(target, draft, layers, prompts, max_new=max_new, k=k, eos=eos, batch=batch,
                                 baseline=baseline, use_graph=use_graph, max_len=max_len, on_prompt=on_prompt,
                                 schedule=schedule)
    if temperature <= 0 and getattr(target.config, "model_type", None) in SUPPORTED:
        return _evaluate_greedy_rounds(target, draft, layers, prompts, max_new=max_new, k=k, eos=eos,
                                       baseline=baseline, use_graph=use_graph, max_len=max_len, on_prompt=on_prompt)
    if temperature > 0 and getattr(target.config, "model_type", None) in SUPPORTED:
        return _evaluate_sampled_rounds(target, draft, layers, prompts, max_new=max_new, k=k, eos=eos,
                                        temperature=temperature, seed=seed, baseline=baseline, use_graph=use_graph,
                                        max_len=max_len, on_prompt=on_prompt)
    runner = target_runner(target, layers, max_len, k, use_graph=use_graph)
    generator = torch.Generator(device=device)

    def rule() -> Any:
        return GreedyRule() if temperature <= 0 else SamplingRule(temperature, generator)

    def alone(i: int, prompt: list[int]) -> list[int]:
        generator.manual_seed(seed + i)
        return target_decode(runner, prompt, max_new, eos, rule())

    def speculative(i: int, prompt: list[int], counts: RoundCounts) -> list[int]:
        generator.manual_seed(seed + 10_000 + i)
        return speculative_decode(runner, draft, prompt, max_new, k, eos, rule(), counts, max_len)

    return _timed(prompts, alone if baseline else None, speculative, device, AcceptReport(temperature=temperature),
                  on_prompt)


def _evaluate_greedy_rounds(target: Any, draft: Eagle3Draft, layers: AuxLayers, prompts: list[list[int]], *,
                            max_new: int, k: int, eos: set[int], baseline: bool, use_graph: bool, max_len: int,
                            on_prompt: Callable[[int], None] | None) -> AcceptReport:
    """Greedy chain on a Llama-family target: each round one replayed graph, against the graph-replayed target."""
    device = next(target.parameters()).device
    rounds = GreedyRoundGraph(target, draft, layers, k=k, max_len=max_len, use_graph=use_graph)
    base = GreedyBaseline(target, max_len=max_len, use_graph=use_graph) if baseline else None
    alone = (lambda i, prompt: base.decode(prompt, max_new, eos)) if base is not None else None
    return _timed(prompts, alone, lambda i, prompt, counts: rounds.decode(prompt, max_new, eos, counts), device,
                  AcceptReport(), on_prompt)


def _timed(prompts: list[list[int]], alone: Callable[[int, list[int]], list[int]] | None,
           speculative: Callable[[int, list[int], RoundCounts], list[int]], device: torch.device,
           report: AcceptReport, on_prompt: Callable[[int], None] | None) -> AcceptReport:
    """Decode each prompt alone (when given) and speculatively, each timed to the device's end; pool the counts.

    At temperature 0 the two outputs must be equal token for token (`identical`); sampled outputs differ by design.
    """
    for i, prompt in enumerate(prompts):
        reference = None
        if alone is not None:
            _sync(device)
            start = time.perf_counter()
            reference = alone(i, prompt)
            _sync(device)
            report.baseline_s += time.perf_counter() - start
            report.baseline_tokens += len(reference)
            report.baseline_steps += len(reference)  # the prefill and a decode step per later token
        counts = RoundCounts()
        _sync(device)
        start = time.perf_counter()
        spec = speculative(i, prompt, counts)
        _sync(device)
        report.speculative_s += time.perf_counter() - start
        report.add(counts)  # counts.tokens = len(spec) - 1: the prefill's token is not a round's
        report.round_steps += counts.rounds
        if report.temperature <= 0 and reference is not None:
            report.identical &= spec == reference
        report.prompts += 1
        if on_prompt:
            on_prompt(i)
    return report


def _evaluate_sampled_rounds(target: Any, draft: Eagle3Draft, layers: AuxLayers, prompts: list[list[int]], *,
                             max_new: int, k: int, eos: set[int], temperature: float, seed: int, baseline: bool,
                             use_graph: bool, max_len: int, on_prompt: Callable[[int], None] | None) -> AcceptReport:
    """Speculative sampling on a Llama-family target: each round one replayed graph (exact rejection sampling,
    noise pre-drawn from the seeded generator), against the target sampling alone over its replayed step."""
    device = next(target.parameters()).device
    generator = torch.Generator(device=device)
    rounds = SampledRoundGraph(target, draft, layers, k=k, max_len=max_len, temperature=temperature,
                               generator=generator, use_graph=use_graph)
    base = SampledBaseline(target, max_len=max_len, temperature=temperature, generator=generator,
                           use_graph=use_graph) if baseline else None

    def alone(i: int, prompt: list[int]) -> list[int]:
        assert base is not None
        generator.manual_seed(seed + i)
        return base.decode(prompt, max_new, eos)

    def speculative(i: int, prompt: list[int], counts: RoundCounts) -> list[int]:
        generator.manual_seed(seed + 10_000 + i)
        return rounds.decode(prompt, max_new, eos, counts)

    return _timed(prompts, alone if base is not None else None, speculative, device,
                  AcceptReport(temperature=temperature), on_prompt)


def _evaluate_batched(target: Any, draft: Eagle3Draft, layers: AuxLayers, prompts: list[list[int]], *, max_new: int,
                      k: int, eos: set[int], batch: int, baseline: bool, use_graph: bool, max_len: int,
                      on_prompt: Callable[[int], None] | None, schedule: str) -> AcceptReport:
    """Greedy chain over `batch` rows (ragged), against the target's own batched greedy decoding at the same batch;
    identical means every row equals the target's greedy output.

    schedule "continuous": a finished row takes the next prompt at once, as a serving engine's batch does;
    "static": groups of `batch` prompts, each run until its last row ends (the slowest row sets the pace)."""
    device = next(target.parameters()).device
    rounds = BatchedGreedyRounds(target, draft, layers, batch=batch, k=k, max_len=max_len, use_graph=use_graph)
    base = (BatchedGreedyBaseline(target, batch=batch, max_len=max_len + k + 1, use_graph=use_graph)
            if baseline else None)
    report = AcceptReport(batch=batch, schedule=schedule)
    groups = [prompts] if schedule == "continuous" else [prompts[i : i + batch] for i in range(0, len(prompts), batch)]
    first = 0
    for group in groups:
        references = None
        if base is not None:
            steps = base.steps
            _sync(device)
            start = time.perf_counter()
            references = base.decode(group, max_new, eos)
            _sync(device)
            report.baseline_s += time.perf_counter() - start
            report.baseline_tokens += sum(map(len, references))
            report.baseline_steps += base.steps - steps + len(group)  # the decode steps and one prefill a prompt
        counts = [RoundCounts() for _ in group]
        replays = rounds.replays

        def done(i: int, offset: int = first) -> None:
            report.prompts += 1
            if on_prompt:
                on_prompt(offset + i)

        _sync(device)
        start = time.perf_counter()
        outs = rounds.decode(group, max_new, eos, counts, on_done=done)
        _sync(device)
        report.speculative_s += time.perf_counter() - start
        report.round_steps += rounds.replays - replays
        for c in counts:
            report.add(c)
        if references is not None:
            report.identical &= outs == references
        first += len(group)
    return report


def evaluate_acceptance(target: Any, draft: Eagle3Draft, layers: AuxLayers, prompts: list[list[int]], max_new: int,
                        k: int, eos: set[int] | None = None) -> AcceptReport:
    """Greedy chain over every prompt; identical=False on any drift from the target's greedy output."""
    return evaluate(target, draft, layers, prompts, max_new=max_new, k=k, eos=eos)


def evaluate_sampled_acceptance(target: Any, draft: Eagle3Draft, layers: AuxLayers, prompts: list[list[int]],
                                max_new: int, k: int, temperature: float, seed: int = 0,
                                eos: set[int] | None = None) -> AcceptReport:
    """Acceptance length under speculative sampling at `temperature` (0 falls back to the greedy rule)."""
    return evaluate(target, draft, layers, prompts, max_new=max_new, k=k, eos=eos, temperature=temperature,
                    seed=seed)


def target_greedy(target: Any, prompt: list[int], max_new: int, eos: set[int]) -> list[int]:
    """The target's own greedy continuation (KV-cached)."""
    layers = AuxLayers((1, 1, 1), "input")  # unused by the baseline
    runner = target_runner(target, layers, len(prompt) + max_new + 2, 1, use_graph=False)
    return target_decode(runner, prompt, max_new, eos, GreedyRule())


def speculative_generate(target: Any, draft: Eagle3Draft, layers: AuxLayers, prompt: list[int], max_new: int,
                         k: int, eos: set[int], report: AcceptReport) -> list[int]:
    """Greedy speculative decoding of one prompt; its rounds are pooled into report."""
    max_len = len(prompt) + max_new + k + 2
    counts = RoundCounts()
    out = speculative_decode(target_runner(target, layers, max_len, k, use_graph=False), draft, prompt, max_new, k,
                             eos, GreedyRule(), counts, max_len)
    report.add(counts)
    return out
