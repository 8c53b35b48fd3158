"""The last steps: each shard's selected rows split into curated samples, then the driver's streaming merge.

`write_shard` builds the curated-sample record of every selected row (`curation.samples.build_sample`, the
in-process split) into `parts/<shard>.parquet`. `assemble` merges the parts in the in-process output
order (manifest order, then row index: a k-way merge of a source's shards) into `data/shard-NNNNN.parquet`
of SHARD_ROWS rows each, written exactly as `curation.shards.write_shards` writes them, and streams the
side files (`dropped/<slug>.jsonl`, `dropped/duplicates.jsonl`, `decontaminated.jsonl`, `samples.jsonl`)
in the same order; memory holds one output shard, never the set.
"""

from __future__ import annotations

import contextlib
import heapq
import json
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Literal, TypedDict, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core.curated_set import SAMPLES_FILE
from core.samples import CuratedSample
from curation.atomic_files import remove_file, staged_file
from curation.conversation import Row
from curation.engine.dedup import dropped_refs
from curation.engine.keys import CLEAN, DUP, read_all, split_refs
from curation.engine.plan import EnginePlan, Shard
from curation.engine.select import iter_rows
from curation.samples import build_sample
from curation.set_aside import ContaminatedRecord, DroppedRow, DuplicateRecord
from curation.shards import SCHEMA, SHARD_ROWS, sample_from_shard, shard_row
from curation.staging import sample_id, slug


def write_shard(plan: EnginePlan, shard: Shard, threshold: bytes | None) -> int:
    """Write the curated samples of a shard's selected rows; return how many."""
    source = plan.source(shard)
    clean = read_all([plan.path("clean", shard.name + ".bin")], CLEAN)
    chosen = clean["row"] if threshold is None else clean["row"][clean["digest"] <= np.bytes_(threshold)]
    chosen = np.sort(chosen)
    writer = pq.ParquetWriter(plan.path("parts", shard.name + ".tmp"), SCHEMA, compression="zstd")
    samples: list[CuratedSample] = []
    count = 0
    skip = dropped_refs(plan, shard.order)
    for row_index, messages, tokens, prompt_tokens, tools in iter_rows(plan, shard, skip):
        if not len(chosen) or chosen[min(np.searchsorted(chosen, row_index), len(chosen) - 1)] != row_index:
            continue
        row = Row(source.key, row_index, messages, str(source.category), source.target_native, shard.order,
                  extra={"token_count": tokens, "prompt_tokens": prompt_tokens}, tools=tools)
        samples.append(build_sample(row, source, sample_id(source, row_index), plan.ctx.params.counter))
        if len(samples) >= 4_096:
            writer.write_table(pa.Table.from_pylist([shard_row(s) for s in samples], schema=SCHEMA))
            count += len(samples)
            samples = []
    if samples:
        writer.write_table(pa.Table.from_pylist([shard_row(s) for s in samples], schema=SCHEMA))
        count += len(samples)
    writer.close()
    plan.path("parts", shard.name + ".tmp").replace(plan.path("parts", shard.name + ".parquet"))
    return count


# The side records a shard writes for its stage door, each keyed by its row: dropped rows, contaminated rows.
_SideRecord = TypeVar("_SideRecord", DroppedRow, ContaminatedRecord)


def _jsonl_rows(path: Path, shape: type[_SideRecord]) -> Iterator[tuple[int, _SideRecord]]:
    """Yield `(row, record)` of a shard's side file, which holds `shape` records (written by this engine)."""
    with path.open(encoding="utf-8", errors="surrogatepass") as handle:
        for line in handle:
            record: _SideRecord = json.loads(line)
            yield record["row"], record


def _merged(iterators: list[Iterator[tuple[int, _SideRecord]]]) -> Iterator[_SideRecord]:
    for _, record in heapq.merge(*iterators, key=lambda item: item[0]):
        yield record


def _line(record: Mapping[str, object]) -> str:
    return json.dumps(record, sort_keys=True, ensure_ascii=False)


class _LineFile:
    """A JSON Lines file written as `curation.shards.jsonl_bytes` writes it, one record at a time."""

    def __init__(self, path: Path, root: Path) -> None:
        # A fresh temporary file beside `path`, renamed in by close(); no link below `root` is followed.
        self.path, self._stack = path, contextlib.ExitStack()
        self.handle = self._stack.enter_context(staged_file(path, root=root))

    def write(self, record: Mapping[str, object]) -> None:
        self.handle.write((_line(record) + "\n").encode("utf-8", errors="surrogatepass"))

    def close(self) -> None:
        self._stack.close()


def _merged_tables(paths: list[Path]) -> Iterator[pa.Table]:
    """Yield a source's samples in row order from its shards' parts (each sorted by row), a window at a time."""
    readers = [pq.ParquetFile(p).iter_batches(batch_size=4_096) for p in paths]
    buffers: list[pa.Table | None] = [pa.table({}) for _ in paths]
    while True:
        for i, reader in enumerate(readers):
            while buffers[i] is not None and len(buffers[i]) == 0:  # type: ignore[arg-type]
                batch = next(reader, None)
                buffers[i] = None if batch is None else pa.Table.from_batches([batch])
        live = [b for b in buffers if b is not None]
        if not live:
            return
        rows = [pc.struct_field(b["source"], "row").to_numpy() for b in live]
        bound = min(int(r[-1]) for r in rows)  # every row up to here is in the buffers already
        pieces = []
        for i, b in enumerate(buffers):
            if b is None:
                continue
            r = pc.struct_field(b["source"], "row").to_numpy()
            cut = int(np.searchsorted(r, bound, side="right"))
            pieces.append(b.slice(0, cut))
            buffers[i] = b.slice(cut)
        window = pa.concat_tables(pieces)
        yield window.take(pc.sort_indices(pc.struct_field(window["source"], "row")))


def write_samples(plan: EnginePlan, out_dir: Path) -> tuple[list[str], dict[str, np.ndarray]]:
    """Merge the parts into output shards (and samples.jsonl); return the written paths and token counts."""
    data_dir = out_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    lines = _LineFile(out_dir / SAMPLES_FILE, out_dir) if plan.jsonl else None
    tokens: dict[str, list[np.ndarray]] = {"regen": [], "native": [], "original": []}
    paths: list[Path] = []
    pending: list[pa.Table] = []
    held = 0

    def flush(rows: int) -> None:
        nonlocal pending, held
        table = pa.concat_tables(pending) if pending else SCHEMA.empty_table()
        path = data_dir / f"shard-{len(paths):05d}.parquet"
        chunk = table.slice(0, rows).combine_chunks().cast(SCHEMA)  # Parquet reads lists back as "element"
        with staged_file(path, root=out_dir) as handle:
            pq.write_table(chunk, handle, compression="zstd", write_statistics=False)
        paths.append(path)
        rest = table.slice(rows)
        pending, held = ([rest] if len(rest) else []), len(rest)

    for order in range(len(plan.manifest.sources)):
        parts = [plan.path("parts", s.name + ".parquet") for s in plan.shards_of(order)]
        for window in _merged_tables(parts):
            regen = window["needs_regeneration"].to_numpy(zero_copy_only=False)
            counts = window["token_count"].to_numpy()
            tokens["regen"].append(counts[regen])
            tokens["native"].append(counts[~regen])
            tokens["original"].append(window["original_token_count"].to_numpy())
            if lines:
                for sample in window.to_pylist():
                    lines.write(sample_from_shard(sample))
            pending.append(window)
            held += len(window)
            while held >= SHARD_ROWS:
                flush(SHARD_ROWS)
    if held or not paths:
        flush(held)
    if lines:
        lines.close()
    for stale in data_dir.glob("shard-*.parquet"):
        if stale not in paths:
            remove_file(stale, root=out_dir)
    outputs = [p.relative_to(out_dir).as_posix() for p in paths]
    if plan.jsonl:
        outputs.append(SAMPLES_FILE)
    empty = np.empty(0, dtype=np.int64)
    return outputs, {k: np.concatenate(v) if v else empty for k, v in tokens.items()}


def write_dropped(plan: EnginePlan, out_dir: Path, order: int, bound: int | None) -> Counter[str]:
    """Merge a source's dropped rows into `dropped/<slug>.jsonl` (rows before `bound` only); count reasons."""
    source = plan.manifest.sources[order]
    reasons: Counter[str] = Counter()
    out = _LineFile(out_dir / "dropped" / f"{slug(source)}.jsonl", out_dir)
    parts = [_jsonl_rows(plan.path("dropped", s.name + ".jsonl"), DroppedRow) for s in plan.shards_of(order)]
    for record in _merged(parts):
        if bound is not None and record["row"] >= bound:
            continue
        reasons[record["reason"]] += 1
        out.write(record)
    out.close()
    return reasons


class _DuplicateRef(TypedDict):
    """A duplicate by reference: its source order and row, the kept row's, and their similarity."""

    o: int
    r: int
    ko: int
    kr: int
    s: float


def write_duplicates(plan: EnginePlan, out_dir: Path, near: np.ndarray) -> Counter[int]:
    """Write `dropped/duplicates.jsonl` (exact then near, each in input order); return duplicates per source."""
    sources = plan.manifest.sources
    per_source: Counter[int] = Counter()
    out = _LineFile(out_dir / "dropped" / "duplicates.jsonl", out_dir)

    def records(dups: np.ndarray) -> Iterator[tuple[int, _DuplicateRef]]:
        orders, rows = split_refs(dups["ref"])
        kept_orders, kept_rows = split_refs(dups["kept"])
        for i in range(len(dups)):
            yield int(dups["ref"][i]), _DuplicateRef(o=int(orders[i]), r=int(rows[i]), ko=int(kept_orders[i]),
                                                     kr=int(kept_rows[i]), s=float(dups["similarity"][i]))

    exact = [records(read_all([p], DUP)) for p in sorted(plan.work.joinpath("exact_dups").glob("*.bin"))]
    streams: list[tuple[Literal["exact", "near"], Iterator[tuple[int, _DuplicateRef]]]] = [
        ("exact", heapq.merge(*exact, key=lambda item: item[0])), ("near", records(near))]
    for kind, stream in streams:
        for _, d in stream:
            per_source[d["o"]] += 1
            out.write(DuplicateRecord(id=sample_id(sources[d["o"]], d["r"]),
                                      kept_id=sample_id(sources[d["ko"]], d["kr"]),
                                      kind=kind, similarity=1.0 if kind == "exact" else d["s"]))
    out.close()
    return per_source


def write_decontaminated(plan: EnginePlan, out_dir: Path) -> Counter[int]:
    """Write `decontaminated.jsonl` in input order; return contaminated rows per source."""
    per_source: Counter[int] = Counter()
    out = _LineFile(out_dir / "decontaminated.jsonl", out_dir)
    for order in range(len(plan.manifest.sources)):
        parts = [_jsonl_rows(plan.path("decon", s.name + ".jsonl"), ContaminatedRecord) for s in plan.shards_of(order)]
        for record in _merged(parts):
            per_source[order] += 1
            out.write(record)
    out.close()
    return per_source
