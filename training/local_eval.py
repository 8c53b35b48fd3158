"""Acceptance length measured locally: the target and the draft loaded side by side, the prompts decoded by both.

`evaluate_locally` is what `datahunt eval-accept` runs without a server: it loads the target (bf16 on a GPU,
fp32 on the CPU) and the exported draft on the target's device and dtype, renders every prompt row as token
ids with the rendering the draft was trained on, and runs `training.accept.evaluate` once per (batch, chain
length k). With `by_set` the prompts decode set by set (a row's `set` or `category`) and each run pools the
sets (`training.expectations.merge_reports`: at batch 1 a prompt decodes alone, so the pool equals one run
over all the prompts); the first run's per-set reports are what `--record` writes. Nothing here prints: the
caller sees progress through `on_run`, which starts a run and returns the callback for each finished prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from training.accept import AcceptReport
    from training.data import Rendering
    from training.eval_prompts import PromptRow

# (batch, k, prompts) of a run about to start -> the callback for each prompt it finishes
RunStart = Callable[[int, int, int], Callable[[int], None]]


class LocalDecoding(TypedDict):
    """How the prompts are decoded: `training.accept.evaluate`'s keyword arguments of these names."""

    max_new: int
    temperature: float
    seed: int
    schedule: str


@dataclass(frozen=True)
class LocalEvaluation:
    """One report per (batch, k) run, in the order they ran, and the first run's report per prompt set."""

    reports: list[AcceptReport] = field(default_factory=list)
    per_set: dict[str, AcceptReport] = field(default_factory=dict)


def device_available(device: str) -> bool:
    """True when `device` is `cpu`, or `cuda` on a machine with a GPU."""
    import torch

    return device == "cpu" or (device == "cuda" and torch.cuda.is_available())


def evaluate_locally(
    *, rows: list[PromptRow], draft: Path, target: Path, device: str, steps: list[int], batch: list[int],
    sampling: LocalDecoding, rendering: Rendering, by_set: bool = False, on_run: RunStart | None = None,
) -> LocalEvaluation:
    """Load the target and the draft on `device`, then evaluate every (batch, k) of `batch` x `steps`; return
    the reports (with `by_set` each run pools the prompt sets, decoded one set at a time)."""
    import torch

    from inference.decoding.hidden_states import target_embeddings
    from training.accept import evaluate
    from training.eval_prompts import encode_prompt
    from training.expectations import merge_reports, row_set
    from training.export import load_draft
    from training.trainer import load_target

    model, tokenizer = load_target(target, torch.device(device))
    draft_model, layers = load_draft(draft, target_embeddings(model).cpu(),
                                     target_layers=model.config.num_hidden_layers)
    draft_model = draft_model.to(device=model.device, dtype=model.dtype)
    ids = [encode_prompt(tokenizer, r, rendering) for r in rows]
    eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    names = [row_set(r) for r in rows] if by_set else ["all"] * len(rows)
    groups = {n: [ids[i] for i, m in enumerate(names) if m == n] for n in sorted(set(names))}
    done = LocalEvaluation()
    for b in batch:
        for k in steps:
            advance = on_run(b, k, len(ids)) if on_run is not None else None
            parts = {n: evaluate(model, draft_model, layers, g, k=k, eos=eos, on_prompt=advance, batch=b, **sampling)
                     for n, g in groups.items()}
            done.reports.append(merge_reports(list(parts.values())) if len(parts) > 1 else next(iter(parts.values())))
            if not done.per_set:
                done.per_set.update(parts)
    return done
