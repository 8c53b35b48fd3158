"""Acceptance length of a draft against its target: greedy speculative decoding with a chain of k drafts.

One verification round: the draft proposes d_1..d_k from the target's aux states; the target scores
context + drafts in one forward; d_i is accepted while it equals the target's own greedy choice at its
position; the target's choice after the last accepted draft is the bonus token. The round yields
accepted + 1 tokens, so acceptance length (EAGLE's tau, SGLang's avg_spec_accept_length) is
sum(tokens) / sum(rounds) over the whole set, at least 1.0. The output is checked to be identical to the
target's own greedy decoding, which a correct verifier guarantees whatever the draft proposes.

At a temperature above 0 (speculative sampling): the draft samples d_i from q_i, the target accepts it with
probability min(1, p_i(d_i) / q_i(d_i)), and the first rejection is replaced by a sample from the residual
norm(max(0, p_i - q_i)); after k acceptances the bonus token is sampled from p_{k+1}. The output is then
distributed exactly as the target's own sampling at that temperature (checked statistically in the tests),
and acceptance length is counted the same way.
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
    temperature: float = 0.0

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
        out: dict[str, Any] = {
            "accept_length": round(self.accept_length, 4), "rounds": self.rounds, "tokens": self.tokens,
            "position_rates": [round(r, 4) for r in self.position_rates], "prompts": self.prompts,
            "temperature": self.temperature}
        if self.temperature == 0:  # the identity check only applies to greedy decoding
            out["identical_to_target_greedy"] = self.identical
        return out


@torch.no_grad()
def draft_chain(draft: Eagle3Draft, seq: Tensor, aux: Tensor, k: int) -> list[int]:
    """Propose k target-vocab tokens after seq [1, n+1], given the target's aux states for positions 0..n-1.

    Step 0 runs over every position (token x_{t+1} with the fused state at t), like TTT step 0; step j runs at
    the last position only, reading the previous draft token and hidden state and attending to step 0's keys
    plus its own chain's keys: the same mask training used.
    """
    return _draft_steps(draft, seq, aux, k, lambda logits: logits.argmax())


@torch.no_grad()
def draft_chain_sampled(draft: Eagle3Draft, seq: Tensor, aux: Tensor, k: int, temperature: float,
                        generator: torch.Generator) -> tuple[list[int], Tensor]:
    """Like draft_chain, but each draft token is sampled from softmax(logits / temperature).

    Returns the proposed target ids and q [k, target vocab]: the draft's distribution at each step, zero
    outside the draft vocab (what the acceptance rule divides by).
    """
    probs: list[Tensor] = []

    def pick(logits: Tensor) -> Tensor:
        q = torch.softmax(logits.float() / temperature, -1)
        probs.append(q)
        return torch.multinomial(q, 1, generator=generator)[0]

    proposed = _draft_steps(draft, seq, aux, k, pick)
    targets = draft.draft_to_target(torch.arange(draft.d2t.shape[0], device=seq.device))
    vocab = draft.embed_tokens.weight.shape[0]
    q_full = torch.zeros(k, vocab, device=seq.device)
    q_full[:, targets] = torch.stack(probs)
    return proposed, q_full


def _draft_steps(draft: Eagle3Draft, seq: Tensor, aux: Tensor, k: int, pick: Any) -> list[int]:
    n = aux.shape[1]
    layer = draft.midlayer
    positions = torch.arange(n, device=seq.device)
    hidden = draft.fc(aux.to(draft.fc.weight.dtype))
    q, k0, v0 = layer.project(draft.embed_tokens(seq[:, 1 : n + 1]), hidden, positions)
    hidden = layer.finish(ttt_attention(q, [k0], [v0]), residual=hidden)[:, -1:]
    token = draft.draft_to_target(pick(draft.logits(hidden)[0, -1]))
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
        token = draft.draft_to_target(pick(draft.logits(hidden)[0, -1]))
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
        new = proposed[:accepted]
        if not (new and new[-1] in eos):
            new.append(preds[accepted])  # the target's bonus token
        seq = seq + _record_round(report, accepted, k, new, max_new - (len(seq) - len(prompt)))
        aux = states.aux[:, : len(seq) - 1]
    return _output(seq[len(prompt) :], max_new, eos)


def _record_round(report: AcceptReport, accepted: int, k: int, new: list[int], remaining: int) -> list[int]:
    """Count one verification round (positions 1..accepted+1 attempted); return its tokens cut to `remaining`."""
    for i in range(min(accepted + 1, k)):
        report.attempted[i] += 1
        report.accepted[i] += int(i < accepted)
    new = new[:remaining]
    report.rounds += 1
    report.tokens += len(new)
    return new


def _output(generated: list[int], max_new: int, eos: set[int]) -> list[int]:
    """The generated tokens up to `max_new`, ending at the first end-of-sequence token if there is one."""
    out = generated[:max_new]
    stop = next((i for i, t in enumerate(out) if t in eos), None)
    return out if stop is None else out[: stop + 1]


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


def verify_sampled(proposed: list[int], q: Tensor, p: Tensor, generator: torch.Generator) -> tuple[int, int]:
    """The speculative sampling rule for one round: (drafts accepted, the token that follows them).

    proposed: k draft tokens; q [k, V]: the draft's distributions they were sampled from; p [k+1, V]: the
    target's distributions after the context and after each draft token (same temperature).
    """
    for i, token in enumerate(proposed):
        ratio = float(p[i, token]) / max(float(q[i, token]), 1e-30)
        if float(torch.rand((), generator=generator, device=p.device)) < min(1.0, ratio):
            continue
        residual = torch.clamp(p[i] - q[i], min=0)
        total = float(residual.sum())
        residual = residual / total if total > 0 else p[i]
        return i, int(torch.multinomial(residual, 1, generator=generator)[0])
    return len(proposed), int(torch.multinomial(p[len(proposed)], 1, generator=generator)[0])


@torch.no_grad()
def speculative_sample(
    target: Any, draft: Eagle3Draft, layers: AuxLayers, prompt: list[int], max_new: int, k: int, eos: set[int],
    report: AcceptReport, temperature: float, generator: torch.Generator,
) -> list[int]:
    """Speculative sampling of one prompt at `temperature` (> 0); rounds and per-position counts go into report."""
    if len(report.attempted) != k:
        report.attempted, report.accepted = [0] * k, [0] * k
    device = next(target.parameters()).device
    x = torch.tensor([prompt], device=device)
    states = capture(target, x, torch.ones_like(x), layers)
    first = torch.softmax(states.logits[0, -1].float() / temperature, -1)
    seq = prompt + [int(torch.multinomial(first, 1, generator=generator)[0])]
    aux = states.aux
    while len(seq) - len(prompt) < max_new and seq[-1] not in eos:
        proposed, q = draft_chain_sampled(draft, torch.tensor([seq], device=device), aux, k, temperature, generator)
        x = torch.tensor([seq + proposed], device=device)
        states = capture(target, x, torch.ones_like(x), layers)
        p = torch.softmax(states.logits[0, len(seq) - 1 :].float() / temperature, -1)
        accepted, following = verify_sampled(proposed, q, p, generator)
        new = proposed[:accepted]
        stop = next((i for i, t in enumerate(new) if t in eos), None)
        if stop is not None:  # an accepted end-of-sequence ends the output: no bonus token
            accepted = stop + 1
            new = new[:accepted]
        else:
            new.append(following)
        seq = seq + _record_round(report, accepted, k, new, max_new - (len(seq) - len(prompt)))
        aux = states.aux[:, : len(seq) - 1]
    return _output(seq[len(prompt) :], max_new, eos)


def evaluate_sampled_acceptance(
    target: Any, draft: Eagle3Draft, layers: AuxLayers, prompts: list[list[int]], max_new: int, k: int,
    temperature: float, seed: int = 0, eos: set[int] | None = None,
) -> AcceptReport:
    """Acceptance length under speculative sampling at `temperature` (0 falls back to the greedy rule)."""
    if temperature <= 0:
        return evaluate_acceptance(target, draft, layers, prompts, max_new, k, eos)
    report = AcceptReport(temperature=temperature)
    draft.eval()
    device = next(target.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    for prompt in prompts:
        speculative_sample(target, draft, layers, prompt, max_new, k, eos or set(), report, temperature, generator)
        report.prompts += 1
    return report
