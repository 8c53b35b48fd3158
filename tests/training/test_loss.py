"""The fast TTT loss against its position-by-position reference, and the alignment of the loss mask."""

from __future__ import annotations

import torch

from inference.decoding.draft_model import DraftConfig, Eagle3Draft
from training.loss import reference_ttt_loss, restrict_to_draft_vocab, ttt_loss

CFG = DraftConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                  vocab_size=50, draft_vocab_size=30, target_hidden_size=24)


def _draft(seed: int = 0) -> Eagle3Draft:
    torch.manual_seed(seed)
    draft = Eagle3Draft(CFG)
    used = torch.sort(torch.randperm(50)[:30]).values
    t2d = torch.zeros(50, dtype=torch.bool)
    t2d[used] = True
    draft.set_vocab(used - torch.arange(30), t2d)
    return draft


def test_fast_loss_equals_the_reference_and_so_do_gradients() -> None:
    draft = _draft()
    T = 12
    ids, aux, target = torch.randint(0, 50, (1, T)), torch.randn(1, T, 72), torch.randn(1, T, 50) * 3
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 1]])
    fast = ttt_loss(draft(ids, aux, 4), *restrict_to_draft_vocab(target, draft.d2t, draft.t2d), mask)
    fast.total.backward()
    fast_grad = draft.fc.weight.grad.clone()
    draft.zero_grad()
    ref = reference_ttt_loss(draft, ids, aux, target, mask, steps=4)
    ref.backward()
    torch.testing.assert_close(fast.total, ref)
    torch.testing.assert_close(fast_grad, draft.fc.weight.grad)


def test_a_single_supervised_token_is_predicted_by_the_right_position_at_each_step() -> None:
    # Token 8 supervised: step j's draft at position t predicts token t+2+j, so only t = 6 - j counts.
    T, steps = 10, 3
    mask = torch.zeros(1, T, dtype=torch.long)
    mask[0, 8] = 1
    target = torch.zeros(1, T, 4)
    target[0, 7, 2] = 10.0  # the target's logits at 7 predict token 8
    for j in range(steps):
        logits = [torch.zeros(1, T, 4) for _ in range(steps)]
        logits[j][0, 6 - j, 2] = 10.0  # the right position is confident and right
        result = ttt_loss(logits, target, torch.ones(1, T, dtype=torch.bool), mask)
        assert result.step_losses[j] < 0.01
        assert result.step_accuracies[j] == 1.0


def test_positions_whose_target_choice_is_outside_the_draft_vocab_are_not_counted() -> None:
    T = 6
    logits = [torch.randn(1, T, 4)]
    mask = torch.ones(1, T, dtype=torch.long)
    outside = torch.zeros(1, T, dtype=torch.bool)
    assert ttt_loss(logits, torch.randn(1, T, 4), outside, mask).counted == 0
    assert ttt_loss(logits, torch.randn(1, T, 4), ~outside, mask).counted == T - 2


def test_the_loss_over_supervised_rows_only_equals_the_full_loss_and_so_do_gradients() -> None:
    """Padding rows, prompts, a row with nothing supervised, a supervised last token (no next one), target
    choices outside the draft vocab: the row-restricted loss equals the full one in value, per-step loss,
    accuracy and count, and in the gradient of every draft parameter."""
    from training.loss import loss_rows, ttt_loss_rows

    draft = _draft(3)
    B, T, steps = 4, 10, 5
    torch.manual_seed(4)
    ids, aux, target = torch.randint(0, 50, (B, T)), torch.randn(B, T, 72), torch.randn(B, T, 50) * 3
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 0, 0, 0],   # answer, then padding
                         [0, 0, 0, 0, 0, 1, 1, 0, 1, 1],   # two answers, the last token supervised
                         [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],   # nothing supervised
                         [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]])
    full = ttt_loss(draft(ids, aux, steps), *restrict_to_draft_vocab(target, draft.d2t, draft.t2d), mask)
    full.total.backward()
    full_grads = {n: p.grad.clone() for n, p in draft.named_parameters() if p.grad is not None}
    draft.zero_grad()
    rows = loss_rows(mask)
    assert len(rows) == int(mask[:, 1:].sum())  # every position whose next token is supervised, no other
    sparse = ttt_loss_rows(draft(ids, aux, steps, rows=rows), target, draft.d2t, draft.t2d, rows, T)
    sparse.total.backward()
    torch.testing.assert_close(sparse.total, full.total)
    torch.testing.assert_close(sparse.losses, full.losses)
    torch.testing.assert_close(sparse.accuracies, full.accuracies)
    torch.testing.assert_close(sparse.counts, full.counts)
    assert full.counts.min() > 0 and full.counts[0] > full.counts[-1]  # later steps count fewer positions
    assert full.counts[0] < len(rows)  # and some target choices fell outside the draft vocab
    assert full_grads.keys() == {n for n, p in draft.named_parameters() if p.grad is not None}
    for name, grad in full_grads.items():
        torch.testing.assert_close(draft.get_parameter(name).grad, grad, msg=name)
