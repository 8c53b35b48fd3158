"""The regeneration plan: measured server throughput, rows and tokens to generate, time to finish, next steps.

`datahunt plan` sends a short probe of real prompts from the curated set (first user turns, at the run's
sampling settings and concurrency) and times it. Expected tokens = user turns to answer × completion tokens
per turn (mean, and the 10th/90th percentiles as the range) from the probe; time = tokens ÷ measured tok/s.
With the manifest it lists sources and budgets and the target model. The plan is written as JSON and as
Markdown, the form a team would otherwise write by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from inference.backend import GenerationBackend, Timeouts
from inference.generation import RetryableError, RowError, Sampling
from inference.monitor import format_duration
from inference.records import InputRow, PromptError, user_turns

TRAINING_DEFAULTS: dict[str, str | int | float] = {
    "draft": "EAGLE-3, one decoder layer, aux hidden states from 3 target layers",
    "ttt_length": 7,
    "learning_rate": 1e-4,
    "warmup_ratio": 0.015,
    "schedule": "cosine",
    "grad_clip": 0.5,
    "max_length": 2048,
    "draft_vocab_size": 32000,
    "dtype": "bf16",
}
EVAL_PLAN = [
    "Acceptance length (Σ completion tokens / Σ verification rounds) on held-out prompts of every category.",
    "Measured at temperature 0 and at the deployment's sampling temperature.",
    "Always beside a no-speculation baseline from the same server session (tok/s and latency).",
    "Check the serving flags first: --speculative-algorithm EAGLE3 (an accept length of exactly 1.00 means a "
    "wrong flag, layers or a missing head).",
]


class Quantiles(TypedDict):
    """Completion tokens (or their totals) with the mean and the 10th/90th percentile of the probe's lengths."""

    mean: float
    p10: float
    p90: float


class TimeToFinish(TypedDict):
    """Seconds to regenerate every row at the measured rate; None when nothing was measured."""

    expected: float | None
    low: float | None
    high: float | None


class PlanRows(TypedDict):
    """The curated rows and how many of them, and of their user turns, are to be answered."""

    total: int
    to_regenerate: int
    target_native: int
    user_turns_to_answer: int
    by_category: dict[str, int]


class PlanProbe(TypedDict):
    """What the throughput probe measured."""

    requests: int
    failed: int
    concurrency: int
    wall_s: float
    tok_s: float
    completion_tokens_per_turn: Quantiles


class PlanSource(TypedDict):
    """One manifest source as the plan lists it."""

    hub_id: str | None
    category: str | None
    max_rows: int | None
    target_native: bool


class PlanManifest(TypedDict):
    """The manifest's sources and budget; `path` is added by the caller that found the manifest file."""

    sources: list[PlanSource]
    budget: dict[str, object]
    path: NotRequired[str | None]


class RegenPlan(TypedDict):
    """The regeneration plan: written as `regen_plan.json`, and rendered as Markdown beside it."""

    server: str
    target: str | None
    sampling: dict[str, float | int | None]
    rows: PlanRows
    probe: PlanProbe
    expected_completion_tokens: Quantiles
    time_to_finish_s: TimeToFinish
    manifest: PlanManifest
    training: dict[str, str | int | float]
    evaluation: list[str]


@dataclass
class ProbeResult:
    """What the throughput probe measured."""

    requests: int
    failed: int
    wall_s: float
    completion_tokens: list[int]
    concurrency: int

    @property
    def tok_s(self) -> float:
        return sum(self.completion_tokens) / self.wall_s if self.wall_s > 0 else 0.0


async def probe_throughput(
    backend: GenerationBackend,
    endpoint: str,
    rows: list[InputRow],
    *,
    sampling: Sampling,
    concurrency: int,
    timeout_s: float = 600.0,
) -> ProbeResult:
    """Send the first user turn of each row (all at once, `concurrency` at a time); return the measurements."""
    prompts = []
    for row in rows:
        try:
            system, users = user_turns(row.messages)
        except PromptError:
            continue
        history = ([{"role": "system", "content": system}] if system is not None else []) + [
            {"role": "user", "content": users[0]}
        ]
        prompts.append(history)
    gate = asyncio.Semaphore(concurrency)
    lengths: list[int] = []
    failed = 0

    async def one(history: list[dict[str, str]]) -> None:
        nonlocal failed
        async with gate:
            try:
                result = await backend.generate_turn(history, sampling, endpoint=endpoint)
            except (RetryableError, RowError):
                failed += 1
                return
            lengths.append(result.completion_tokens or 0)

    backend.start(concurrency, Timeouts(request_s=timeout_s))
    try:
        started = time.monotonic()
        await asyncio.gather(*(one(h) for h in prompts))
        wall = time.monotonic() - started
    finally:
        await backend.aclose()
    return ProbeResult(len(prompts), failed, wall, lengths, concurrency)


def _quantile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]) if ordered else 0.0


def build_plan(
    rows: list[InputRow],
    probe: ProbeResult,
    *,
    server: str,
    sampling: Sampling,
    manifest: dict[str, Any] | None = None,
) -> RegenPlan:
    """Return the plan as JSON-ready data."""
    todo = [r for r in rows if r.needs_regeneration]
    turns = 0
    for row in todo:
        with contextlib.suppress(PromptError):
            turns += len(user_turns(row.messages)[1])
    lengths = probe.completion_tokens
    per_turn: Quantiles = {
        "mean": statistics.fmean(lengths) if lengths else 0.0,
        "p10": _quantile(lengths, 0.1),
        "p90": _quantile(lengths, 0.9),
    }
    tokens: Quantiles = {"mean": turns * per_turn["mean"], "p10": turns * per_turn["p10"],
                         "p90": turns * per_turn["p90"]}
    rate = probe.tok_s

    def duration(total_tokens: float) -> float | None:
        return total_tokens / rate if rate > 0 else None

    target = (manifest or {}).get("target") or {}
    budget = (manifest or {}).get("budget") or {}
    sources: list[PlanSource] = [
        {"hub_id": s.get("hub_id"), "category": s.get("category"), "max_rows": s.get("max_rows"),
         "target_native": s.get("target_native", False)}
        for s in (manifest or {}).get("sources", [])
    ]
    return {
        "server": server,
        "target": target.get("model"),
        "sampling": sampling.model_dump(),
        "rows": {
            "total": len(rows),
            "to_regenerate": len(todo),
            "target_native": len(rows) - len(todo),
            "user_turns_to_answer": turns,
            "by_category": dict(Counter(r.category or "unknown" for r in todo)),
        },
        "probe": {
            "requests": probe.requests,
            "failed": probe.failed,
            "concurrency": probe.concurrency,
            "wall_s": round(probe.wall_s, 3),
            "tok_s": round(rate, 2),
            "completion_tokens_per_turn": per_turn,
        },
        "expected_completion_tokens": tokens,
        "time_to_finish_s": {"expected": duration(tokens["mean"]), "low": duration(tokens["p10"]),
                             "high": duration(tokens["p90"])},
        "manifest": {"sources": sources, "budget": budget},
        "training": TRAINING_DEFAULTS,
        "evaluation": EVAL_PLAN,
    }


def _target_line(plan: RegenPlan) -> str:
    if plan["target"]:
        return f"`{plan['target']}`"
    path = plan["manifest"].get("path")
    return f"not named by the manifest (`{path}`)" if path else "not given (no manifest)"


def render_markdown(plan: RegenPlan) -> str:
    """Return the plan as a Markdown document."""
    rows, probe, finish = plan["rows"], plan["probe"], plan["time_to_finish_s"]
    per_turn = probe["completion_tokens_per_turn"]
    lines = [
        "# Regeneration plan",
        "",
        f"- Target: {_target_line(plan)} on `{plan['server']}`",
        f"- Sampling: {', '.join(f'{k}={v}' for k, v in plan['sampling'].items())}",
        f"- Rows: {rows['total']:,} curated, **{rows['to_regenerate']:,} to regenerate** "
        f"({rows['user_turns_to_answer']:,} user turns), {rows['target_native']:,} target-native passed through",
        f"- Measured: {probe['tok_s']:,.1f} tok/s with {probe['requests']} probe prompts at concurrency "
        f"{probe['concurrency']} ({probe['failed']} failed)",
        f"- Completion tokens per turn: mean {per_turn['mean']:,.0f}, p10 {per_turn['p10']:,.0f}, "
        f"p90 {per_turn['p90']:,.0f}",
        f"- Expected tokens: {plan['expected_completion_tokens']['mean']:,.0f} "
        f"(range {plan['expected_completion_tokens']['p10']:,.0f} – {plan['expected_completion_tokens']['p90']:,.0f})",
        f"- **Time to finish: {format_duration(finish['expected'])}** "
        f"(range {format_duration(finish['low'])} – {format_duration(finish['high'])}) at the measured rate",
        "",
        "## Rows by category",
        "",
        "| category | rows |",
        "|---|---:|",
        *[f"| {k} | {v:,} |" for k, v in sorted(rows["by_category"].items())],
    ]
    sources = plan["manifest"]["sources"]
    if sources:
        lines += ["", "## Sources and budgets (manifest)", "", "| source | category | max rows | target-native |",
                  "|---|---|---:|---|"]
        lines += [f"| {s['hub_id']} | {s['category']} | {s['max_rows'] or '–'} | {s['target_native']} |"
                  for s in sources]
        budget = plan["manifest"]["budget"]
        lines += ["", (f"Budget: total {budget.get('total') or 'all rows that pass'}, "
                       f"shares {budget.get('shares') or 'none'}")]
    if plan["manifest"].get("path"):
        lines += ["", f"Manifest: `{plan['manifest']['path']}`"]
    lines += ["", "## Training configuration to follow", ""]
    lines += [f"- {k}: {v}" for k, v in plan["training"].items()]
    lines += ["", "## Evaluation plan", ""] + [f"- {item}" for item in plan["evaluation"]]
    return "\n".join(lines) + "\n"
