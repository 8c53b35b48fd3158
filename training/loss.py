"""The training-time-test (TTT) loss of EAGLE-3, a fast batched version and a plain reference of it.

Alignment, stated once: `loss_mask[t] = 1` when token t is an assistant token (supervised). The target's
logits at position p predict token p+1. The draft at TTT step j, position t, predicts token t+2+j, so it is
compared with the target's logits at p = t+1+j, and counts only when token t+2+j is supervised
(`loss_mask[t+2+j]`) and the target's own choice there lies inside the draft vocab. Getting this shift wrong
by one silently trains on the wrong half of each turn (SpecForge #885); the reference below is written
position by position so the two can be compared.

Loss per step: cross-entropy of the draft against the target's distribution renormalised over the draft
vocab, averaged over counted positions; total = sum_j decay^j * loss_j (decay 0.8).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from inference.decoding.draft_model import Eagle3Draft, shift_left


@dataclass
class TTTLoss:
    """Total weighted loss, and per-step loss and top-1 agreement with the target over counted positions.

    Everything stays on the device (reading a number from the GPU stalls the step): the float views below
    synchronise, so the trainer reads them on its log steps only.
    """

    total: Tensor
    losses: Tensor  # [steps]
    accuracies: Tensor  # [steps]
    counts: Tensor  # [steps], positions counted at each step

    @property
    def step_losses(self) -> list[float]:
        return [float(x) for x in self.losses.detach().cpu()]

    @property
    def step_accuracies(self) -> list[float]:
        return [float(x) for x in self.accuracies.detach().cpu()]

    @property
    def counted(self) -> int:
        return int(self.counts.max()) if self.counts.numel() else 0


def restrict_to_draft_vocab(target_logits: Tensor, d2t: Tensor, t2d: Tensor) -> tuple[Tensor, Tensor]:
    """Return the target's logits over the draft vocab [B,T,N] and whether its argmax is in the draft vocab."""
    used = d2t + torch.arange(d2t.shape[0], device=d2t.device)
    in_vocab = t2d[target_logits.argmax(-1)]
    return target_logits[..., used], in_vocab


class _SoftCrossEntropy(torch.autograd.Function):
    """sum_i w_i * CE(p_i, softmax(z_i)) without materialising log-probabilities for backward.

    Forward keeps only z (the draft's logits, bf16) and the per-row log-sum-exp; backward recomputes
    softmax(z) and returns (softmax(z) * sum(p) - p) * w: the exact gradient, a fraction of the memory traffic
    of log_softmax + multiply + sum under autograd. Rows are processed in chunks to bound temporaries.
    """

    @staticmethod
    def forward(ctx: Any, z: Tensor, p: Tensor, w: Tensor) -> Tensor:  # z, p [R, t, V]; w [R, t]
        lse = torch.empty(w.shape, device=z.device, dtype=torch.float32)
        total = torch.zeros((), device=z.device, dtype=torch.float32)
        for a, b in _chunks(z):
            zf = z[a:b].float()
            lse[a:b] = torch.logsumexp(zf, -1)
            per = lse[a:b] * p[a:b].sum(-1) - (p[a:b] * zf).sum(-1)
            total = total + (per * w[a:b]).sum()
        ctx.save_for_backward(z, p, w, lse)
        return total

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        z, p, w, lse = ctx.saved_tensors
        out = torch.empty_like(z)
        for a, b in _chunks(z):
            soft = torch.exp(z[a:b].float() - lse[a:b, ..., None])
            g = (soft * p[a:b].sum(-1, keepdim=True) - p[a:b]) * (w[a:b] * grad)[..., None]
            out[a:b] = g.to(z.dtype)
        return out, None, None


def _chunks(z: Tensor, max_elements: int = 1 << 28) -> list[tuple[int, int]]:
    rows = max(1, max_elements // max(1, z[0].numel()))
    return [(a, min(a + rows, z.shape[0])) for a in range(0, z.shape[0], rows)]


def ttt_loss(
    step_logits: list[Tensor],
    target_draft_logits: Tensor,
    in_vocab: Tensor,
    loss_mask: Tensor,
    decay: float = 0.8,
) -> TTTLoss:
    """Weighted TTT loss from the draft's per-step logits (see the module docstring for the alignment).

    The shift is taken by slicing views (draft positions 0..T-2-j against target positions 1+j..T-1), so no
    step copies the [B, T, V] target distribution; the soft cross-entropy is the fused one above.
    """
    # The target's distribution over the draft vocab, computed once (each step reads a slice of it).
    target_p = F.softmax(target_draft_logits.float(), dim=-1)
    target_choice = target_draft_logits.argmax(-1)
    T = target_p.shape[1]
    total = torch.zeros((), device=target_draft_logits.device)
    losses, accs, counts = [], [], []
    for j, logits in enumerate(step_logits):
        # The draft at position t predicts token t+2+j: target logits at t+1+j, mask at t+2+j.
        width = T - 1 - j
        if width <= 0:
            zero = torch.zeros((), device=total.device)
            losses.append(zero)
            accs.append(zero)
            counts.append(zero)
            continue
        mask = (shift_left(loss_mask, j + 2) * shift_left(in_vocab, j + 1)).float()[:, :width]
        n = mask.sum()
        step: Tensor = _SoftCrossEntropy.apply(  # type: ignore[no-untyped-call]  # autograd's apply is untyped
            logits[:, :width], target_p[:, 1 + j :], mask / n.clamp(min=1.0))
        total = total + (decay**j) * step
        agree = (logits[:, :width].argmax(-1) == target_choice[:, 1 + j :]).float()
        losses.append(step.detach())
        accs.append(((agree * mask).sum() / n.clamp(min=1.0)).detach())
        counts.append(n.detach())
    return TTTLoss(total=total, losses=torch.stack(losses), accuracies=torch.stack(accs), counts=torch.stack(counts))


def loss_rows(loss_mask: Tensor) -> Tensor:
    """Flat indices b*T + p of the target positions any TTT step's loss reads: those whose next token is
    supervised (p + 1 < T, loss_mask[b, p+1] = 1). The same positions serve every step (step j's draft position
    t = p - 1 - j predicts token t+2+j = p+1 from target position t+1+j = p). Computed where the mask lives (on
    the host before a batch moves, so no step waits on the GPU for it)."""
    T = loss_mask.shape[1]
    nxt = torch.zeros_like(loss_mask, dtype=torch.bool)
    nxt[:, : T - 1] = loss_mask[:, 1:].bool()
    return nxt.flatten().nonzero().flatten()


def ttt_loss_rows(
    step_logits: list[Tensor],
    target_logits: Tensor,
    d2t: Tensor,
    t2d: Tensor,
    rows: Tensor,
    seq_len: int,
    decay: float = 0.8,
) -> TTTLoss:
    """`ttt_loss` computed only where it counts: equal to it (value, gradients, per-step accuracy and counts).

    step_logits[j] [n, N] are the draft's logits at the draft positions of `rows` for step j (the draft's
    forward with `rows`); target_logits [B, T, V] the target's. The target's distribution is taken once over
    the n rows and read by every step; a step's row counts when its draft position exists (p >= 1 + j) and the
    target's own choice there lies inside the draft vocab.
    """
    picked, in_vocab = restrict_to_draft_vocab(target_logits.flatten(0, 1)[rows], d2t, t2d)  # [n, N], [n]
    target_p = F.softmax(picked.float(), dim=-1)
    target_choice = picked.argmax(-1)
    position = rows % seq_len
    total = torch.zeros((), device=target_logits.device)
    losses, accs, counts = [], [], []
    for j, logits in enumerate(step_logits):
        mask = ((position >= 1 + j) & in_vocab).float()
        n = mask.sum()
        step: Tensor = _SoftCrossEntropy.apply(  # type: ignore[no-untyped-call]  # autograd's apply is untyped
            logits[:, None], target_p[:, None], (mask / n.clamp(min=1.0))[:, None])  # rows chunk as [n, 1, N]
        total = total + (decay**j) * step
        agree = (logits.argmax(-1) == target_choice).float()
        losses.append(step.detach())
        accs.append(((agree * mask).sum() / n.clamp(min=1.0)).detach())
        counts.append(n.detach())
    return TTTLoss(total=total, losses=torch.stack(losses), accuracies=torch.stack(accs), counts=torch.stack(counts))


def reference_ttt_loss(
    draft: Eagle3Draft,
    input_ids: Tensor,
    aux: Tensor,
    target_logits: Tensor,
    loss_mask: Tensor,
    steps: int,
    decay: float = 0.8,
) -> Tensor:
    """The same loss computed position by position with explicit key lists: slow, obviously right.

    Batch size 1 (input_ids [1, T]). For each step j and position t: the attention keys are step 0's keys at
    positions 0..t plus steps 1..j's keys at position t; the token read is x_{t+1+j} (0 past the end), rotated
    at position t+j (the position that token's chain slot has at inference).
    """
    T = input_ids.shape[1]
    ids = input_ids[0].tolist()
    layer = draft.midlayer
    positions = torch.arange(T)
    used = draft.d2t + torch.arange(draft.d2t.shape[0])
    hidden = draft.fc(aux)  # [1, T, H]
    step_keys: list[Tensor] = []
    step_values: list[Tensor] = []
    total = torch.zeros(())
    for j in range(steps):
        tokens = torch.tensor([[ids[t + 1 + j] if t + 1 + j < T else 0 for t in range(T)]])
        q, k, v = layer.project(draft.embed_tokens(tokens), hidden, positions + j)  # [1,h,T,d]
        step_keys.append(k)
        step_values.append(v)
        outs = []
        for t in range(T):
            ks = torch.cat([step_keys[0][:, :, : t + 1]] + [sk[:, :, t : t + 1] for sk in step_keys[1:]], 2)
            vs = torch.cat([step_values[0][:, :, : t + 1]] + [sv[:, :, t : t + 1] for sv in step_values[1:]], 2)
            w = torch.softmax((q[:, :, t : t + 1] @ ks.transpose(-1, -2)) / q.shape[-1] ** 0.5, dim=-1)
            outs.append((w @ vs).transpose(1, 2).reshape(1, 1, -1))
        hidden = layer.finish(torch.cat(outs, 1), residual=hidden)
        logits = draft.logits(hidden)[0]
        step_sum, count = torch.zeros(()), 0
        for t in range(T):
            p = t + 1 + j
            if p + 1 >= T or not loss_mask[0, p + 1]:
                continue
            if not draft.t2d[int(target_logits[0, p].argmax())]:
                continue
            target = torch.softmax(target_logits[0, p, used].float(), -1)
            step_sum = step_sum - (target * torch.log_softmax(logits[t].float(), -1)).sum()
            count += 1
        total = total + decay**j * step_sum / max(count, 1)
    return total

