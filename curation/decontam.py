"""Decontamination: drop training rows whose prompt shares a word n-gram with an eval set's prompt.

Eval prompts (the user and system turns an eval set's adapter yields) are indexed as word 13-grams of the
normalised text. An eval prompt shorter than 13 words is indexed whole, as one n-gram of its own length,
when it has at least MIN_WORDS=6 words; shorter ones ("Hello", "Tell me a joke") are too generic to prove
leakage and are left out. A training prompt is contaminated when any of its n-grams (for n = 13 and each
short length present in the index) equals an indexed one. An n-gram found in BOILERPLATE=3 or more
distinct eval prompts (an adapter's fixed instruction, a benchmark's shared preamble) proves nothing and is
not used. Hashing is vectorised over the whole row set.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from curation.textkeys import content_hash, ngram_hashes, word_hashes

NGRAM = 13
MIN_WORDS = 6
BOILERPLATE = 3


@dataclass
class EvalIndex:
    """n-gram hashes of eval prompts, by n, each mapped to the eval item it came from."""

    grams: dict[int, dict[int, str]] = field(default_factory=lambda: defaultdict(dict))
    texts: dict[str, str] = field(default_factory=dict)
    owners: dict[tuple[int, int], set[str]] = field(default_factory=dict)

    def add(self, item_id: str, text: str, words: np.ndarray | None = None) -> None:
        """Index one eval prompt under `item_id`."""
        words = word_hashes(text) if words is None else words
        if len(words) < MIN_WORDS:
            return
        n = min(NGRAM, len(words))
        key = content_hash(text)
        for value in set(ngram_hashes(words, n).tolist()):
            self.grams[n].setdefault(value, item_id)
            owners = self.owners.setdefault((n, value), set())
            if len(owners) < BOILERPLATE:
                owners.add(key)
        self.texts[item_id] = text

    def usable(self, n: int) -> dict[int, str]:
        """Return the n-grams of length n that are evidence (found in fewer than BOILERPLATE distinct prompts)."""
        return {h: item for h, item in self.grams[n].items() if len(self.owners[(n, h)]) < BOILERPLATE}

    def __len__(self) -> int:
        return len(self.texts)


def find_contaminated(index: EvalIndex, docs: list[np.ndarray]) -> dict[int, str]:
    """Return {doc position: eval item id} for the word-hash arrays `docs` that share an n-gram with the index."""
    if not docs or not index.texts:
        return {}
    flat = np.concatenate(docs) if docs else np.empty(0, dtype=np.uint64)
    lengths = np.array([len(d) for d in docs])
    owner = np.repeat(np.arange(len(docs)), lengths)
    found: dict[int, str] = {}
    for n in sorted(index.grams, reverse=True):
        table = index.usable(n)
        if len(flat) < n or not table:
            continue
        hashes = ngram_hashes(flat, n)
        same_doc = owner[: len(hashes)] == owner[n - 1 :]
        keys = np.fromiter(table.keys(), dtype=np.uint64, count=len(table))
        hits = np.flatnonzero(same_doc & np.isin(hashes, keys))
        for pos in hits.tolist():
            doc = int(owner[pos])
            if doc not in found:
                found[doc] = table[int(hashes[pos])]
    return found
