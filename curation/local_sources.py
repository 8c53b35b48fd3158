"""Local sources: the records of a target-written or traffic source, read from its `path` and, for traffic, scrubbed.

Both engines read every source through `source_records` and `prepare_record`: a dataset goes through
`curation.loading` as before; a local source's file (or a folder's JSONL/JSON/Parquet files, in name order)
is read by the small record reader only — never by `datasets`, whose Arrow cache would keep the raw rows on
disk — and a traffic record is scrubbed of PII (`curation.pii`) before any adapter, cleaning step, drop file
or cache sees it. The path is relative to the manifest's folder and must stay inside it, links resolved.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from core.json_types import JSONObject
from curation.loading import LoadPlan, SourceLoadError, inside, iter_records, read_records
from curation.manifest import Source
from curation.pii import scrub_record

LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet", ".jsonl.gz", ".json.gz")


def local_files(root: Path | None, path: str) -> list[Path]:
    """Return the files of a local source: `root/path` itself, or the data files of that folder in name order.

    Raises SourceLoadError when there is no manifest folder, the path leaves it, or nothing is there to read.
    """
    if root is None:
        raise SourceLoadError(f"local source {path}: no manifest folder to resolve it in (curate names its manifest's)")
    if not inside(root, path):
        raise SourceLoadError(f"local source {path} lies outside the manifest's folder {root}")
    target = root / path
    if target.is_file():
        return [target]
    if target.is_dir():
        found = sorted(f for f in target.iterdir() if f.is_file() and f.name.lower().endswith(LOCAL_SUFFIXES)
                       and inside(root, str(f.relative_to(root))))
        if found:
            return found
        raise SourceLoadError(f"local source folder {target} holds no {', '.join(LOCAL_SUFFIXES)} files")
    raise SourceLoadError(f"local source {target} does not exist")


def source_records(source: Source, plan: LoadPlan, *, cache_dir: Path, token: str | None) -> Iterator[JSONObject]:
    """Yield a source's raw records in order: a dataset's through `iter_records`, a local file's record by record."""
    if not source.local:
        yield from iter_records(plan, cache_dir=cache_dir, token=token)
        return
    for path in plan.files:
        yield from read_records(path)


def prepare_record(source: Source, record: JSONObject) -> tuple[JSONObject, Counter[str]]:
    """Return the record as the adapters may see it (a traffic record scrubbed) and the scrubs by kind."""
    counts: Counter[str] = Counter()
    if source.kind != "traffic":
        return record, counts
    return scrub_record(record, counts), counts
