"""The last steps: each shard's selected rows split into curated samples, then the driver's streaming merge.

`write_shard` builds the curated-sample record of every selected row (`curation.samples.build_sample`, the
in-process split) into `parts/<shard>.parquet`. `assemble` merges the parts in the in-process output
order (manifest order, then row index: a k-way merge of a source's shards) into `data/shard-NNNNN.parquet`
of SHARD_ROWS rows each, written exactly as `curation.shards.write_shards` writes them, and streams the
side files (`dropped/<slug>.jsonl`, `dropped/duplicates.jsonl`, `decontaminated.jsonl`, `samples.jsonl`)
in the same order; memory holds one output shard, never the set.
"""

from __future__ import annotations

import heapq
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from curation.conversation import Row
from curation.engine.dedup import dropped_refs
from curation.engine.keys import CLEAN, DUP, read_all, split_refs
from curation.engine.plan import EnginePlan, Shard
from curation.engine.select import iter_rows
from curation.samples import build_sample
from curation.shards import SCHEMA, SHARD_ROWS
from curation.staging import sample_id, slug


def write_shard(plan: EnginePlan, shard: Shard, threshold: bytes | None) -> int:
    """Write the curated samples of a shard's selected rows; return how many."""
    source = plan.source(shard)
    clean = read_all([plan.path("clean", shard.name + ".bin")], CLEAN)
    chosen = clean["row"] if threshold is None else clean["row"][clean["digest"] <= np.bytes_(threshold)]
    chosen = np.sort(chosen)
    writer = pq.ParquetWriter(plan.path("parts", shard.name + ".tmp"), SCHEMA, compression="zstd")
    samples: list[dict[str, Any]] = []
    count = 0
    skip = dropped_refs(plan, shard.order)
    for row_index, messages, tokens, prompt_tokens in iter_rows(plan, shard, skip):
        if not len(chosen) or chosen[min(np.searchsorted(chosen, row_index), len(chosen) - 1)] != row_index:
            continue
        row = Row(source.key, row_index, messages, str(source.category), source.target_native, shard.order,
                  extra={"token_count": tokens, "prompt_tokens": prompt_tokens})
        samples.append(build_sample(row, source, sample_id(source, row_index), plan.ctx.params.counter))
        if len(samples) >= 4_096:
            writer.write_table(pa.Table.from_pylist(samples, schema=SCHEMA))
            count += len(samples)
            samples = []
    if samples:
        writer.write_table(pa.Table.from_pylist(samples, schema=SCHEMA))
        count += len(samples)
    writer.close()
    plan.path("parts", shard.name + ".tmp").replace(plan.path("parts", shard.name + ".parquet"))
    return count


def _part_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for batch in pq.ParquetFile(path).iter_batches(batch_size=2_048):
        for record in batch.to_pylist():
            yield record["source"]["row"], record


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8", errors="surrogatepass") as handle:
        for line in handle:
            record = json.loads(line)
            yield record["row"], record


def _merged(iterators: list[Iterator[tuple[int, dict[str, Any]]]]) -> Iterator[dict[str, Any]]:
    for _, record in heapq.merge(*iterators, key=lambda item: item[0]):
        yield record


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, ensure_ascii=False)


class _LineFile:
    """A JSON Lines file written as `curation.shards.jsonl_bytes` writes it, one record at a time."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.tmp = path, path.with_name(path.name + ".tmp")
        self.handle = self.tmp.open("w", encoding="utf-8", errors="surrogatepass", newline="\n")

    def write(self, record: dict[str, Any]) -> None:
        self.handle.write(_line(record) + "\n")

    def close(self) -> None:
        self.handle.close()
        os.replace(self.tmp, self.path)


def write_samples(plan: EnginePlan, out_dir: Path) -> tuple[list[str], dict[str, list[int]]]:
    """Merge the parts into output shards (and samples.jsonl); return the written paths and token counts."""
    data_dir = out_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    lines = _LineFile(out_dir / "samples.jsonl") if plan.jsonl else None
    tokens: dict[str, list[int]] = {"regen": [], "native": [], "original": []}
    paths: list[Path] = []
    chunk: list[dict[str, Any]] = []

    def flush() -> None:
        path = data_dir / f"shard-{len(paths):05d}.parquet"
        tmp = path.with_name(path.name + ".tmp")
        pq.write_table(pa.Table.from_pylist(chunk, schema=SCHEMA), tmp, compression="zstd",
                       write_statistics=False)
        os.replace(tmp, path)
        paths.append(path)
        chunk.clear()

    for order in range(len(plan.manifest.sources)):
        parts = [_part_rows(plan.path("parts", s.name + ".parquet")) for s in plan.shards_of(order)]
        for sample in _merged(parts):
            chunk.append(sample)
            tokens["regen" if sample["needs_regeneration"] else "native"].append(sample["token_count"])
            tokens["original"].append(sample["original_token_count"])
            if lines:
                lines.write(sample)
            if len(chunk) >= SHARD_ROWS:
                flush()
    if chunk or not paths:
        flush()
    if lines:
        lines.close()
    for stale in data_dir.glob("shard-*.parquet"):
        if stale not in paths:
            stale.unlink()
    outputs = [p.relative_to(out_dir).as_posix() for p in paths]
    if plan.jsonl:
        outputs.append("samples.jsonl")
    return outputs, tokens


def write_dropped(plan: EnginePlan, out_dir: Path, order: int, bound: int | None) -> Counter[str]:
    """Merge a source's dropped rows into `dropped/<slug>.jsonl` (rows before `bound` only); count reasons."""
    source = plan.manifest.sources[order]
    reasons: Counter[str] = Counter()
    out = _LineFile(out_dir / "dropped" / f"{slug(source)}.jsonl")
    parts = [_jsonl_rows(plan.path("dropped", s.name + ".jsonl")) for s in plan.shards_of(order)]
    for record in _merged(parts):
        if bound is not None and record["row"] >= bound:
            continue
        reasons[record["reason"]] += 1
        out.write(record)
    out.close()
    return reasons


def write_duplicates(plan: EnginePlan, out_dir: Path, near: np.ndarray) -> Counter[int]:
    """Write `dropped/duplicates.jsonl` (exact then near, each in input order); return duplicates per source."""
    sources = plan.manifest.sources
    per_source: Counter[int] = Counter()
    out = _LineFile(out_dir / "dropped" / "duplicates.jsonl")

    def records(dups: np.ndarray) -> Iterator[tuple[int, dict[str, Any]]]:
        orders, rows = split_refs(dups["ref"])
        kept_orders, kept_rows = split_refs(dups["kept"])
        for i in range(len(dups)):
            yield int(dups["ref"][i]), {
                "o": int(orders[i]), "r": int(rows[i]), "ko": int(kept_orders[i]), "kr": int(kept_rows[i]),
                "s": float(dups["similarity"][i]),
            }

    exact = [records(read_all([p], DUP)) for p in sorted(plan.work.joinpath("exact_dups").glob("*.bin"))]
    for kind, stream in (("exact", heapq.merge(*exact, key=lambda item: item[0])), ("near", records(near))):
        for _, d in stream:
            per_source[d["o"]] += 1
            out.write({"id": sample_id(sources[d["o"]], d["r"]), "kept_id": sample_id(sources[d["ko"]], d["kr"]),
                       "kind": kind, "similarity": 1.0 if kind == "exact" else d["s"]})
    out.close()
    return per_source


def write_decontaminated(plan: EnginePlan, out_dir: Path) -> Counter[int]:
    """Write `decontaminated.jsonl` in input order; return contaminated rows per source."""
    per_source: Counter[int] = Counter()
    out = _LineFile(out_dir / "decontaminated.jsonl")
    for order in range(len(plan.manifest.sources)):
        parts = [_jsonl_rows(plan.path("decon", s.name + ".jsonl")) for s in plan.shards_of(order)]
        for record in _merged(parts):
            per_source[order] += 1
            out.write(record)
    out.close()
    return per_source
