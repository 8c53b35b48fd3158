"""Draft vocab: top-N by supervised count, consistent d2t/t2d, coverage, and a cache that is verified before reuse."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

from training.vocab import (
    VocabError,
    build_draft_vocab,
    check_consistent,
    count_supervised,
    load_or_build,
    load_vocab,
    save_vocab,
    vocab_key,
)


def test_only_supervised_tokens_are_counted() -> None:
    counts = count_supervised([([5, 6, 7, 7], [0, 1, 1, 1]), ([5, 9], [1, 0])])
    assert counts == Counter({7: 2, 6: 1, 5: 1})


def test_top_n_ascending_with_offsets_and_mask() -> None:
    vocab = build_draft_vocab(Counter({9: 5, 3: 4, 7: 1, 1: 1}), vocab_size=12, n=3)
    assert vocab.used_ids.tolist() == [1, 3, 9]  # 7 and 1 tie on count; the lower id wins
    assert vocab.d2t.tolist() == [1, 2, 7]
    assert torch.nonzero(vocab.t2d).flatten().tolist() == [1, 3, 9]
    assert vocab.coverage == pytest.approx(10 / 11)


def test_a_draft_vocab_larger_than_the_target_vocab_is_refused() -> None:
    with pytest.raises(VocabError, match="exceeds"):
        build_draft_vocab(Counter({1: 1}), vocab_size=4, n=5)


def test_inconsistent_maps_are_refused() -> None:
    t2d = torch.zeros(10, dtype=torch.bool)
    t2d[[1, 2, 4]] = True
    check_consistent(torch.tensor([1, 1, 2]), t2d)
    with pytest.raises(VocabError, match="disagree"):
        check_consistent(torch.tensor([1, 1, 3]), t2d)
    with pytest.raises(VocabError, match="outside"):
        check_consistent(torch.tensor([1, 1, 9]), t2d)


def test_cache_is_reused_only_when_data_tokenizer_and_n_match(tmp_path: Path) -> None:
    rows = [([1, 2, 3, 3], [1, 1, 1, 1])]
    key = vocab_key("data-a", "tok-a", 2)
    built = load_or_build(tmp_path, key, rows, vocab_size=8, n=2)
    assert built.used_ids.tolist() == [1, 3]
    # Different data gives a different key: nothing cached under it, so it is rebuilt, not reused.
    other = load_or_build(tmp_path, vocab_key("data-b", "tok-a", 2), [([5, 5, 6], [1, 1, 1])], 8, 2)
    assert other.used_ids.tolist() == [5, 6]
    assert vocab_key("data-a", "tok-b", 2) != key and vocab_key("data-a", "tok-a", 3) != key
    # A stale entry under the right key (wrong target vocab) is refused, not reused.
    with pytest.raises(VocabError, match="does not match"):
        load_vocab(tmp_path, key, vocab_size=16, n=2)


def test_a_tampered_cache_entry_is_refused(tmp_path: Path) -> None:
    vocab = build_draft_vocab(Counter({1: 3, 2: 2}), vocab_size=5, n=2, key="k")
    folder = save_vocab(vocab, tmp_path)
    torch.save({"d2t": torch.tensor([0, 0]), "t2d": vocab.t2d}, folder / "vocab.pt")
    with pytest.raises(VocabError, match="disagree"):
        load_vocab(tmp_path, "k", vocab_size=5, n=2)
