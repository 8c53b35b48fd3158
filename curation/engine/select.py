"""Decontamination and the mix, per shard: the eval index broadcast to every task, quotas from counts only.

`decontaminate_shard` reads a shard's normalised prompts, skips the dedup drops, and matches each against the
eval index the driver pickled once (`index.pkl`, loaded by each task: the broadcast); it writes the
contaminated rows' records and, for each clean row, its seeded mix rank (`curation.mixing.sample_rank`).
The mix needs no rows in memory: per-category counts give the quotas (`curation.mixing.quotas`), and the
quota-th smallest rank of a category is found from a histogram of the ranks' first two bytes, then only
the ranks in the boundary bin; a row is selected when its rank is at most that threshold — the rows the
in-process `sorted(...)[:quota]` takes.
"""

from __future__ import annotations

import json
import pickle
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from curation.conversation import prompt_text
from curation.decontam import EvalIndex, find_contaminated
from curation.engine.counts import DeconCounts
from curation.engine.dedup import dropped_refs
from curation.engine.keys import CLEAN, read_all
from curation.engine.plan import EnginePlan, Shard
from curation.mixing import quotas, sample_rank
from curation.set_aside import ContaminatedRecord
from curation.shards import atomic_write_json
from curation.staging import sample_id
from curation.textkeys import word_hashes

BATCH = 8_192
BINS = 1 << 16


class BroadcastIndex(EvalIndex):
    """An eval index loaded in a worker; `usable(n)` is computed once per n instead of once per batch."""

    _usable: dict[int, dict[int, str]]

    def usable(self, n: int) -> dict[int, str]:
        """Return the evidence n-grams of length n (cached)."""
        cached: dict[int, dict[int, str]] = self.__dict__.setdefault("_usable", {})
        if n not in cached:
            cached[n] = super().usable(n)
        return cached[n]


def save_index(plan: EnginePlan, index: EvalIndex) -> None:
    """Pickle the eval index once for every task to load."""
    plan.path("index", "index.pkl").write_bytes(pickle.dumps(index, protocol=pickle.HIGHEST_PROTOCOL))


def load_index(plan: EnginePlan) -> BroadcastIndex:
    """Return the run's eval index."""
    index: EvalIndex = pickle.loads(plan.path("index", "index.pkl").read_bytes())
    out = BroadcastIndex()
    out.grams, out.texts, out.owners = index.grams, index.texts, index.owners
    return out


def iter_rows(plan: EnginePlan, shard: Shard, skip: np.ndarray) -> Any:
    """Yield (row index, messages, tokens, prompt tokens, tools or None) of a shard's rows not in the sorted array
    `skip`."""
    path = plan.path("rows", shard.name + ".parquet")
    for batch in pq.ParquetFile(path).iter_batches(columns=["row", "messages", "tokens", "prompt_tokens", "tools"],
                                                    batch_size=BATCH):
        rows = batch.column(0).to_numpy()
        keep = ~np.isin(rows, skip)
        messages = batch.column(1).to_pylist()
        tokens = batch.column(2).to_pylist()
        prompt_tokens = batch.column(3).to_pylist()
        tools = batch.column(4).to_pylist()
        for i in np.flatnonzero(keep).tolist():
            yield (int(rows[i]), json.loads(messages[i]), tokens[i], prompt_tokens[i],
                   None if tools[i] is None else json.loads(tools[i]))


def decontaminate_shard(plan: EnginePlan, shard: Shard) -> DeconCounts:
    """Write a shard's contaminated records and clean-row ranks; return its counts."""
    source = plan.source(shard)
    index = load_index(plan)
    skip = dropped_refs(plan, shard.order)
    contaminated: list[int] = []
    path = plan.path("rows", shard.name + ".parquet")
    with plan.path("clean", shard.name + ".bin").open("wb") as ranks, \
            plan.path("decon", shard.name + ".jsonl").open("w", encoding="utf-8") as out:
        for batch in pq.ParquetFile(path).iter_batches(columns=["row", "prompt", "messages"], batch_size=BATCH):
            rows = batch.column(0).to_numpy()
            keep = np.flatnonzero(~np.isin(rows, skip))
            prompts = batch.column(1).take(keep).to_pylist()
            found = find_contaminated(index, [word_hashes(p, normalised=True) for p in prompts])
            clean = np.empty(len(keep) - len(found), dtype=CLEAN)
            n = 0
            for pos, i in enumerate(keep.tolist()):
                row = int(rows[i])
                item = found.get(pos)
                if item is None:
                    clean[n] = (row, sample_rank(plan.seed, sample_id(source, row)))
                    n += 1
                    continue
                contaminated.append(row)
                messages = json.loads(batch.column(2)[i].as_py())
                record = ContaminatedRecord(id=sample_id(source, row), source=source.key, row=row, eval_item=item,
                                            eval_text=index.texts[item][:500], prompt=prompt_text(messages)[:500])
                out.write(json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n")
            ranks.write(clean.tobytes())
    counts = DeconCounts(contaminated=contaminated)
    atomic_write_json(plan.path("decon", shard.name + ".json"), counts)
    return counts


def _bins(digests: np.ndarray) -> np.ndarray:
    raw = (np.ascontiguousarray(digests).view(np.uint8).reshape(-1, 32) if len(digests)
           else np.empty((0, 32), dtype=np.uint8))
    return raw[:, 0].astype(np.int64) * 256 + raw[:, 1]


def mix_thresholds(plan: EnginePlan) -> tuple[dict[str, int], dict[str, int | None], dict[str, bytes | None]]:
    """Return (available, quota, rank threshold) per category; a None threshold keeps every row."""
    by_category: dict[str, list[Shard]] = {}
    for shard in plan.shards:
        by_category.setdefault(str(plan.source(shard).category), []).append(shard)
    available: dict[str, int] = {}
    hists: dict[str, np.ndarray] = {}
    for category, shards in by_category.items():
        hist = np.zeros(BINS, dtype=np.int64)
        for shard in shards:
            digests = read_all([plan.path("clean", shard.name + ".bin")], CLEAN)["digest"]
            hist += np.bincount(_bins(digests), minlength=BINS)
        available[category], hists[category] = int(hist.sum()), hist
    available = {c: n for c, n in available.items() if n}
    plan_quota = quotas(plan.manifest.budget, available)
    thresholds: dict[str, bytes | None] = {}
    for category, quota in plan_quota.items():
        if quota is None or quota >= available[category]:
            thresholds[category] = None
            continue
        if quota == 0:
            thresholds[category] = b""  # below every rank: nothing selected
            continue
        cumulative = np.cumsum(hists[category])
        boundary = int(np.searchsorted(cumulative, quota))  # the bin holding the quota-th smallest rank
        before = int(cumulative[boundary - 1]) if boundary else 0
        inside: list[bytes] = []
        for shard in by_category[category]:
            digests = read_all([plan.path("clean", shard.name + ".bin")], CLEAN)["digest"]
            inside += digests[_bins(digests) == boundary].tolist()
        thresholds[category] = sorted(inside)[quota - before - 1]
    return available, plan_quota, thresholds
