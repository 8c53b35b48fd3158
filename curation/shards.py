"""Writing the curated set: Parquet shards in the curated-sample schema, optional JSONL, and JSON side files.

The shards' Arrow schema is derived from the row contract (`core.samples.CuratedSample`), field by field; a
row's `tools` schema (JSON Schema inside, of any shape) is stored as its JSON text, which the contract reads
back (`shard_row` writes it).

Every file is written to a fresh temporary name and renamed into place (`curation.atomic_files`), so a crash
never leaves a half shard, never touches shards already complete, and a planted link is never followed. Shards
hold SHARD_ROWS rows in output order; nothing written holds a timestamp, so the same input gives
byte-identical files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel
from typing_extensions import is_typeddict

from core.completion import stamp_file
from core.curated_set import MANIFEST_FILE, REPORT_FILE, STATE_FILE, write_state_text
from core.samples import CuratedSample
from curation.atomic_files import read_own, remove_file, remove_temporaries, staged_file, write_file

SHARD_ROWS = 10_000

# Fields of free JSON (a tool's parameters are any JSON Schema): stored as their JSON text.
JSON_TEXT_FIELDS = ("tools",)

# Token ids fit int32 and a loss mask holds 0/1: the model says `list[int]`, the shards store them narrower;
# the free-JSON fields are text.
NARROW_FIELDS: dict[str, pa.DataType] = {"input_ids": pa.list_(pa.int32()), "loss_mask": pa.list_(pa.int8()),
                                         **dict.fromkeys(JSON_TEXT_FIELDS, pa.string())}


def arrow_type(annotation: Any) -> pa.DataType:
    """Return the Arrow type of a row-contract annotation: str/Literal, bool, int, `X | None` (nullable, as every
    Arrow field is), `list[X]`, a pydantic model or a TypedDict (a struct of its fields, in order)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, UnionType):
        (inner,) = [a for a in args if a is not type(None)]
        return arrow_type(inner)
    if origin is Literal and all(isinstance(a, str) for a in args):
        return pa.string()
    if origin is list:
        return pa.list_(arrow_type(args[0]))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return pa.struct([(name, arrow_type(f.annotation)) for name, f in annotation.model_fields.items()])
    if is_typeddict(annotation):
        return pa.struct([(name, arrow_type(hint)) for name, hint in get_type_hints(annotation).items()])
    simple = {str: pa.string(), bool: pa.bool_(), int: pa.int64()}
    if annotation in simple:
        return simple[annotation]
    raise TypeError(f"no Arrow type for {annotation!r}")


def model_schema(model: type[BaseModel], narrow: dict[str, pa.DataType] | None = None) -> pa.Schema:
    """Return the Arrow schema of `model`'s rows: one field per model field, in order (`narrow` overrides)."""
    narrow = narrow or {}
    return pa.schema([(name, narrow.get(name) or arrow_type(f.annotation)) for name, f in model.model_fields.items()])


# The curated-sample shards: derived from the one contract, so a field added to it is a column, never forgotten.
SCHEMA = model_schema(CuratedSample, NARROW_FIELDS)


def shard_row(sample: CuratedSample) -> dict[str, Any]:
    """Return a sample as a shard row: its fields, the free-JSON ones as JSON text (None stays None)."""
    row = sample.model_dump()
    for name in JSON_TEXT_FIELDS:
        if row[name] is not None:
            row[name] = json.dumps(row[name], ensure_ascii=False, sort_keys=True)
    return row


def sample_from_shard(row: dict[str, Any]) -> dict[str, Any]:
    """Return a shard row as the sample's own record (`model_dump`'s shape): the free-JSON fields parsed, and the
    turn keys a column fills with None where a turn has none (`tool_calls`, `tool_call_id`) left out."""
    out = dict(row)
    for name in JSON_TEXT_FIELDS:
        if out.get(name) is not None:
            out[name] = json.loads(out[name])
    for name in ("messages", "original_messages"):
        out[name] = [{k: v for k, v in turn.items() if v is not None or k in ("role", "content")}
                     for turn in out[name]]
    return out


def atomic_write_bytes(path: Path, data: bytes, *, root: Path | None = None) -> None:
    """Write `data` to `path` whole, never through a link below `root` (default: its own folder); see
    `curation.atomic_files`."""
    write_file(path, data, root=root)


def atomic_write_json(path: Path, payload: Any, *, root: Path | None = None) -> None:
    """Write `payload` as indented, key-sorted JSON."""
    atomic_write_bytes(
        path, (json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode(), root=root
    )


def jsonl_bytes(records: Iterable[Mapping[str, object]]) -> bytes:
    """Return records as JSON Lines (keys sorted, UTF-8)."""
    lines = [json.dumps(r, sort_keys=True, ensure_ascii=False) for r in records]
    return ("\n".join(lines) + "\n").encode("utf-8", errors="surrogatepass") if lines else b""


def write_shards(samples: Sequence[CuratedSample], data_dir: Path, *, root: Path | None = None) -> list[Path]:
    """Write samples as `data/shard-NNNNN.parquet` (SHARD_ROWS each) and remove stale shards; return the paths.
    No folder below `root` (default: `data_dir` itself) is followed if it is a link."""
    root = root if root is not None else data_dir
    remove_temporaries(data_dir, root=root)
    paths: list[Path] = []
    for number, start in enumerate(range(0, max(len(samples), 1), SHARD_ROWS)):
        chunk = samples[start : start + SHARD_ROWS]
        table = pa.Table.from_pylist([shard_row(s) for s in chunk], schema=SCHEMA)
        path = data_dir / f"shard-{number:05d}.parquet"
        with staged_file(path, root=root) as handle:
            pq.write_table(table, handle, compression="zstd", write_statistics=False)
        paths.append(path)
    for stale in data_dir.glob("shard-*.parquet"):
        if stale not in paths:
            remove_file(stale, root=root)
    return paths


def begin_set(out_dir: Path) -> None:
    """Remove the set's completion marker (`state.json`) before the first output is touched, so a run killed
    from here on leaves a folder every reader refuses (`core.curated_set`)."""
    remove_file(out_dir / STATE_FILE, root=out_dir)


def commit_set(out_dir: Path, final: str, outputs: list[str], manifest_text: str) -> None:
    """Write the manifest beside the set, then the completion marker last: `final` (the run's key), the
    `outputs` (relative paths) and the stamp (size, sha256) of each of them, of the report and of the manifest."""
    if read_own(out_dir / MANIFEST_FILE, root=out_dir) != manifest_text.encode("utf-8"):
        remove_file(out_dir / STATE_FILE, root=out_dir)  # a kill before the marker below leaves no stale one
        atomic_write_bytes(out_dir / MANIFEST_FILE, manifest_text.encode("utf-8"), root=out_dir)
    files = {name: stamp_file(out_dir / name) for name in [*outputs, REPORT_FILE, MANIFEST_FILE]}
    atomic_write_bytes(out_dir / STATE_FILE, write_state_text(final, outputs, files), root=out_dir)
