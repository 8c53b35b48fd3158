"""Continuous batching over the static-cache target: a fixed set of slots, refilled as soon as rows finish.

Plain `generate` holds a batch until its longest row ends, so the GPU decodes padding for most of the batch's
life. Here every slot is an independent row: a decode step (one CUDA graph replay) advances all slots by one
token; a finished slot is refilled with the next waiting prompt, whose prefill writes its cache rows from
position 0. Finished rows are found every `sync_every` steps, so the host reads the device once per few steps,
not once per token (a row that ends between two checks simply stops counting tokens).

Sampling is per slot (temperature 0 = greedy; top-p by sorting, exactly as transformers' top-p filter) with
one seeded generator per engine, so a run is reproducible for a given arrival order. A prompt that cannot
fit `max_len` with its `max_new` tokens is refused (`ValueError`) before it takes a slot.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from inference.decoding.static_llama import DecodeGraph, StaticLlama

logger = logging.getLogger(__name__)


@dataclass
class Request:
    """One prompt to answer, and what the caller wants back when it is done."""

    ids: list[int]
    max_new: int
    temperature: float = 0.0
    top_p: float = 1.0
    tag: Any = None


@dataclass
class Finished:
    """A finished request: its new tokens (the stop token included when it stopped) and why it ended."""

    request: Request
    tokens: list[int]
    finish_reason: str  # "stop" | "length"


@dataclass
class EngineStats:
    """What the engine did: decode steps, prefills, tokens emitted, rows finished."""

    steps: int = 0
    prefills: int = 0
    tokens: int = 0
    finished: int = 0
    slot_steps_busy: int = 0
    slot_steps: int = 0
    in_flight_tokens: int = 0  # tokens written so far by rows still decoding (read at the last collect)
    finish_reasons: dict[str, int] = field(default_factory=dict)

    @property
    def occupancy(self) -> float:
        """Share of slot-steps that decoded a live row (1.0 = never idle)."""
        return self.slot_steps_busy / self.slot_steps if self.slot_steps else 0.0


PREFILTER = 64  # candidates scored first; rows whose nucleus lies past them fall back to the full sort


def nucleus(scaled: Tensor, top_p: Tensor, *, prefilter: int = PREFILTER) -> tuple[Tensor, Tensor, Tensor]:
    """(kept probabilities [S, K], their token ids [S, K], rows done) for temperature-scaled logits [S, V].

    The nucleus is the smallest set of most likely tokens whose mass reaches top_p. Sorting all V logits of every
    row is what costs; but when the `prefilter` most likely tokens already hold top_p of the mass (their
    probabilities taken under the full softmax), the nucleus lies among them and the top-k alone gives it exactly.
    `done` marks those rows; the others need `full_nucleus`.
    """
    k = min(prefilter, scaled.shape[-1])
    lse = torch.logsumexp(scaled, -1, keepdim=True)
    values, ids = scaled.topk(k, dim=-1)  # sorted, most likely first
    probs = (values - lse).exp()
    done = probs.sum(-1) >= top_p
    return _keep_prefix(probs, top_p), ids, done


def full_nucleus(scaled: Tensor, top_p: Tensor) -> tuple[Tensor, Tensor]:
    """(kept probabilities [S, V], token ids [S, V]) by sorting every logit: the reference, and the fallback."""
    values, ids = scaled.sort(dim=-1, descending=True)
    return _keep_prefix(values.softmax(-1), top_p), ids


def _keep_prefix(probs: Tensor, top_p: Tensor) -> Tensor:
    # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
    drop = (probs.cumsum(-1) - probs) >= top_p[:, None]
    return probs.masked_fill(drop, 0.0)


def sample(logits: Tensor, temperature: Tensor, top_p: Tensor, generator: torch.Generator | None) -> Tensor:
    """One token per row of logits [S, V]: argmax where temperature == 0, else top-p sampling at temperature.

    Exact top-p: the nucleus comes from the top PREFILTER candidates where they hold it (one host read of
    whether every row is done), else from a full sort of just the rows that need it.
    """
    greedy = logits.argmax(-1)
    scaled = logits.float() / temperature.clamp(min=1e-5)[:, None]
    probs, ids, done = nucleus(scaled, top_p)
    picked = ids.gather(-1, torch.multinomial(probs, 1, generator=generator)).squeeze(-1)
    if not bool(done.all()):
        rows = (~done).nonzero().flatten()
        full_probs, full_ids = full_nucleus(scaled[rows], top_p[rows])
        picked[rows] = full_ids.gather(-1, torch.multinomial(full_probs, 1, generator=generator)).squeeze(-1)
    return torch.where(temperature > 0, picked, greedy)


class ContinuousEngine:
    """Answers many requests over `runner.slots` slots; `run(requests)` or feed `submit` + `pump` from a loop."""

    def __init__(self, runner: StaticLlama, stop_ids: set[int], *, seed: int | None = 0, sync_every: int = 16,
                 use_graph: bool = True, prefill_chunk: int = 256) -> None:
        self.runner = runner
        self.device = runner.embed.device
        self.stop = torch.tensor(sorted(stop_ids) or [-1], device=self.device)
        self.sync_every = sync_every
        self.prefill_chunk = prefill_chunk
        self.generator = torch.Generator(device=self.device)
        if seed is not None:
            self.generator.manual_seed(seed)
        self.graph = DecodeGraph(runner, use_graph=use_graph)
        s = runner.slots
        self.max_new_cap = runner.max_len
        self.out = torch.zeros(s, runner.max_len, dtype=torch.long, device=self.device)
        self.cur = torch.zeros(s, 1, dtype=torch.long, device=self.device)
        self.pos = torch.zeros(s, 1, dtype=torch.long, device=self.device)
        self.count = torch.zeros(s, dtype=torch.long, device=self.device)
        self.limit = torch.zeros(s, dtype=torch.long, device=self.device)
        self.live = torch.zeros(s, dtype=torch.bool, device=self.device)
        self.done = torch.zeros(s, dtype=torch.bool, device=self.device)
        self.temp = torch.zeros(s, device=self.device)
        self.top_p = torch.ones(s, device=self.device)
        self.owner: list[Request | None] = [None] * s
        self.waiting: deque[Request] = deque()
        self.stats = EngineStats()

    def check(self, request: Request) -> None:
        """Raise ValueError when the prompt and its answer cannot fit one slot's cache."""
        if not request.ids:
            raise ValueError("empty prompt")
        if len(request.ids) + request.max_new > self.runner.max_len:
            raise ValueError(f"prompt of {len(request.ids)} tokens + {request.max_new} new exceeds the engine's "
                             f"{self.runner.max_len} positions per row")

    def submit(self, request: Request) -> None:
        """Queue a request (checked first); it takes the next free slot."""
        self.check(request)
        self.waiting.append(request)

    @property
    def busy(self) -> bool:
        """Whether any request is waiting or decoding."""
        return bool(self.waiting) or any(o is not None for o in self.owner)

    def run(self, requests: list[Request]) -> list[Finished]:
        """Answer every request; results in completion order."""
        for r in requests:
            self.submit(r)
        results: list[Finished] = []
        while self.busy:
            results += self.pump()
        return results

    def pump(self) -> list[Finished]:
        """Refill free slots, decode `sync_every` steps, return the rows that finished."""
        self._refill()
        for _ in range(self.sync_every):
            self._step()
        return self._collect()

    def _refill(self) -> None:
        free = [i for i, o in enumerate(self.owner) if o is None]
        while free and self.waiting:
            chunk = [self.waiting.popleft() for _ in range(min(len(free), len(self.waiting), self.prefill_chunk))]
            slots, free = free[: len(chunk)], free[len(chunk) :]
            self._prefill(slots, chunk)

    def _prefill(self, slots: list[int], requests: list[Request]) -> None:
        width = max(len(r.ids) for r in requests)
        tokens = torch.zeros(len(requests), width, dtype=torch.long)
        for row, r in enumerate(requests):
            tokens[row, : len(r.ids)] = torch.tensor(r.ids)
        lengths = torch.tensor([len(r.ids) for r in requests], device=self.device)
        positions = torch.arange(width, device=self.device).expand(len(requests), width)
        idx = torch.tensor(slots, device=self.device)
        logits, _ = self.runner.forward(tokens.to(self.device), positions, slots=idx, prefill=True)
        last = logits[torch.arange(len(requests), device=self.device), lengths - 1]
        temp = torch.tensor([r.temperature for r in requests], device=self.device)
        top_p = torch.tensor([r.top_p for r in requests], device=self.device)
        first = sample(last, temp, top_p, self.generator)
        self.out[idx, 0] = first
        self.cur[idx, 0] = first
        self.pos[idx, 0] = lengths
        self.count[idx] = 1
        self.limit[idx] = torch.tensor([r.max_new for r in requests], device=self.device)
        self.temp[idx], self.top_p[idx] = temp, top_p
        self.live[idx] = True
        self.done[idx] = torch.isin(first, self.stop) | (self.count[idx] >= self.limit[idx])
        for slot, r in zip(slots, requests, strict=True):
            self.owner[slot] = r
        self.stats.prefills += 1

    def _step(self) -> None:
        active = self.live & ~self.done
        logits = self.graph.step(self.cur, self.pos)
        token = sample(logits, self.temp, self.top_p, self.generator)
        rows = torch.arange(self.runner.slots, device=self.device)
        write_at = torch.where(active, self.count, 0).clamp(max=self.runner.max_len - 1)
        self.out[rows, write_at] = torch.where(active, token, self.out[rows, write_at])
        step = active.long()
        self.count += step
        self.pos[:, 0] = (self.pos[:, 0] + step).clamp(max=self.runner.max_len - 1)
        self.cur[:, 0] = torch.where(active, token, self.cur[:, 0])
        self.done |= active & (torch.isin(token, self.stop) | (self.count >= self.limit))
        self.stats.steps += 1

    def _collect(self) -> list[Finished]:
        done = (self.done & self.live).nonzero().flatten().tolist()
        counts = self.count.tolist()
        self.stats.slot_steps += self.runner.slots * self.sync_every
        results = []
        for slot in done:
            request = self.owner[slot]
            assert request is not None
            tokens = self.out[slot, : counts[slot]].tolist()
            reason = "stop" if tokens and tokens[-1] in self.stop.tolist() else "length"
            results.append(Finished(request, tokens, reason))
            self.owner[slot] = None
            self.stats.tokens += len(tokens)
            self.stats.finished += 1
            self.stats.finish_reasons[reason] = self.stats.finish_reasons.get(reason, 0) + 1
        self.stats.in_flight_tokens = sum(counts[s] for s, o in enumerate(self.owner) if o is not None)
        busy = sum(o is not None for o in self.owner) + len(done)
        self.stats.slot_steps_busy += busy * self.sync_every  # an upper bound: rows may end inside the window
        if done:
            idx = torch.tensor(done, device=self.device)
            self.live[idx] = False
            self.done[idx] = False
            self.pos[idx, 0] = 0
        return results
