"""Writing the curated set: Parquet shards in the curated-sample schema, optional JSONL, and JSON side files.

Every file is written to a fresh temporary name and renamed into place (`curation.atomic_files`), so a crash
never leaves a half shard, never touches shards already complete, and a planted link is never followed. Shards hold SHARD_ROWS rows in output order; nothing written holds
a timestamp, so the same input gives byte-identical files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from curation.atomic_files import remove_file, remove_temporaries, staged_file, write_file

SHARD_ROWS = 10_000

_MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("category", pa.string()),
        ("messages", _MESSAGES),
        ("needs_regeneration", pa.bool_()),
        ("target_native", pa.bool_()),
        (
            "source",
            pa.struct(
                [
                    ("dataset", pa.string()),
                    ("config", pa.string()),
                    ("split", pa.string()),
                    ("revision", pa.string()),
                    ("row", pa.int64()),
                ]
            ),
        ),
        ("content_hash", pa.string()),
        ("token_count", pa.int64()),
        ("original_messages", _MESSAGES),
        ("original_token_count", pa.int64()),
        ("input_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
    ]
)


def atomic_write_bytes(path: Path, data: bytes, *, root: Path | None = None) -> None:
    """Write `data` to `path` whole, never through a link below `root` (default: its own folder); see
    `curation.atomic_files`."""
    write_file(path, data, root=root)


def atomic_write_json(path: Path, payload: Any, *, root: Path | None = None) -> None:
    """Write `payload` as indented, key-sorted JSON."""
    atomic_write_bytes(
        path, (json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode(), root=root
    )


def jsonl_bytes(records: Iterable[dict[str, Any]]) -> bytes:
    """Return records as JSON Lines (keys sorted, UTF-8)."""
    lines = [json.dumps(r, sort_keys=True, ensure_ascii=False) for r in records]
    return ("\n".join(lines) + "\n").encode("utf-8", errors="surrogatepass") if lines else b""


def write_shards(samples: list[dict[str, Any]], data_dir: Path, *, root: Path | None = None) -> list[Path]:
    """Write samples as `data/shard-NNNNN.parquet` (SHARD_ROWS each) and remove stale shards; return the paths.
    No folder below `root` (default: `data_dir` itself) is followed if it is a link."""
    root = root if root is not None else data_dir
    remove_temporaries(data_dir, root=root)
    paths: list[Path] = []
    for number, start in enumerate(range(0, max(len(samples), 1), SHARD_ROWS)):
        chunk = samples[start : start + SHARD_ROWS]
        table = pa.Table.from_pylist(chunk, schema=SCHEMA)
        path = data_dir / f"shard-{number:05d}.parquet"
        with staged_file(path, root=root) as handle:
            pq.write_table(table, handle, compression="zstd", write_statistics=False)
        paths.append(path)
    for stale in data_dir.glob("shard-*.parquet"):
        if stale not in paths:
            remove_file(stale, root=root)
    return paths
