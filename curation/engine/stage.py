"""Stage task: one shard of a source loaded, adapted and cleaned, streamed to disk with its dedup keys.

The same steps as `curation.staging` (the format resolved from the first readable record, one adapter per
format, `DEFAULT_STEPS`), applied to the rows of this shard only and written as they pass, so a task's
memory does not grow with its source: `rows/<shard>.parquet` (row index, messages as JSON, the normalised
prompt, token counts, MinHash signature, the row's tools schema as JSON or null), `dropped/<shard>.jsonl`
(each drop with its reason, as the in-process run writes it), one exact-dedup record per row into its hash
partition and one LSH record per row and band into the band key's partition. `meta/<shard>.json` ends the
task: counts, format, and on failure the error with the row where it happened; a failed shard's partition
files are removed, the run goes on with the others.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from curation.adapters import adapt, adapt_tools, resolve_format
from curation.cleaning import DEFAULT_STEPS, StepRunner
from curation.conversation import Drop, Row, assistant_chars, prompt_text
from curation.dedup import BANDS, band_keys, shingles, signatures
from curation.engine.counts import ShardMeta
from curation.engine.keys import BAND, EXACT, append, hash_words, make_ref
from curation.engine.plan import EnginePlan, Shard
from curation.loading import unreadable
from curation.local_sources import prepare_record, source_records
from curation.set_aside import DroppedRow
from curation.shards import atomic_write_json
from curation.staging import sample_id
from curation.textkeys import content_hash, normalise, word_hashes

logger = logging.getLogger(__name__)

BATCH = 2_000
ROWS_SCHEMA = pa.schema(
    [
        ("row", pa.int64()),
        ("messages", pa.string()),
        ("prompt", pa.string()),
        ("tokens", pa.int64()),
        ("prompt_tokens", pa.int64()),
        ("sig", pa.binary(4 * 128)),
        ("tools", pa.string()),
    ]
)


class _Writer:
    """Streams one shard's kept rows to Parquet and their keys to the partition files."""

    def __init__(self, plan: EnginePlan, shard: Shard) -> None:
        self.plan, self.shard = plan, shard
        self.rows_path = plan.path("rows", shard.name + ".parquet")
        self.parquet = pq.ParquetWriter(self.rows_path.with_suffix(".tmp"), ROWS_SCHEMA, compression="zstd")
        self.batch: list[Row] = []
        self.kept = 0
        self.partition_files: list[Path] = []
        for kind in ("exact", "bands"):
            for p in range(plan.partitions):
                path = plan.partition_dir(kind, p) / f"{shard.name}.bin"
                path.unlink(missing_ok=True)
                self.partition_files.append(path)

    def add(self, row: Row) -> None:
        self.batch.append(row)
        if len(self.batch) >= BATCH:
            self.flush()

    def flush(self) -> None:
        if not self.batch:
            return
        rows, self.batch = self.batch, []
        texts = [normalise(prompt_text(r.messages)) for r in rows]
        sigs = signatures([shingles(word_hashes(t, normalised=True)) for t in texts])
        keys = band_keys(sigs)
        exact = np.empty(len(rows), dtype=EXACT)
        for i, (row, text) in enumerate(zip(rows, texts, strict=True)):
            hi, lo = hash_words(content_hash(text, normalised=True))
            exact[i] = (hi, lo, 0 if row.target_native else 1, -assistant_chars(row.messages),
                        make_ref(row.source_order, row.row_index))
        parts = np.uint64(self.plan.partitions)
        self._scatter("exact", exact, exact["lo"] % parts)
        bands = np.empty((len(rows), BANDS), dtype=BAND)
        for field in ("hi", "lo", "native", "negchars", "ref"):
            bands[field] = exact[field][:, None]
        bands["band"] = np.arange(BANDS, dtype=np.uint8)[None, :]
        bands["key"] = keys
        flat = bands.reshape(-1)
        self._scatter("bands", flat, flat["key"] % parts)
        table = pa.table(
            {
                "row": [r.row_index for r in rows],
                "messages": [json.dumps(r.messages, ensure_ascii=False) for r in rows],
                "prompt": texts,
                "tokens": [r.extra["token_count"] for r in rows],
                "prompt_tokens": [r.extra["prompt_tokens"] for r in rows],
                "sig": [s.tobytes() for s in sigs],
                "tools": [None if r.tools is None else json.dumps(r.tools, ensure_ascii=False) for r in rows],
            },
            schema=ROWS_SCHEMA,
        )
        self.parquet.write_table(table)
        self.kept += len(rows)

    def _scatter(self, kind: str, records: np.ndarray, partition: np.ndarray) -> None:
        """Append each record to its partition's file of this shard."""
        order = np.argsort(partition, kind="stable")
        records, partition = records[order], partition[order]
        bounds = np.flatnonzero(np.diff(partition)) + 1
        for chunk, start in zip(np.split(records, bounds), [0, *bounds.tolist()], strict=True):
            append(self.plan.partition_dir(kind, int(partition[start])) / f"{self.shard.name}.bin", chunk)

    def close(self, *, failed: bool) -> None:
        if not failed:
            self.flush()
        self.parquet.close()
        if failed:  # a failed source keeps no rows, as in the in-process run
            self.kept = 0
            self.rows_path.with_suffix(".tmp").unlink(missing_ok=True)
            pq.write_table(ROWS_SCHEMA.empty_table(), self.rows_path)
            for path in self.partition_files:
                path.unlink(missing_ok=True)
        else:
            self.rows_path.with_suffix(".tmp").replace(self.rows_path)


def stage_shard(plan: EnginePlan, shard: Shard) -> ShardMeta:
    """Load, adapt and clean one shard; write its rows and keys; return (and write) its meta record."""
    source = plan.source(shard)
    ctx = plan.ctx
    meta = ShardMeta(rows_in=0, read=0, drops=Counter(), format=None, error=None, failed_row=None, kept=0,
                     scrubbed=Counter())
    dropped_path = plan.path("dropped", shard.name + ".jsonl")
    writer = _Writer(plan, shard)
    with dropped_path.open("w", encoding="utf-8", errors="surrogatepass") as dropped:

        def on_drop(row: Row, drop: Drop) -> None:
            meta["drops"][drop.reason] += 1
            record = DroppedRow(id=sample_id(source, row.row_index), source=source.key, row=row.row_index,
                                reason=drop.reason, detail=drop.detail, messages=row.messages)
            dropped.write(json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n")

        runner = StepRunner(DEFAULT_STEPS, ctx.params, on_drop)  # on_drop counts, so runner.drops is unused
        try:
            for row in runner.run(_rows(plan, shard, meta, on_drop)):
                writer.add(row)
        except Exception as exc:  # a failing shard is reported with its row; the other shards go on
            meta["error"] = f"{type(exc).__name__}: {exc}"
            meta["failed_row"] = meta["read"]
            logger.error("source %s shard %d/%d failed at row %s: %s", source.key, shard.part, shard.parts,
                         meta["read"], meta["error"])
    writer.close(failed=meta["error"] is not None)
    meta["kept"] = writer.kept
    meta["drops"] = dict(sorted(meta["drops"].items()))
    meta["scrubbed"] = dict(sorted(meta["scrubbed"].items()))
    atomic_write_json(plan.path("meta", shard.name + ".json"), meta)
    return meta


def _rows(plan: EnginePlan, shard: Shard, meta: ShardMeta, on_drop: Any) -> Any:
    source = plan.source(shard)
    ctx = plan.ctx
    load = ctx.plan_for(source, files=plan.files(shard), streaming=source.streaming)
    fmt: str | None = None
    for index, raw in enumerate(source_records(source, load, cache_dir=ctx.cache_dir, token=ctx.token)):
        if source.max_rows is not None and index >= source.max_rows:
            break
        mine = index % shard.parts == shard.part
        meta["read"] = index + 1
        if mine:
            meta["rows_in"] += 1
        row = Row(source.key, index, [], str(source.category), source.target_native, shard.order)
        if (bad := unreadable(raw)) is not None:
            if mine:
                on_drop(row, Drop(*bad))
            continue
        if fmt is not None and not mine:
            continue
        record, scrubbed = prepare_record(source, raw)  # traffic: scrubbed before any step sees it
        if mine:
            meta["scrubbed"].update(scrubbed)
        if fmt is None:
            fmt = resolve_format(record.keys(), source.format, source.field_mapping, source.key)
            meta["format"] = fmt
        if not mine:
            continue
        try:
            result, tools = adapt(record, fmt, source.field_mapping), adapt_tools(record, fmt, source.field_mapping)
        except Exception as exc:  # an adapter bug on one odd row is that row's drop, not the source's end
            result, tools = Drop("adapter_error", f"{type(exc).__name__}: {exc}"), None
        if isinstance(result, Drop) or isinstance(tools, Drop):
            on_drop(row, result if isinstance(result, Drop) else tools)
            continue
        row.messages, row.tools = result, tools
        yield row
