"""Deduplication across all sources: exact (normalised prompt hash), then near (MinHash LSH on word 3-grams).

Both stages key on the prompt (system and user turns): once answers are regenerated, two rows with the
same prompt give the same training data. Which copy survives is decided by one rule, `keep_rank`:
target-native rows first, then the row with more assistant text, then the earlier source in the manifest,
then the lower row index. Rows are visited best-first, so every dropped row names a better kept twin.

Near duplicates: MinHash with NUM_PERM=128 permutations over word 3-gram shingles, computed in numpy for a
whole batch at once (32-bit multiply-add hashing `a·x + b mod 2^32` with odd `a`, a bijection per
permutation; min per document with `minimum.reduceat`), banded into BANDS=32 bands of 4 rows; a candidate
from any shared band is confirmed when the share of equal signature slots (the Jaccard estimate) reaches
THRESHOLD=0.7. Documents that share no band key with any other skip the Python loop entirely. Measured
against datasketch's MinHash + MinHashLSH in `benchmarks/curate_throughput.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from curation.conversation import Row, assistant_chars, prompt_text
from curation.textkeys import content_hash, ngram_hashes, word_hashes

NUM_PERM = 128
BANDS = 32
THRESHOLD = 0.7
SHINGLE = 3
_BATCH_SHINGLES = 200_000
_rng = np.random.default_rng(0x5EED)
_A = (_rng.integers(1, 2**32, size=NUM_PERM, dtype=np.uint64).astype(np.uint32) | np.uint32(1)).reshape(-1, 1)
_B = _rng.integers(0, 2**32, size=NUM_PERM, dtype=np.uint64).astype(np.uint32).reshape(-1, 1)


def keep_rank(row: Row) -> tuple[int, int, int, int]:
    """Sort key of the keep-best rule: smaller is better."""
    return (0 if row.target_native else 1, -assistant_chars(row.messages), row.source_order, row.row_index)


def shingles(words: np.ndarray) -> np.ndarray:
    """Return the distinct 32-bit shingle hashes of one document (the whole text as one when it is shorter)."""
    grams = ngram_hashes(words, SHINGLE)
    if len(grams) == 0:
        grams = ngram_hashes(words, len(words)) if len(words) else np.zeros(1, dtype=np.uint64)
    return np.unique((grams ^ (grams >> np.uint64(32))).astype(np.uint32))


def signatures(docs: list[np.ndarray]) -> np.ndarray:
    """Return the (len(docs), NUM_PERM) uint32 MinHash signatures of shingle-hash arrays, batch-vectorised."""
    out = np.empty((len(docs), NUM_PERM), dtype=np.uint32)
    start = 0
    while start < len(docs):
        stop, total = start, 0
        while stop < len(docs) and (total == 0 or total + len(docs[stop]) <= _BATCH_SHINGLES):
            total += len(docs[stop])
            stop += 1
        batch = docs[start:stop]
        flat = np.concatenate(batch)
        offsets = np.cumsum([0] + [len(d) for d in batch[:-1]])
        hashed = _A * flat[None, :] + _B  # wraps mod 2^32: the multiply-add hash family
        out[start:stop] = np.minimum.reduceat(hashed, offsets, axis=1).T
        start = stop
    return out


def band_keys(sigs: np.ndarray) -> np.ndarray:
    """Return one uint64 key per (document, band), mixing the band's rows."""
    rows = NUM_PERM // BANDS
    banded = sigs.reshape(len(sigs), BANDS, rows).astype(np.uint64)
    keys = np.zeros((len(sigs), BANDS), dtype=np.uint64)
    for r in range(rows):
        keys = keys * np.uint64(0x9E3779B97F4A7C15) + banded[:, :, r]
    return keys


@dataclass
class DedupResult:
    """Kept rows in their input order, and the dropped ones with the id of the copy that was kept."""

    kept: list[Row] = field(default_factory=list)
    exact: list[tuple[Row, Row]] = field(default_factory=list)
    near: list[tuple[Row, Row, float]] = field(default_factory=list)


def near_duplicates(
    sigs: np.ndarray, order: list[int], threshold: float = THRESHOLD
) -> dict[int, tuple[int, float]]:
    """Visit documents in `order`; return {dropped index: (kept index, estimated Jaccard)}."""
    all_keys = band_keys(sigs)
    shared = np.zeros(len(sigs), dtype=bool)
    for band in range(BANDS):  # a document whose band keys are all unique can have no candidate
        _, inverse, counts = np.unique(all_keys[:, band], return_inverse=True, return_counts=True)
        shared |= counts[inverse] > 1
    keys = {i: all_keys[i].tolist() for i in np.flatnonzero(shared).tolist()}
    buckets: list[dict[int, list[int]]] = [{} for _ in range(BANDS)]
    dropped: dict[int, tuple[int, float]] = {}
    for i in order:
        doc_keys = keys.get(i)
        if doc_keys is None:
            continue
        candidates: set[int] = set()
        for band, key in enumerate(doc_keys):
            hit = buckets[band].get(key)
            if hit:
                candidates.update(hit)
        if candidates:
            ordered = sorted(candidates)
            similarity = np.count_nonzero(sigs[ordered] == sigs[i], axis=1) / NUM_PERM
            best_at = int(np.argmax(similarity))  # the first of the most similar
            if similarity[best_at] >= threshold:
                dropped[i] = (ordered[best_at], float(similarity[best_at]))
                continue
        for band, key in enumerate(doc_keys):
            buckets[band].setdefault(key, []).append(i)
    return dropped


def _words(row: Row) -> np.ndarray:
    words = row.extra.get("words")
    return words if words is not None else word_hashes(prompt_text(row.messages))


def deduplicate(rows: list[Row], *, near: bool = True, threshold: float = THRESHOLD) -> DedupResult:
    """Return the rows left after exact then near deduplication on prompts, by the keep-best rule."""
    order = sorted(range(len(rows)), key=lambda i: keep_rank(rows[i]))
    result = DedupResult()
    first_by_hash: dict[str, int] = {}
    exact_of: dict[int, int] = {}
    for i in order:
        key = rows[i].extra.get("prompt_hash") or content_hash(prompt_text(rows[i].messages))
        if key in first_by_hash:
            exact_of[i] = first_by_hash[key]
        else:
            first_by_hash[key] = i
    survivors = [i for i in order if i not in exact_of]
    near_of: dict[int, tuple[int, float]] = {}
    if near and survivors:
        docs = [shingles(_words(rows[i])) for i in survivors]
        sigs = signatures(docs)
        local = near_duplicates(sigs, list(range(len(survivors))), threshold)
        near_of = {survivors[d]: (survivors[k], s) for d, (k, s) in local.items()}
    for i, row in enumerate(rows):
        if i in exact_of:
            result.exact.append((row, rows[exact_of[i]]))
        elif i in near_of:
            kept, similarity = near_of[i]
            result.near.append((row, rows[kept], similarity))
        else:
            result.kept.append(row)
    return result
