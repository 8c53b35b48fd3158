"""One epoch's batches: rows shuffled and right-padded, by row count or packed by length under a token budget,
and the number of steps an epoch takes on every rank."""

from __future__ import annotations

import random
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from training.config import TrainConfig
from training.data import TokenizedRow


def steps_per_epoch(shard: list[TokenizedRow], cfg: TrainConfig, world: int, device: torch.device) -> int:
    """Batches per epoch, the same on every rank: with token budgets the ranks' shards pack into different counts,
    and DDP needs every rank to take every step, so all take the smallest count."""
    count = len(plan_batches(shard, cfg, seed=cfg.seed))
    if world > 1:
        value = torch.tensor([count], device=device)
        dist.all_reduce(value, op=dist.ReduceOp.MIN)
        count = int(value.item())
    return max(1, count)


def plan_batches(rows: list[TokenizedRow], cfg: TrainConfig, seed: int) -> list[tuple[Tensor, Tensor, Tensor]]:
    """One epoch's batches, shuffled: by token budget (cfg.batch_tokens) or by row count (cfg.batch_size)."""
    if cfg.batch_tokens is None:
        return list(batches(rows, cfg.batch_size, seed))
    return token_batches(rows, cfg.batch_tokens, seed)


def token_batches(rows: list[TokenizedRow], budget: int, seed: int) -> list[tuple[Tensor, Tensor, Tensor]]:
    """Rows sorted by length and packed while rows x padded width stays within `budget`; batch order shuffled.

    Sorting keeps padding small (neighbours have nearly equal lengths), so a batch is mostly real tokens and
    every step does about the same work. A row longer than the budget is a batch of its own.
    """
    order = sorted(range(len(rows)), key=lambda i: (len(rows[i].input_ids), i))
    groups: list[list[int]] = []
    for i in order:
        width = len(rows[i].input_ids)  # sorted ascending, so the newest row is the widest
        if groups and (len(groups[-1]) + 1) * width <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    random.Random(seed).shuffle(groups)
    return [_pad([rows[i] for i in g]) for g in groups]


def batches(rows: list[TokenizedRow], size: int, seed: int) -> Any:
    """Yield shuffled right-padded (input_ids, attention_mask, loss_mask) batches of `size` rows."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    for start in range(0, len(order), size):
        yield _pad([rows[i] for i in order[start : start + size]])


def _pad(chunk: list[TokenizedRow]) -> tuple[Tensor, Tensor, Tensor]:
    width = max(len(r.input_ids) for r in chunk)
    ids = torch.zeros(len(chunk), width, dtype=torch.long)
    attn = torch.zeros(len(chunk), width, dtype=torch.long)
    mask = torch.zeros(len(chunk), width, dtype=torch.long)
    for i, r in enumerate(chunk):
        n = len(r.input_ids)
        ids[i, :n] = torch.tensor(r.input_ids)
        attn[i, :n] = 1
        mask[i, :n] = torch.tensor(r.loss_mask)
    pin = torch.cuda.is_available()
    return (ids.pin_memory(), attn.pin_memory(), mask.pin_memory()) if pin else (ids, attn, mask)
