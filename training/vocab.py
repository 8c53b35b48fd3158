"""The draft vocabulary: the N target tokens most often supervised, and the d2t / t2d maps SGLang reads.

Count target token ids where the loss mask is 1 over the training set; keep the top N, sorted ascending;
`d2t[i] = used[i] - i` (int64, length N) so `target_id = draft_id + d2t[draft_id]`; `t2d` is a bool mask over
the target vocab. The maps are cached under a key made of the data hash, the tokenizer's hash and N, and a
cached mapping is verified (key and internal consistency) before it is reused, never trusted blindly.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from training.errors import TrainingError

logger = logging.getLogger(__name__)


class VocabError(TrainingError, ValueError):
    """A draft vocab that is inconsistent, or a cached one that does not match the run."""


@dataclass
class DraftVocab:
    """d2t offsets [N] (int64), t2d mask [V] (bool), and the share of supervised tokens the N ids cover."""

    d2t: Tensor
    t2d: Tensor
    coverage: float
    key: str

    @property
    def used_ids(self) -> Tensor:
        """Target ids of the draft vocab, ascending."""
        return self.d2t + torch.arange(self.d2t.shape[0])


def count_supervised(samples: Iterable[tuple[list[int], list[int]]]) -> Counter[int]:
    """Count target token ids where the loss mask is 1, over (input_ids, loss_mask) pairs."""
    counts: Counter[int] = Counter()
    for ids, mask in samples:
        counts.update(i for i, m in zip(ids, mask, strict=True) if m)
    return counts


def build_draft_vocab(counts: Counter[int], vocab_size: int, n: int, key: str = "") -> DraftVocab:
    """Keep the top-n ids (ties by id; padded with the lowest unseen ids when fewer were seen)."""
    if n > vocab_size:
        raise VocabError(f"draft vocab size {n} exceeds the target vocab size {vocab_size}")
    ranked = [i for i, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if 0 <= i < vocab_size]
    chosen = set(ranked[:n])
    filler = (i for i in range(vocab_size) if i not in chosen)
    while len(chosen) < n:
        chosen.add(next(filler))
    used = torch.tensor(sorted(chosen), dtype=torch.long)
    d2t = used - torch.arange(n)
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[used] = True
    total = sum(counts.values())
    coverage = sum(counts[i] for i in chosen) / total if total else 0.0
    vocab = DraftVocab(d2t=d2t, t2d=t2d, coverage=coverage, key=key)
    check_consistent(vocab.d2t, vocab.t2d)
    return vocab


def check_consistent(d2t: Tensor, t2d: Tensor) -> None:
    """Raise VocabError unless nonzero(t2d) == d2t + arange(N) (the rule SGLang relies on)."""
    used = d2t + torch.arange(d2t.shape[0])
    if used.numel() and (int(used.min()) < 0 or int(used.max()) >= t2d.shape[0]):
        raise VocabError(f"d2t maps outside the target vocab of {t2d.shape[0]} tokens")
    if not torch.equal(torch.nonzero(t2d).flatten(), used):
        raise VocabError("d2t and t2d disagree: nonzero(t2d) != d2t + arange(N)")


def vocab_key(data_hash: str, tokenizer_hash: str, n: int) -> str:
    """The cache key of a mapping: data, tokenizer and N together."""
    return hashlib.sha256(f"{data_hash}|{tokenizer_hash}|{n}".encode()).hexdigest()[:24]


def save_vocab(vocab: DraftVocab, folder: Path) -> Path:
    """Write the mapping under folder/<key>/ and return that folder."""
    out = folder / vocab.key
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"d2t": vocab.d2t, "t2d": vocab.t2d}, out / "vocab.pt")
    (out / "vocab.json").write_text(json.dumps({"key": vocab.key, "coverage": vocab.coverage}))
    return out


def load_vocab(folder: Path, key: str, vocab_size: int, n: int) -> DraftVocab | None:
    """Return the cached mapping for `key` after verifying it, or None when there is none.

    Raises VocabError when a cache entry exists but does not match (wrong key, N, vocab, or inconsistent).
    """
    path = folder / key
    if not (path / "vocab.pt").exists():
        return None
    meta = json.loads((path / "vocab.json").read_text())
    maps = torch.load(path / "vocab.pt", weights_only=True)
    d2t, t2d = maps["d2t"], maps["t2d"]
    if meta.get("key") != key or d2t.shape[0] != n or t2d.shape[0] != vocab_size:
        raise VocabError(f"cached draft vocab at {path} does not match this run (key, N or target vocab)")
    check_consistent(d2t, t2d)
    return DraftVocab(d2t=d2t, t2d=t2d, coverage=float(meta["coverage"]), key=key)


def load_or_build(
    folder: Path, key: str, samples: list[tuple[list[int], list[int]]], vocab_size: int, n: int
) -> DraftVocab:
    """Reuse the verified cached mapping for key, else count, build and cache it."""
    cached = load_vocab(folder, key, vocab_size, n)
    if cached is not None:
        logger.info("reusing draft vocab %s (coverage %.3f)", key, cached.coverage)
        return cached
    vocab = build_draft_vocab(count_supervised(samples), vocab_size, n, key=key)
    save_vocab(vocab, folder)
    logger.info("built draft vocab %s: %d ids cover %.3f of supervised tokens", key, n, vocab.coverage)
    return vocab
