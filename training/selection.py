"""Acceptance-aware checkpoint selection: every N steps, estimate acceptance on held-out training rows and keep
the best draft, not the last.

A slice of the training rows (`select_rows`, drawn once with the run's seed) is held out of training. Every
`select_every` steps, and at the last step, the draft is scored on it by replay, without decoding: one pass of
the target (the trainer's own feature source: online, or offline from the cache) gives the aux states and
logits along each row, one TTT unroll of the draft gives its chain of proposals at every position, and the
greedy rounds are walked on the host (`training.replay.walk_rounds`). A proposal stands while it equals the target's
own greedy choice at that position (argmax of its logits), the rule greedy verification applies. Where a
row's answer is the target's greedy output, this is exactly the acceptance length greedy speculative
decoding measures (`tests/training/test_selection.py` checks it against `training.replay`); for sampled
answers it is the acceptance the target's verifier gives along the row's own text: an estimate that ranks
checkpoints, not a number to publish.

The best draft so far is kept in OUT/best/ (weights without the frozen embedding, and best.json: step,
estimate, rows, chain length), written whole; the run exports it instead of the last step's. Each estimate is
a record of train_log.jsonl and a curve on the run's plot. A resumed run forgets a best measured after the
step it resumes from (it measures that stretch again). Several ranks: each scores its share of the slice and
the counts are summed, so every rank takes the same decision; rank 0 alone writes.
"""

from __future__ import annotations

import io
import json
import logging
import random
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from inference.decoding.draft_model import Eagle3Draft
from inference.decoding.speculative import RoundCounts
from training.atomic_files import read_own, write_file
from training.config import ConfigError, TrainConfig
from training.data import TokenizedRow
from training.replay import walk_rounds

logger = logging.getLogger(__name__)

BEST_FOLDER = "best"
BEST_WEIGHTS = "draft.pt"
BEST_RECORD = "best.json"
FROZEN = ("embed_tokens.weight",)  # copied from the target at every start: not kept
States = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]  # (ids, attn) -> (aux states, target logits)


def hold_out(rows: list[TokenizedRow], cfg: TrainConfig) -> tuple[list[TokenizedRow], list[TokenizedRow]]:
    """(rows to train on, held-out rows): `select_rows` rows drawn with the run's seed when selection is on (the
    same rows at every resume), else (rows, [])."""
    if cfg.select_every is None:
        return rows, []
    if len(rows) <= cfg.select_rows:
        raise ConfigError(f"select_rows {cfg.select_rows} holds out every one of the {len(rows)} training rows: "
                          "lower --select-rows, or leave --select-every off")
    picked = set(random.Random(f"select:{cfg.seed}").sample(range(len(rows)), cfg.select_rows))
    return [r for i, r in enumerate(rows) if i not in picked], [r for i, r in enumerate(rows) if i in picked]


@dataclass
class Estimate:
    """One estimate: acceptance length (tokens per round) over the held-out rows, and its round counts."""

    step: int
    accept_length: float
    rounds: int
    tokens: int


def greedy_walk(counts: RoundCounts, preds: list[list[int]], greedy: list[int], mask: list[int], k: int) -> None:
    """Walk one row's greedy rounds over each supervised span: preds[t][j] is the draft's step-j proposal at
    position t (a target id), greedy[p] the target's argmax at p (its choice for token p+1).

    A span [s, e) of supervised tokens is an answer; its first round starts at t = s - 1 (the target's prefill
    emitted token s), proposal j at t is for token t+2+j and stands while it equals greedy[t+1+j]. Written as
    replay's walk over the sequence the target would emit (token p+1 = greedy[p]), so on a greedy answer the
    two are the same walk."""
    n = len(mask)
    s = 0
    while s < n:
        if not mask[s]:
            s += 1
            continue
        e = s
        while e < n and mask[e]:
            e += 1
        if s >= 1:
            emitted = [0, *greedy[: e - 1]]  # emitted[p + 1] = greedy[p]
            walk_rounds(counts, preds, emitted[:e], s, k)
        s = e


@torch.no_grad()
def estimate_acceptance(draft: Eagle3Draft, states: States, rows: list[TokenizedRow], k: int, device: torch.device,
                        autocast: Any = None, batch: int = 8) -> RoundCounts:
    """Pooled greedy round counts of `draft` (chain of k) over `rows`, by replay along each row."""
    counts = RoundCounts(attempted=[0] * k, accepted=[0] * k)
    was_training = draft.training
    draft.eval()
    order = sorted(rows, key=lambda r: len(r.input_ids))  # neighbours of equal length: little padding
    for start in range(0, len(order), batch):
        chunk = order[start : start + batch]
        ids, attn = _padded(chunk)
        aux, logits = states(ids.to(device), attn.to(device))
        with autocast if autocast is not None else nullcontext():
            steps = draft(ids.to(device), aux, k)
        preds = torch.stack([draft.draft_to_target(s.argmax(-1)) for s in steps], -1).tolist()  # [B, T, k]
        greedy = logits.argmax(-1).tolist()  # [B, T]
        for i, row in enumerate(chunk):
            n = len(row.input_ids)
            greedy_walk(counts, preds[i][:n], greedy[i][:n], row.loss_mask, k)
    draft.train(was_training)
    return counts


def _padded(chunk: list[TokenizedRow]) -> tuple[Tensor, Tensor]:
    width = max(len(r.input_ids) for r in chunk)
    ids = torch.zeros(len(chunk), width, dtype=torch.long)
    attn = torch.zeros(len(chunk), width, dtype=torch.long)
    for i, r in enumerate(chunk):
        ids[i, : len(r.input_ids)] = torch.tensor(r.input_ids)
        attn[i, : len(r.input_ids)] = 1
    return ids, attn


class Selection:
    """The held-out rows, the best estimate so far and where its draft is kept; `after_step` measures when due."""

    def __init__(self, cfg: TrainConfig, heldout: list[TokenizedRow], states: States, *, total_steps: int,
                 start_step: int, rank: int = 0, world: int = 1, device: torch.device | None = None,
                 autocast: Any = None, progress: Any = None) -> None:
        self.cfg, self.states, self.total_steps = cfg, states, total_steps
        self.rank, self.world, self.device = rank, world, device or torch.device("cpu")
        self.autocast, self.progress = autocast, progress
        self.rows = heldout[rank::world]
        self.folder = cfg.out / BEST_FOLDER
        self.best = read_best(cfg.out, up_to=start_step) if cfg.resume else None

    @property
    def every(self) -> int:
        return self.cfg.select_every or 0

    def due(self, step: int) -> bool:
        return bool(self.every) and (step % self.every == 0 or step == self.total_steps)

    def after_step(self, step: int, draft: Eagle3Draft, *, force: bool = False) -> Estimate | None:
        """Estimate at a due step (or now, `force`); keep the draft when it is the best so far (the first wins a
        tie)."""
        if not (force or self.due(step)):
            return None
        counts = estimate_acceptance(draft, self.states, self.rows, self.cfg.select_k, self.device, self.autocast)
        rounds, tokens = _summed(counts, self.world, self.device)
        found = Estimate(step=step, accept_length=round(tokens / max(1, rounds), 5), rounds=rounds, tokens=tokens)
        better = self.best is None or found.accept_length > self.best.accept_length
        if better:
            self.best = found
            if self.rank == 0:
                save_best(self.cfg.out, draft, found, self.cfg)
        if self.rank == 0 and self.progress is not None:
            self.progress.log_estimate(step, found.accept_length, best=better)
        logger.info("step %d: estimated acceptance %.3f on %d held-out rows%s", step, found.accept_length,
                    self.cfg.select_rows, " (best so far)" if better else "")
        return found

    def restore_best(self, draft: Eagle3Draft) -> Estimate | None:
        """Load the best draft's weights into `draft` (what the run exports); None when nothing was measured."""
        if self.best is None:
            return None
        weights = torch.load(self.folder / BEST_WEIGHTS, weights_only=True, map_location="cpu")
        result = draft.load_state_dict(weights, strict=False)
        if [k for k in result.missing_keys if k not in FROZEN] or result.unexpected_keys:
            raise ConfigError(f"{self.folder / BEST_WEIGHTS} does not fit this run's draft: use another --out")
        logger.info("exporting the best draft: step %d (estimated acceptance %.3f), not the last step's",
                    self.best.step, self.best.accept_length)
        return self.best


def _summed(counts: RoundCounts, world: int, device: torch.device) -> tuple[int, int]:
    if world == 1:
        return counts.rounds, counts.tokens
    both = torch.tensor([counts.rounds, counts.tokens], device=device, dtype=torch.long)
    dist.all_reduce(both)
    return int(both[0]), int(both[1])


def save_best(out: Path, draft: Eagle3Draft, found: Estimate, cfg: TrainConfig) -> None:
    """OUT/best/draft.pt (the weights but the frozen embedding) and best.json, each written whole; the
    record last, so that a record always names weights that are there."""
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in draft.state_dict().items() if k not in FROZEN}, buffer)
    folder = out / BEST_FOLDER
    write_file(folder / BEST_WEIGHTS, buffer.getvalue(), root=out)
    record = {"step": found.step, "estimated_accept_length": found.accept_length, "rounds": found.rounds,
              "tokens": found.tokens, "heldout_rows": cfg.select_rows, "k": cfg.select_k}
    write_file(folder / BEST_RECORD, (json.dumps(record) + "\n").encode("utf-8"), root=out)


def read_best(out: Path, up_to: int | None = None) -> Estimate | None:
    """The run's best estimate so far (None when none, when unreadable, or measured after step `up_to`)."""
    raw = read_own(out / BEST_FOLDER / BEST_RECORD, root=out)
    try:
        record = json.loads(raw) if raw is not None else None
        found = Estimate(step=int(record["step"]), accept_length=float(record["estimated_accept_length"]),
                         rounds=int(record["rounds"]), tokens=int(record["tokens"])) if record else None
    except (ValueError, KeyError, TypeError):
        return None
    if found is None or (up_to is not None and found.step > up_to):
        return None
    return found if (out / BEST_FOLDER / BEST_WEIGHTS).is_file() else None
