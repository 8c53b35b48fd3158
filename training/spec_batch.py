"""Greedy speculative decoding of a static batch of B prompts, each row accepting its own number of drafts.

`training.spec_graph.GreedyRoundGraph` at B rows: every round is one fixed-shape program (a CUDA graph on a
GPU, the same code eagerly elsewhere). Rows are ragged: each keeps its own position (`start[b]`), so a row that
accepts 4 drafts moves 5 positions while its neighbour moves 1. The target's static cache already attends by
each row's own query positions (`inference.static_llama`), and the draft's step-0 cache here is masked per row
the same way, so no row waits for another. A row that has finished (end-of-sequence or max_new) stays in the
batch with its position frozen (`active[b] = 0`): its work is wasted, as in any static batch, and its output
ignored; the batch ends when every row has.

`BatchedGreedyBaseline` is the target's own batched greedy decoding over the same kind of cache (decode step
graph-replayed, tokens kept on the device, end-of-sequence checked every `sync_every` steps): what the speedup
at batch B is measured against.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from inference.static_llama import DecodeGraph, StaticLlama, capture_graph
from training.draft_model import Eagle3Draft, PackedDraftLayer
from training.hidden_states import AuxLayers
from training.speculative import RoundCounts, cut_output


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
    def decode(self, prompts: list[list[int]], max_new: int, eos: set[int], counts: list[RoundCounts]
               ) -> list[list[int]]:
        """Greedy speculative decoding of up to `batch` prompts at once; counts[i] gets prompt i's rounds."""
        if not 0 < len(prompts) <= self.batch or len(counts) != len(prompts):
            raise ValueError(f"between 1 and {self.batch} prompts (and one RoundCounts each), not {len(prompts)}")
        longest = max(map(len, prompts))
        if longest + max_new + self.k + 1 > self.max_len:
            raise ValueError(f"prompt of {longest} + {max_new} new tokens exceeds {self.max_len} positions")
        outs: list[list[int]] = []
        for row in range(self.batch):  # rows past the prompts repeat the first one, inactive from the start
            first = self._prefill(row, prompts[row] if row < len(prompts) else prompts[0])
            if row < len(prompts):
                outs.append([first])
        live = [len(o) < max_new and o[-1] not in eos for o in outs] + [False] * (self.batch - len(prompts))
        self.active.copy_(torch.tensor(live, dtype=torch.long))
        while any(live):
            self.step()
            result = self.result.tolist()
            changed = False
            for row, out in enumerate(outs):
                if not live[row]:
                    continue
                accepted, new = result[row][0], result[row][1 : result[row][0] + 2]
                stop = next((i for i, t in enumerate(new[:accepted]) if t in eos), None)
                if stop is not None:  # an accepted end-of-sequence ends the output: no bonus token
                    accepted, new = stop + 1, new[: stop + 1]
                remaining = max_new - len(out)
                new = new[:remaining]
                counts[row].record(min(accepted, remaining), self.k, len(new))
                out += new
                if len(out) >= max_new or out[-1] in eos:
                    live[row], changed = False, True
            if changed:
                self.active.copy_(torch.tensor(live, dtype=torch.long))
        return [cut_output(o, max_new, eos) for o in outs]


class BatchedGreedyBaseline:
    """The target alone over `batch` rows: graph-replayed decode step, tokens on the device, eos checked now and then."""

    def __init__(self, target: Any, *, batch: int, max_len: int, use_graph: bool = True, sync_every: int = 16) -> None:
        self.batch = batch
        self.runner = StaticLlama(target, slots=batch, max_len=max_len)
        self.graph = DecodeGraph(self.runner, use_graph=use_graph)
        self.sync_every, self.device = sync_every, self.runner.embed.device
        self.steps = 0  # decode steps run so far (for the cost of one step)

    @torch.no_grad()
    def decode(self, prompts: list[list[int]], max_new: int, eos: set[int]) -> list[list[int]]:
        """Each prompt's greedy continuation (eos included), up to `batch` prompts at once."""
        if not 0 < len(prompts) <= self.batch:
            raise ValueError(f"between 1 and {self.batch} prompts, not {len(prompts)}")
        rows = [prompts[r] if r < len(prompts) else prompts[0] for r in range(self.batch)]
        firsts = []
        for row, prompt in enumerate(rows):
            logits, _ = self.runner.forward(torch.tensor([prompt], device=self.device),
                                            torch.arange(len(prompt), device=self.device)[None],
                                            slots=torch.tensor([row], device=self.device), prefill=True)
            firsts.append(logits[0, -1].argmax())
        token = torch.stack(firsts).view(-1, 1)
        out = torch.zeros(self.batch, max_new, dtype=torch.long, device=self.device)
        out[:, 0] = token[:, 0]
        position = torch.tensor([[len(p)] for p in rows], device=self.device)
        made = 1
        while made < max_new:
            for _ in range(min(self.sync_every, max_new - made)):
                token = self.graph.step(token, position).argmax(-1).view(-1, 1)
                out[:, made] = token[:, 0]
                position = position + 1
                made += 1
                self.steps += 1
            done = out[: len(prompts), :made].tolist()
            if all(any(t in eos for t in row) for row in done):
                break
        return [cut_output(row, max_new, eos) for row in out[: len(prompts), :made].tolist()]
