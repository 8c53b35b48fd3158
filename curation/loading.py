"""Loading a manifest source as records: from a local mirror or the Hub through `datasets`, else a record reader.

Offline, `data_files` are read relative to the mirror folder; online, the Hub is asked for the pinned
revision, config and split. Tables go through `datasets.load_dataset` (json, csv, parquet builders;
`streaming=True` above STREAMING_BYTES or when the source asks for it). Files `datasets` cannot read as one
table — a single JSON object per file (SWE-agent `.traj`, ToolBench answers), JSON Lines whose rows
disagree on their schema, or bytes that are not valid UTF-8 — go through a small record reader that yields
one record per object or line; a line that is not valid UTF-8 (INVALID_UTF8), or a JSON Lines line after the
first that is not JSON (INVALID_JSON), comes out as a marker record the cleaning runner counts as a drop instead
of losing the file (`unreadable`).

Paired line files — corpora such as NL2Bash (`all.nl` descriptions / `all.cm` commands) or CodeXGLUE's
translation pairs (`train.java-cs.txt.java` / `.cs`) ship as two line-aligned plain-text files, not as JSON — are
read two by two (`read_paired_lines`): data files none of which has a table suffix (JSON, JSON Lines, CSV,
Parquet, `.traj`), taken in the order the manifest lists them, the first of each pair the prompt side, into
records `{source_line, target_line, source_file, target_file}`; both files of a pair must have as many lines.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.json_types import JSONObject
from curation.errors import CurationError

logger = logging.getLogger(__name__)

STREAMING_BYTES = 512 * 1024 * 1024
CSV_FIELD_LIMIT = 256 * 1024 * 1024  # bytes in one CSV field; a whole file is read into memory anyway
INVALID_UTF8 = "__invalid_utf8__"
INVALID_JSON = "__invalid_json__"
_MARKERS = {INVALID_UTF8: "invalid_utf8", INVALID_JSON: "invalid_json"}  # marker key -> the drop's reason
TABLE_SUFFIXES = frozenset({".json", ".jsonl", ".ndjson", ".csv", ".tsv", ".parquet", ".arrow", ".traj"})
_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


class SourceLoadError(CurationError, RuntimeError):
    """A source could not be loaded at all (missing files, offline without a mirror, Hub error)."""


@dataclass(frozen=True)
class LoadPlan:
    """Where a source's rows come from: local files (mirror or Hub-like folder) or a Hub repo."""

    files: tuple[Path, ...] = ()
    hub_path: str | None = None
    config: str | None = None
    split: str = "train"
    revision: str | None = None
    streaming: bool = False
    data_files: tuple[str, ...] = ()


def _suffix(path: Path) -> str:
    name = path.name.lower()
    for suffix in (".jsonl.gz", ".json.gz", ".csv.gz"):
        if name.endswith(suffix):
            return suffix
    return path.suffix.lower()


def inside(root: Path, name: str) -> bool:
    """Whether the path `name` names something under `root` (relative, no `..` climbing out, and no link
    leading out once resolved): neither a mirror's index nor a manifest may make datahunt read files elsewhere
    on the machine. The review page's preview (`server/api/preview.py`) keeps its own check."""
    if Path(name).is_absolute():
        return False
    if not Path(os.path.normpath(root / name)).is_relative_to(os.path.normpath(root)):
        return False
    return (Path(root) / name).resolve().is_relative_to(Path(root).resolve())


def plan_load(
    *,
    hub_id: str | None,
    data_files: list[str],
    config: str | None,
    split: str,
    revision: str | None,
    mirror: Path | None,
    offline: bool,
    streaming: bool | None = None,
    hub_root: Path | None = None,
) -> LoadPlan:
    """Return how to load a source: mirror files when present, else the Hub (or `hub_root`/<id> standing in for it)."""
    if data_files and mirror is not None:
        outside = [f for f in data_files if not inside(mirror, f)]
        if outside:
            raise SourceLoadError(f"data files outside the mirror folder {mirror}: {outside}")
        files = tuple((mirror / f) for f in data_files)
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise SourceLoadError(f"mirror files missing: {missing}")
        size = sum(f.stat().st_size for f in files)
        return LoadPlan(files=files, streaming=streaming if streaming is not None else size > STREAMING_BYTES)
    if hub_id is None:
        raise SourceLoadError("no hub id and no mirror files to load")
    if hub_root is not None:
        return LoadPlan(
            hub_path=str(hub_root / hub_id),
            config=config,
            split=split,
            streaming=bool(streaming),
            data_files=tuple(data_files),
        )
    if offline:
        raise SourceLoadError(f"{hub_id} is not in a local mirror and datahunt is offline")
    return LoadPlan(
        hub_path=hub_id,
        config=config,
        split=split,
        revision=revision,
        streaming=bool(streaming),
        data_files=tuple(data_files),
    )


def iter_records(plan: LoadPlan, *, cache_dir: Path, token: str | None = None) -> Iterator[JSONObject]:
    """Yield the source's records in file order (row index = position), raising SourceLoadError on failure."""
    if plan.hub_path is not None:
        yield from _iter_hub(plan, cache_dir=cache_dir, token=token)
        return
    if plan.files and all(is_line_file(f) for f in plan.files):
        yield from read_paired_lines(plan.files)
        return
    if _needs_record_reader(plan.files):
        for path in plan.files:
            yield from read_records(path)
        return
    builder = _BUILDERS.get(_suffix(plan.files[0]).replace(".gz", ""), "json")
    try:
        dataset = _load_table(builder, plan, cache_dir)
    except Exception as exc:  # datasets raises many types (ArrowInvalid, DatasetGenerationError, ...)
        logger.info("datasets could not read %s as one table (%s); reading record by record", plan.files, exc)
        for path in plan.files:
            yield from read_records(path)
        return
    yield from _rows_of(dataset)


def _rows_of(dataset: Any) -> Iterator[JSONObject]:
    """Yield a (streaming or not) dataset's rows, formatted a batch at a time (much faster than row by row).

    Python formatting, not raw Arrow: `datasets` keeps columns of mixed shape as its `Json` feature and
    decodes them only when formatting.
    """
    for batch in dataset.iter(batch_size=1024):
        keys = list(batch)
        for values in zip(*(batch[k] for k in keys), strict=True):
            yield dict(zip(keys, values, strict=True))


def _load_table(builder: str, plan: LoadPlan, cache_dir: Path) -> Any:
    import datasets

    datasets.disable_progress_bars()
    return datasets.load_dataset(
        builder,
        data_files=[str(f) for f in plan.files],
        split="train",
        cache_dir=str(cache_dir),
        streaming=plan.streaming,
    )


def _iter_hub(plan: LoadPlan, *, cache_dir: Path, token: str | None) -> Iterator[JSONObject]:
    import datasets

    datasets.disable_progress_bars()
    try:
        dataset = datasets.load_dataset(
            plan.hub_path,
            name=plan.config,
            split=plan.split,
            revision=plan.revision,
            data_files=list(plan.data_files) or None,
            cache_dir=str(cache_dir),
            streaming=plan.streaming,
            token=token,
        )
    except Exception as exc:  # Hub, network and builder errors all mean this source failed
        raise SourceLoadError(f"could not load {plan.hub_path}: {type(exc).__name__}: {exc}") from exc
    yield from _rows_of(dataset)


def _needs_record_reader(files: tuple[Path, ...]) -> bool:
    """True when a file is an agent trajectory, a single JSON object (not a table), or not valid UTF-8.

    pyarrow does not check UTF-8 while reading, so files under STREAMING_BYTES are checked here (one C pass).
    """
    for path in files:
        if _suffix(path) == ".traj":
            return True
        if path.stat().st_size >= STREAMING_BYTES:
            continue
        data = _open_bytes(path)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return True
        if _suffix(path) == ".json" and data.lstrip()[:1] == b"{" and _single_object(data):
            return True
    return False


def _single_object(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False


def _open_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    if not path.name.endswith(".gz"):
        return data
    try:
        return gzip.decompress(data)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:  # EOFError would reach the CLI as "Aborted."
        raise SourceLoadError(f"{path.name} is not a readable gzip file: {exc}") from None


def _parquet_records(path: Path) -> Iterator[JSONObject]:
    import pyarrow as pa  # `datasets` brings it; imported here so JSON-only work never loads Arrow
    import pyarrow.parquet as pq

    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
            yield from batch.to_pylist()
    except (pa.ArrowException, OSError) as exc:
        raise SourceLoadError(f"{path.name} is not a readable Parquet file: {exc}") from None


def read_records(path: Path) -> Iterator[JSONObject]:
    """Yield the records of one file without `datasets`: a JSON object, a JSON list, JSON Lines, CSV or Parquet."""
    suffix = _suffix(path)
    if suffix == ".parquet":
        yield from _parquet_records(path)
        return
    data = _open_bytes(path)
    if suffix.startswith(".csv"):
        text = data.decode("utf-8", errors="surrogateescape")
        csv.field_size_limit(CSV_FIELD_LIMIT)  # the module's default (128 KiB) is below one long code answer
        try:
            yield from csv.DictReader(io.StringIO(text, newline=""))
        except csv.Error as exc:
            raise SourceLoadError(f"{path.name} is not a readable CSV file: {exc}") from None
        return
    try:
        whole = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        whole = None
    if isinstance(whole, dict):
        yield whole
        return
    if isinstance(whole, list):
        for item in whole:
            yield item if isinstance(item, dict) else {"value": item}
        return
    seen_json = False
    for line_no, raw in enumerate(data.split(b"\n")):  # "\n" only, like core.jsonl
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield {INVALID_UTF8: f"line {line_no + 1}: {exc}"}
            continue
        try:
            item = json.loads(text)
        except json.JSONDecodeError as exc:
            if not seen_json:  # not JSON Lines at all: the file is refused
                raise SourceLoadError(f"{path.name} line {line_no + 1} is not JSON: {exc}") from None
            # One broken line of a JSON Lines file (a bad escape, a record split over two lines) is that row's drop.
            yield {INVALID_JSON: f"{path.name} line {line_no + 1}: {exc}"}
            continue
        seen_json = True
        yield item if isinstance(item, dict) else {"value": item}


def unreadable(record: JSONObject) -> tuple[str, str] | None:
    """(drop reason, detail) when `record` is a marker of a line that could not be read, else None."""
    for key, reason in _MARKERS.items():
        if key in record:
            return reason, str(record[key])
    return None


def is_line_file(path: Path) -> bool:
    """Whether a data file is plain text read line by line (one half of a paired line source): no table suffix."""
    return _suffix(path).removesuffix(".gz") not in TABLE_SUFFIXES


def _text_lines(path: Path) -> list[bytes]:
    data = _open_bytes(path)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":  # the newline ending the last line opens no further line
        lines.pop()
    return [line.removesuffix(b"\r") for line in lines]


def read_paired_lines(files: tuple[Path, ...] | list[Path]) -> Iterator[JSONObject]:
    """Yield `{source_line, target_line, source_file, target_file}` for each line pair of line-aligned files,
    taken two by two (source, target); SourceLoadError for an odd count or a pair whose line counts differ."""
    if not files or len(files) % 2:
        raise SourceLoadError(f"paired line files come two by two (source, target); got {[f.name for f in files]}")
    for source, target in zip(files[0::2], files[1::2], strict=True):
        left, right = _text_lines(source), _text_lines(target)
        if len(left) != len(right):
            raise SourceLoadError(f"paired line files differ in length: {source.name} has {len(left)} lines, "
                                  f"{target.name} {len(right)}")
        for line_no, (a, b) in enumerate(zip(left, right, strict=True)):
            try:
                yield {"source_line": a.decode("utf-8"), "target_line": b.decode("utf-8"),
                       "source_file": source.name, "target_file": target.name}
            except UnicodeDecodeError as exc:
                yield {INVALID_UTF8: f"{source.name}/{target.name} line {line_no + 1}: {exc}"}
