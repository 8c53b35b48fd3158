"""The draft's output side starts from the target's (`head_init="target"`) or from random weights."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from tiny_models import make_gemma, make_llama

from training.config import make_config
from training.draft_setup import build_draft
from training.vocab import build_draft_vocab


def _draft(target: Any, head: str, n: int = 40) -> Any:
    vocab_size = target.get_input_embeddings().weight.shape[0]
    # Frequent ids scattered over the vocab, so row i of the head maps to a target id other than i.
    vocab = build_draft_vocab(Counter({(7 * i) % vocab_size: 100 - i for i in range(n)}), vocab_size, n)
    cfg = make_config({"data": "d.jsonl", "target": ".", "out": "o", "draft_vocab_size": n, "head_init": head})
    return build_draft(target, cfg, vocab), vocab


def test_target_head_init_copies_the_rows_of_the_draft_vocab_and_the_final_norm(tokenizer: Any) -> None:
    target = make_llama(len(tokenizer))
    with torch.no_grad():
        target.model.norm.weight.uniform_(0.5, 1.5)  # a norm that differs from ones
    draft, vocab = _draft(target, "target")
    torch.testing.assert_close(draft.lm_head.weight, target.lm_head.weight[vocab.used_ids])
    assert not torch.equal(vocab.used_ids, torch.arange(40))  # the mapping was exercised
    torch.testing.assert_close(draft.norm.weight, target.model.norm.weight)
    # The draft's logits over its vocab are then the target's logits over those ids, from the same state.
    state = torch.randn(3, 64)
    want = target.lm_head(target.model.norm(state))[:, vocab.used_ids]
    torch.testing.assert_close(draft.logits(state), want, rtol=1e-4, atol=1e-4)


def test_random_head_init_leaves_specforges_start(tokenizer: Any) -> None:
    target = make_llama(len(tokenizer))
    draft, vocab = _draft(target, "random")
    assert not torch.allclose(draft.lm_head.weight, target.lm_head.weight[vocab.used_ids])
    assert torch.equal(draft.norm.weight, torch.ones(64))


def test_gemma_norm_convention_is_not_copied(tokenizer: Any) -> None:
    """Gemma's RMSNorm scales by 1 + w; copying w into a Llama-style norm would be wrong, so it stays ones."""
    target = make_gemma(len(tokenizer))
    draft, vocab = _draft(target, "target")
    torch.testing.assert_close(draft.lm_head.weight, target.lm_head.weight[vocab.used_ids])
    assert torch.equal(draft.norm.weight, torch.ones(64))


def test_unknown_head_init_is_refused() -> None:
    from training.config import ConfigError

    with pytest.raises(ConfigError, match="head_init"):
        make_config({"data": "d.jsonl", "target": ".", "out": "o", "head_init": "zeros"})
