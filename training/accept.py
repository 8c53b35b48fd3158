"""Acceptance length of a draft against its target: greedy speculative decoding with a chain of k drafts.

One verification round: the draft proposes d_1..d_k from the target's aux states; the target scores
context + drafts in one forward; d_i is accepted while it equals the target's own greedy choice at its
position; the target's choice after the last accepted draft is the bonus token. The round yields
accepted + 1 tokens, so acceptance length (EAGLE's tau, SGLang's avg_spec_accept_length) is
sum(tokens) / sum(rounds) over the whole set, at least 1.0. The output is checked to be identical to the
target's own greedy decoding, which a correct verifier guarantees whatever the draft proposes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from training.draft_model import Eagle3Draft, ttt_attention
from training.hidden_states import AuxLayers, capture


@dataclass
class AcceptReport:
    """Token-weighted acceptance length, per-position acceptance rates, and the identity check."""

    rounds: int = 0
    tokens: int = 0
    attempted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    prompts: int = 0
    identical: bool = True

    @property
    def accept_length(self) -> float:
        """Sum of tokens per round over sum of rounds (1.0 means no draft token was ever accepted)."""
        return self.tokens / self.rounds if self.rounds else 0.0

    @property
    def position_rates(self) -> list[float]:
        """P(draft i accepted | drafts before it accepted), for i = 1..k."""
        return [a / n if n else 0.0 for a, n in zip(self.accepted, self.attempted, strict=True)]

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {"accept_length": round(self.accept_length, 4), "rounds": self.rounds, "tokens": self.tokens,
                "position_rates": [round(r, 4) for r in self.position_rates], "prompts": self.prompts,
                "identical_to_target_greedy": self.identical}


@torch.no_grad()
def draft_chain(draft: Eagle3Draft, seq: Tensor, aux: Tensor, k: int) -> list[int]:
    """Propose k target-vocab tokens after seq [1, n+1], given the target's aux states for positions 0..n-1.

    Step 0 runs over every position (token x_{t+1} with the fused state at t), like TTT step 0; step j runs at
    the last position only, reading the previous draft token and hidden state and attending to step 0's keys
    plus its own chain's keys: the same mask training used.
    """
    n = aux.shape[1]
    layer = draft.midlayer
    positions = torch.arange(n, device=seq.device)
    hidden = draft.fc(aux.to(draft.fc.weight.dtype))
    q, k0, v0 = layer.project(draft.embed_tokens(seq[:, 1 : n + 1]), hidden, positions)
    hidden = layer.finish(ttt_attention(q, [k0], [v0]), residual=hidden)[:, -1:]
    token = draft.draft_to_target(draft.logits(hidden)[0, -1].argmax())
    proposed = [int(token)]
    last_k, last_v = [k0], [v0]
    for _ in range(1, k):
        q, kj, vj = layer.project(draft.embed_tokens(token.view(1, 1)), hidden, positions[-1:])
        last_k.append(kj)
        last_v.append(vj)
        scores = [q @ last_k[0].transpose(-1, -2)] + [(q * kk).sum(-1, keepdim=True) for kk in last_k[1:]]
        weights = torch.softmax(torch.cat(scores, -1).float() / q.shape[-1] ** 0.5, -1).to(q.dtype)
        out = weights[..., :n] @ last_v[0]
        for i, vv in enumerate(last_v[1:]):
            out = out + weights[..., n + i : n + i + 1] * vv
        hidden = layer.finish(out.transpose(1, 2).reshape(1, 1, -1), residual=hidden)
        token = draft.draft_to_target(draft.logits(hidden)[0, -1].argmax())
        proposed.append(int(token))
    return proposed


@torch.no_grad()
def target_greedy(target: Any, prompt: list[int], max_new: int, eos: set[int]) -> list[int]:
    """The target's own greedy continuation (the reference the speculative output must equal)."""
    seq = list(prompt)
    device = next(target.parameters()).device
    for _ in range(max_new):
        token = int(target(input_ids=torch.tensor([seq], device=device)).logits[0, -1].argmax())
        seq.append(token)
        if token in eos:
            break
    return seq[len(prompt) :]


@torch.no_grad()
def speculative_generate(
    target: Any, draft: Eagle3Draft, layers: AuxLayers, prompt: list[int], max_new: int, k: int, eos: set[int],
    report: AcceptReport,
) -> list[int]:
    """Greedy speculative decoding of one prompt; rounds and per-position counts go into report."""
    if len(report.attempted) != k:
        report.attempted, report.accepted = [0] * k, [0] * k
    device = next(target.parameters()).device
    x = torch.tensor([prompt], device=device)
    states = capture(target, x, torch.ones_like(x), layers)
    seq = prompt + [int(states.logits[0, -1].argmax())]  # the prefill's token, before any round
    aux = states.aux
    while len(seq) - len(prompt) < max_new and seq[-1] not in eos:
        proposed = draft_chain(draft, torch.tensor([seq], device=device), aux, k)
        x = torch.tensor([seq + proposed], device=device)
        states = capture(target, x, torch.ones_like(x), layers)
        # The target's greedy choice after seq[-1] and after each draft token: preds[i] checks proposed[i].
        preds = states.logits[0, len(seq) - 1 :].argmax(-1).tolist()
        accepted = 0
        while accepted < k and proposed[accepted] == preds[accepted]:
            accepted += 1
            if proposed[accepted - 1] in eos:
                break  # an accepted end-of-sequence ends the output
        for i in range(min(accepted + 1, k)):
            report.attempted[i] += 1
            report.accepted[i] += int(i < accepted)
        new = proposed[:accepted]
        if not (new and new[-1] in eos):
            new.append(preds[accepted])  # the target's bonus token
        remaining = max_new - (len(seq) - len(prompt))
        new = new[:remaining]
        report.rounds += 1
        report.tokens += len(new)
        seq = seq + new
        aux = states.aux[:, : len(seq) - 1]
    out = seq[len(prompt) :][:max_new]
    if eos and any(t in eos for t in out):
        out = out[: next(i for i, t in enumerate(out) if t in eos) + 1]
    return out


def evaluate_acceptance(
    target: Any, draft: Eagle3Draft, layers: AuxLayers, prompts: list[list[int]], max_new: int, k: int,
    eos: set[int] | None = None,
) -> AcceptReport:
    """Run every prompt speculatively and greedily; return the pooled report (identical=False on any drift)."""
    report = AcceptReport()
    draft.eval()
    for prompt in prompts:
        spec = speculative_generate(target, draft, layers, prompt, max_new, k, eos or set(), report)
        report.identical &= spec == target_greedy(target, prompt, max_new, eos or set())
        report.prompts += 1
    return report
