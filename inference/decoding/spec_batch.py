"""Greedy speculative decoding of a static batch of B prompts, each row accepting its own number of drafts.

`inference.decoding.spec_graph.GreedyRoundGraph` at B rows: every round is one fixed-shape program (a CUDA graph on a
GPU, the same code eagerly elsewhere). Rows are ragged: each keeps its own position (`start[b]`), so a row that
accepts 4 drafts moves 5 positions while its neighbour moves 1. The target's static cache already attends by
each row's own query positions (`inference.decoding.static_llama`), and the draft's step-0 cache here is masked per row
the same way, so no row waits for another. A row that has finished (end-of-sequence or max_new) stays in the
batch with its position frozen (`active[b] = 0`): its work is wasted, as in any static batch, and its output
ignored; the batch ends when every row has.

`BatchedGreedyBaseline` is the target's own batched greedy decoding over the same kind of cache (decode step
graph-replayed, tokens kept on the device, end-of-sequence checked every `sync_every` steps): what the speedup
at batch B is measured against.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from inference.decoding.draft_model import Eagle3Draft, PackedDraftLayer
from inference.decoding.hidden_states import AuxLayers
from inference.decoding.speculative import RoundCounts, cut_output
from inference.decoding.static_llama import DecodeGraph, StaticLlama, capture_graph


class BatchedGreedyRounds:
    """Greedy chain rounds over `batch` rows of static buffers; `decode(prompts, ...)` runs up to `batch` prompts."""

    def __init__(self, target: Any, draft: Eagle3Draft, layers: AuxLayers, *, batch: int, k: int, max_len: int,
                 use_graph: bool = True) -> None:
        self.batch, self.k, self.max_len = batch, k, max_len + k + 1
        self.target = StaticLlama(target, slots=batch, max_len=self.max_len)
        self.draft = draft
        self.aux_ids = layers.as_input().ids
        dev = self.device = self.target.embed.device
        attn = draft.midlayer.self_attn
        dtype = draft.fc.weight.dtype
        # Per row: the step-0 cache (positions 0..max_len-1), then k slots for this round's chain keys.
        self.k0 = torch.zeros(batch, attn.heads, self.max_len + k, attn.head_dim, device=dev, dtype=dtype)
        self.v0 = torch.zeros_like(self.k0)
        self.hidden = torch.zeros(batch, 1, draft.cfg.hidden_size, device=dev, dtype=dtype)
        self.start = torch.zeros(batch, dtype=torch.long, device=dev)
        self.last = torch.zeros(batch, dtype=torch.long, device=dev)
        self.active = torch.zeros(batch, dtype=torch.long, device=dev)
        self.result = torch.zeros(batch, k + 2, dtype=torch.long, device=dev)  # per row [a, k + 1 emitted slots]
        self.rows = torch.arange(batch, device=dev)
        self.key_pos = torch.arange(self.max_len + k, device=dev)
        self.own = [((self.key_pos >= self.max_len) & (self.key_pos < self.max_len + j))[None, None, None, :]
                    for j in range(k)]
        self.cos, self.sin = draft.midlayer.rope_tables(self.max_len + k, dev, dtype)
        self.layer = PackedDraftLayer(draft.midlayer)
        self.graph: Any = None
        self.replays = 0  # rounds run so far (for the cost of one round)
        if use_graph and dev.type == "cuda":
            self._capture()

    def _tables(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """Rotary rows at positions [B, T], shaped [B, 1, T, d] to rotate [B, heads, T, d]."""
        return self.cos[positions][:, None], self.sin[positions][:, None]

    # --- the round ---------------------------------------------------------------------------------------
    def _round(self) -> None:
        k, b, draft, layer = self.k, self.batch, self.draft, self.layer
        proposals = self._chain()  # [B, k]
        block = torch.cat([self.last[:, None], proposals], 1)
        positions = self.start[:, None] + torch.arange(k + 1, device=self.device)  # [B, k+1]
        logits, aux = self.target.forward(block, positions, aux_ids=self.aux_ids)
        assert aux is not None
        preds = logits.argmax(-1)  # [B, k+1]
        accepted = torch.cumprod((proposals == preds[:, :k]).long(), 1).sum(1)  # [B]
        bonus = preds.gather(1, accepted[:, None])
        slots = torch.arange(k + 1, device=self.device)[None]
        emitted = torch.where(slots < accepted[:, None], torch.cat([proposals, proposals[:, -1:]], 1), 0)
        emitted = emitted.scatter(1, accepted[:, None], bonus)
        # The draft's step-0 entries of positions start..start+k (only 0..a are real; the rest lie past the new
        # start, invisible to this row, and the next round overwrites them).
        hidden = draft.fc(aux.to(draft.fc.weight.dtype))
        embeds = draft.embed_tokens(emitted).to(hidden.dtype)
        q, kk, vv = layer.project(embeds, hidden, self._tables(positions))
        where = (self.rows[:, None].expand(b, k + 1), positions)
        self.k0.permute(0, 2, 1, 3).index_put_(where, kk.transpose(1, 2))
        self.v0.permute(0, 2, 1, 3).index_put_(where, vv.transpose(1, 2))
        mask = (self.key_pos[None, None, :] <= positions[:, :, None])[:, None]  # [B, 1, k+1, L+k]: no chain slot
        out = F.scaled_dot_product_attention(q, self.k0, self.v0, attn_mask=mask)
        newest = layer.finish(out.transpose(1, 2).reshape(b, k + 1, -1), residual=hidden)
        self.hidden.copy_(newest.gather(1, accepted.view(b, 1, 1).expand(b, 1, newest.shape[-1])))
        self.start.add_((accepted + 1) * self.active)  # a finished row stays where it is
        self.last.copy_(bonus[:, 0])
        self.result.copy_(torch.cat([accepted[:, None], emitted], 1))

    def _chain(self) -> Tensor:
        """k greedy proposals per row [B, k] (target ids); the chain's keys sit past max_len in k0/v0."""
        draft, layer, k, b = self.draft, self.layer, self.k, self.batch
        hidden = self.hidden
        token = draft.draft_to_target(draft.logits(hidden)[:, -1].argmax(-1))
        proposals = [token]
        base = (self.key_pos[None] < self.start[:, None])[:, None, None, :]  # [B, 1, 1, L+k]
        for j in range(1, k):
            pos = (self.start - 1 + j)[:, None]  # each row's chain position (TTT step j)
            q, kj, vj = layer.project(draft.embed_tokens(token.view(b, 1)).to(hidden.dtype), hidden,
                                      self._tables(pos))
            self.k0[:, :, self.max_len + j - 1 : self.max_len + j] = kj
            self.v0[:, :, self.max_len + j - 1 : self.max_len + j] = vj
            out = F.scaled_dot_product_attention(q, self.k0, self.v0, attn_mask=base | self.own[j])
            hidden = layer.finish(out.transpose(1, 2).reshape(b, 1, -1), residual=hidden)
            token = draft.draft_to_target(draft.logits(hidden)[:, -1].argmax(-1))
            proposals.append(token)
        return torch.stack(proposals, 1)

    def _capture(self) -> None:
        self.graph, _ = capture_graph(self._round, restore=(self.start, self.last, self.hidden, self.active))

    def step(self) -> None:
        """One round over every row (replayed where captured)."""
        self.replays += 1
        if self.graph is not None:
            self.graph.replay()
        else:
            self._round()

    # --- a batch of prompts ------------------------------------------------------------------------------
    def _prefill(self, row: int, prompt: list[int]) -> int:
        """Prompt into row `row` of both caches; returns the target's first token."""
        draft, layer, n = self.draft, self.layer, len(prompt)
        x = torch.tensor([prompt], device=self.device)
        prefix = torch.arange(n, device=self.device)
        logits, aux = self.target.forward(x, prefix[None], slots=torch.tensor([row], device=self.device),
                                          prefill=True, aux_ids=self.aux_ids)
        assert aux is not None
        first = logits[0, -1].argmax().view(1)
        hidden = draft.fc(aux.to(draft.fc.weight.dtype))
        following = torch.cat([x[0, 1:], first])[None]  # position t reads token t+1
        q, kk, vv = layer.project(draft.embed_tokens(following).to(hidden.dtype), hidden,
                                  (self.cos[prefix], self.sin[prefix]))
        self.k0[row : row + 1, :, :n], self.v0[row : row + 1, :, :n] = kk, vv
        out = F.scaled_dot_product_attention(q[:, :, -1:], kk, vv)
        self.hidden[row : row + 1].copy_(layer.finish(out.transpose(1, 2).reshape(1, 1, -1), residual=hidden[:, -1:]))
        self.start[row] = n
        self.last[row] = first[0]
        return int(first)

    @torch.no_grad()
    def decode(self, prompts: list[list[int]], max_new: int, eos: set[int], counts: list[RoundCounts],
               on_done: Callable[[int], None] | None = None) -> list[list[int]]:
        """Greedy speculative decoding of every prompt, `batch` rows at a time; counts[i] gets prompt i's rounds.

        Continuous batching: a row whose prompt has finished takes the next waiting prompt at once (its prefill
        runs between two rounds), so the batch stays full until the queue is empty; `batch` or fewer prompts is
        one static batch. on_done(i) is called as prompt i finishes.
        """
        self._check_batch(prompts, max_new, counts)
        outs: list[list[int]] = [[] for _ in prompts]
        holds: list[int | None] = [None] * self.batch  # the prompt each row decodes
        waiting = iter(range(len(prompts)))

        def finish(i: int) -> None:
            outs[i] = cut_output(outs[i], max_new, eos)
            if on_done:
                on_done(i)

        def admit(row: int) -> None:
            """The next waiting prompt into `row` (None when none is left)."""
            holds[row] = None
            for i in waiting:
                outs[i] = [self._prefill(row, prompts[i])]
                if len(outs[i]) >= max_new or outs[i][-1] in eos:
                    finish(i)
                    continue
                holds[row] = i
                return

        for row in range(self.batch):
            admit(row)
        for row in range(self.batch):  # rows with no prompt hold a copy of the first one, inactive
            if holds[row] is None:
                self._prefill(row, prompts[0])
        self._set_active(holds)
        while any(h is not None for h in holds):
            self.step()
            result = self.result.tolist()
            changed = False
            for row, i in enumerate(holds):
                if i is None:
                    continue
                accepted, new = self._emitted(result[row], len(outs[i]), max_new, eos)
                counts[i].record(accepted, self.k, len(new))
                outs[i] += new
                if len(outs[i]) >= max_new or outs[i][-1] in eos:
                    finish(i)
                    admit(row)
                    changed = True
            if changed:
                self._set_active(holds)
        return outs

    def _check_batch(self, prompts: list[list[int]], max_new: int, counts: list[RoundCounts]) -> None:
        """Raise ValueError unless there are prompts, one RoundCounts each, and the longest fits the cache."""
        if not prompts or len(counts) != len(prompts):
            raise ValueError(f"at least one prompt (and one RoundCounts each), not {len(prompts)} "
                             f"with {len(counts)} counts")
        longest = max(map(len, prompts))
        if longest + max_new + self.k + 1 > self.max_len:
            raise ValueError(f"prompt of {longest} + {max_new} new tokens exceeds {self.max_len} positions")

    def _set_active(self, holds: list[int | None]) -> None:
        """Rows decoding a prompt move; the others (finished, or never filled) stay frozen."""
        self.active.copy_(torch.tensor([h is not None for h in holds], dtype=torch.long))

    @staticmethod
    def _emitted(result: list[int], made: int, max_new: int, eos: set[int]) -> tuple[int, list[int]]:
        """What one row's round adds to its output of `made` tokens: (accepted drafts to count, new tokens).

        `result` is the row's [a, k + 1 emitted slots]: the a drafts that stood and the bonus token after them.
        """
        accepted, new = result[0], result[1 : result[0] + 2]
        stop = next((j for j, t in enumerate(new[:accepted]) if t in eos), None)
        if stop is not None:  # an accepted end-of-sequence ends the output: no bonus token
            accepted, new = stop + 1, new[: stop + 1]
        remaining = max_new - made
        return min(accepted, remaining), new[:remaining]


class BatchedGreedyBaseline:
    """The target alone over `batch` rows: graph-replayed decode step, tokens on the device, eos checked now
    and then."""

    def __init__(self, target: Any, *, batch: int, max_len: int, use_graph: bool = True, sync_every: int = 16) -> None:
        self.batch = batch
        self.runner = StaticLlama(target, slots=batch, max_len=max_len)
        self.graph = DecodeGraph(self.runner, use_graph=use_graph)
        self.sync_every, self.device = sync_every, self.runner.embed.device
        self.steps = 0  # decode steps run so far (for the cost of one step)

    @torch.no_grad()
    def decode(self, prompts: list[list[int]], max_new: int, eos: set[int],
               on_done: Callable[[int], None] | None = None) -> list[list[int]]:
        """Each prompt's greedy continuation (eos included), `batch` rows at a time, refilled as rows finish.

        Tokens stay on the device; the host reads them every `sync_every` steps, or sooner when a row reaches
        max_new (the host counts every row's tokens), so only a row that ends with end-of-sequence can idle a few
        steps before its row takes the next prompt.
        """
        if not prompts:
            raise ValueError("at least one prompt")
        b, dev = self.batch, self.device
        outs: list[list[int]] = [[] for _ in prompts]
        holds: list[int | None] = [None] * b
        made = [0] * b  # tokens of the row's current prompt so far
        state = _BaselineRows.zeros(b, max_new, dev)
        waiting = iter(range(len(prompts)))

        def finish(i: int, tokens: list[int]) -> None:
            outs[i] = cut_output(tokens, max_new, eos)
            if on_done:
                on_done(i)

        def admit(row: int) -> None:
            holds[row] = None
            for i in waiting:
                first = self._prefill(state, row, prompts[i])
                if max_new <= 1 or first in eos:
                    finish(i, [first])
                    continue
                holds[row], made[row] = i, 1
                return

        for row in range(b):
            admit(row)
        for row in range(b):  # rows with no prompt hold a copy of the first one, frozen
            if holds[row] is None:
                self._prefill(state, row, prompts[0])
        while any(h is not None for h in holds):
            live = torch.tensor([[h is not None] for h in holds], dtype=torch.long, device=dev)
            window = min(self.sync_every, *(max_new - made[r] for r, h in enumerate(holds) if h is not None))
            self._advance(state, live, window, max_new)
            rows = state.buf.tolist()
            for row, i in enumerate(holds):
                if i is None:
                    continue
                made[row] += window
                tokens = rows[row][: made[row]]
                if made[row] >= max_new or any(t in eos for t in tokens):
                    finish(i, tokens)
                    admit(row)
        return outs

    def _prefill(self, state: _BaselineRows, row: int, prompt: list[int]) -> int:
        """Prompt into row `row` of the cache; its first token starts the row's buffer. Returns that token."""
        dev = self.device
        logits, _ = self.runner.forward(torch.tensor([prompt], device=dev),
                                        torch.arange(len(prompt), device=dev)[None],
                                        slots=torch.tensor([row], device=dev), prefill=True)
        first = int(logits[0, -1].argmax())
        state.token[row, 0], state.position[row, 0], state.column[row, 0], state.buf[row, 0] = (
            first, len(prompt), 1, first)
        return first

    def _advance(self, state: _BaselineRows, live: Tensor, steps: int, max_new: int) -> None:
        """`steps` greedy decode steps over every row, tokens kept on the device; only `live` rows move."""
        for _ in range(steps):
            state.token = self.graph.step(state.token, state.position).argmax(-1).view(-1, 1)
            state.buf.scatter_(1, state.column.clamp(max=max_new - 1), state.token)
            state.position += live  # a frozen row stays where it is
            state.column += live
            self.steps += 1


@dataclass
class _BaselineRows:
    """The baseline's rows on the device: tokens so far [B, max_new], the newest token, its position, and the
    column of `buf` the row's next token goes to (each [B, 1])."""

    buf: Tensor
    token: Tensor
    position: Tensor
    column: Tensor

    @classmethod
    def zeros(cls, batch: int, max_new: int, device: torch.device) -> _BaselineRows:
        """Empty rows, filled by each row's prefill."""
        def zeros(*shape: int) -> Tensor:
            return torch.zeros(*shape, dtype=torch.long, device=device)

        return cls(buf=zeros(batch, max_new), token=zeros(batch, 1), position=zeros(batch, 1), column=zeros(batch, 1))
