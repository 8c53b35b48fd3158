"""Out-of-core deduplication: exact dedup per hash partition, LSH candidates per band partition, then near dedup.

Exact (`exact_partition`): every row with the same prompt hash lands in the same partition; within it the
rows are sorted by hash then by the keep-best rule and all but the first of each hash are exact duplicates
of it — the in-process rule, since a hash's rows are all here. Candidates (`band_partition`): a band
record (band, key) of every row lands in the key's partition; rows with the same prompt hash share every
band key, so collapsing each (band, key, hash) to its best row leaves exactly the exact-dedup survivors,
and every pair of survivors sharing a (band, key) is a candidate pair, ordered best-first.

Near (`resolve_near`, one pass over the candidate graph only): the signatures of the rows in a pair are
looked up in the stage files, pairs under THRESHOLD are dropped, and rows are visited best-first: a row with
an edge to an earlier row that was kept is a near duplicate of the most similar such row (the best-ranked
on ties). That is the in-process greedy (`curation.dedup.near_duplicates`) restricted to the edges that can
change its answer, so it keeps the same rows; its memory grows with the candidate rows, not the input.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from curation.dedup import NUM_PERM, THRESHOLD
from curation.engine.keys import BAND, DUP, EXACT, PAIR, group_starts, read_all, split_refs
from curation.engine.plan import EnginePlan


def failed_orders(plan: EnginePlan) -> set[int]:
    """Return the source orders with a failed shard (their rows take no part in the run)."""
    failed: set[int] = set()
    for shard in plan.shards:
        meta = json.loads(plan.path("meta", shard.name + ".json").read_text(encoding="utf-8"))
        if meta["error"]:
            failed.add(shard.order)
    return failed


def _without_failed(records: np.ndarray, failed: set[int]) -> np.ndarray:
    if not failed or not len(records):
        return records
    orders, _ = split_refs(records["ref"])
    return records[~np.isin(orders, list(failed))]


def exact_partition(plan: EnginePlan, partition: int) -> int:
    """Write `exact_dups/<p>.bin` (dropped ref, kept ref, sorted by ref); return the number of duplicates."""
    records = _without_failed(read_all(plan.partition_dir("exact", partition).glob("*.bin"), EXACT),
                              failed_orders(plan))
    records = records[np.lexsort((records["ref"], records["negchars"], records["native"], records["lo"],
                                  records["hi"]))]
    starts = group_starts(records["hi"], records["lo"])
    first = np.maximum.accumulate(np.where(starts, np.arange(len(records)), 0))
    dups = np.empty(int((~starts).sum()), dtype=DUP)
    dups["ref"] = records["ref"][~starts]
    dups["kept"] = records["ref"][first[~starts]]
    dups["similarity"] = 1.0
    dups.sort(order="ref")
    dups.tofile(plan.path("exact_dups", f"{partition:03d}.bin"))
    return len(dups)


def band_partition(plan: EnginePlan, partition: int) -> int:
    """Write `pairs/<p>.bin`, the candidate pairs of one band partition; return their number."""
    records = _without_failed(read_all(plan.partition_dir("bands", partition).glob("*.bin"), BAND),
                              failed_orders(plan))
    records = records[np.lexsort((records["ref"], records["negchars"], records["native"], records["lo"],
                                  records["hi"], records["key"], records["band"]))]
    survivors = records[group_starts(records["band"], records["key"], records["hi"], records["lo"])]
    starts = np.flatnonzero(group_starts(survivors["band"], survivors["key"]))
    sizes = np.diff(np.append(starts, len(survivors)))
    out: list[np.ndarray] = []
    for start, size in zip(starts[sizes > 1].tolist(), sizes[sizes > 1].tolist(), strict=True):
        group = survivors[start : start + size]
        group = group[np.lexsort((group["ref"], group["negchars"], group["native"]))]
        a, b = np.triu_indices(size, k=1)
        pairs = np.empty(len(a), dtype=PAIR)
        pairs["a"], pairs["b"] = group["ref"][a], group["ref"][b]
        pairs["a_native"], pairs["a_negchars"] = group["native"][a], group["negchars"][a]
        pairs["b_native"], pairs["b_negchars"] = group["native"][b], group["negchars"][b]
        out.append(pairs)
    pairs = np.concatenate(out) if out else np.empty(0, dtype=PAIR)
    pairs.tofile(plan.path("pairs", f"{partition:03d}.bin"))
    return len(pairs)


def _signatures(plan: EnginePlan, refs: np.ndarray) -> dict[int, np.ndarray]:
    """Return {ref: signature} for the given refs, read from the stage files (signature column only)."""
    orders, rows = split_refs(refs)
    found: dict[int, np.ndarray] = {}
    for shard in plan.shards:
        wanted = rows[orders == shard.order]
        wanted = wanted[wanted % shard.parts == shard.part]
        if not len(wanted):
            continue
        path = plan.path("rows", shard.name + ".parquet")
        for batch in pq.ParquetFile(path).iter_batches(columns=["row", "sig"], batch_size=8192):
            row_col = batch.column(0).to_numpy()
            hit = np.flatnonzero(np.isin(row_col, wanted))
            sig_col = batch.column(1)
            for i in hit.tolist():
                ref = (shard.order << 40) | int(row_col[i])
                found[ref] = np.frombuffer(sig_col[i].as_py(), dtype=np.uint32)
    return found


def resolve_near(plan: EnginePlan) -> np.ndarray:
    """Return the near duplicates (DUP records sorted by ref) from every partition's candidate pairs."""
    pairs = read_all(plan.work.joinpath("pairs").glob("*.bin"), PAIR)
    if not len(pairs):
        return np.empty(0, dtype=DUP)
    pairs = pairs[np.unique(np.stack([pairs["a"], pairs["b"]], axis=1), axis=0, return_index=True)[1]]
    sigs = _signatures(plan, np.unique(np.concatenate([pairs["a"], pairs["b"]])))
    similarity = np.array(
        [np.count_nonzero(sigs[a] == sigs[b]) / NUM_PERM
         for a, b in zip(pairs["a"].tolist(), pairs["b"].tolist(), strict=True)]
    )
    edges = pairs[similarity >= THRESHOLD]
    similarity = similarity[similarity >= THRESHOLD]
    # Visit the later row of every edge best-first; its earlier neighbours were decided before it.
    later = np.lexsort((edges["b"], edges["b_negchars"], edges["b_native"]))
    earlier_rank: dict[int, tuple[int, int, int]] = {}
    by_row: dict[int, list[int]] = {}
    for i in later.tolist():
        by_row.setdefault(int(edges["b"][i]), []).append(i)
        earlier_rank[int(edges["a"][i])] = (int(edges["a_native"][i]), int(edges["a_negchars"][i]), int(edges["a"][i]))
    dropped: dict[int, tuple[int, float]] = {}
    for row, edge_ids in by_row.items():
        kept = [i for i in edge_ids if int(edges["a"][i]) not in dropped]
        if not kept:
            continue
        # The most similar kept neighbour; among equals the best-ranked (the in-process argmax's first).
        best = min(kept, key=lambda i: (-similarity[i], earlier_rank[int(edges["a"][i])]))
        dropped[row] = (int(edges["a"][best]), float(similarity[best]))
    out = np.empty(len(dropped), dtype=DUP)
    for n, (row, (kept_ref, sim)) in enumerate(sorted(dropped.items())):
        out[n] = (row, kept_ref, sim)
    return out


def dropped_refs(plan: EnginePlan, order: int) -> np.ndarray:
    """Return the sorted row indices of one source that dedup dropped (exact and near)."""
    parts = [read_all([p], DUP)["ref"] for p in sorted(plan.work.joinpath("exact_dups").glob("*.bin"))]
    parts.append(read_all([plan.path("near", "near.bin")], DUP)["ref"])
    refs = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    orders, rows = split_refs(refs)
    return np.sort(rows[orders == order])


def write_near(plan: EnginePlan, near: np.ndarray) -> Path:
    """Write the near duplicates to `near/near.bin` and return the path."""
    path = plan.path("near", "near.bin")
    near.tofile(path)
    return path
