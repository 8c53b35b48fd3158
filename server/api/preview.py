"""Sample preview of a catalog entry: the first rows of its files in a local mirror, never a network call.

A mirror is a folder with a `MIRROR.json` list of `{id, config?, files: [...]}` whose file paths are
relative to the folder (the layout `datahunt manifest from-mirror` reads). JSON, JSONL (also gzipped) and
CSV files are read with the standard library, only as far as the rows shown. Without a mirror copy the
preview says so instead of going to the Hub. A mirror is the user's folder, not ours: an index or a file that
cannot be read (nested past the parser's depth, a cut or corrupt gzip, NUL bytes, `files` that is no list of
names) is logged and skipped, and the page shows the next readable file or no preview, never an error.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import zlib
from itertools import islice
from pathlib import Path
from typing import Any

from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing.TypedDict it cannot)

from core.json_types import JSONObject
from core.jsonl import iter_jsonl

logger = logging.getLogger(__name__)

PREVIEW_ROWS = 5
MAX_VALUE_CHARS = 400
MAX_JSON_BYTES = 8 * 1024 * 1024  # whole-file JSON is parsed only when small
MAX_CLIP_DEPTH = 8  # a preview cell deeper than this is shown as "…"
# What a hostile or damaged file can raise while its first rows are read.
# RuntimeError: Python 3.11's Path.resolve() on a symbolic link loop (a link to itself) raises it, not OSError.
_UNREADABLE = (OSError, ValueError, csv.Error, EOFError, RecursionError, zlib.error, RuntimeError)


def _clip(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return value if len(value) <= MAX_VALUE_CHARS else value[:MAX_VALUE_CHARS] + "…"
    if isinstance(value, dict | list) and depth >= MAX_CLIP_DEPTH:
        return "…"
    if isinstance(value, dict):
        return {str(k): _clip(v, depth + 1) for k, v in list(value.items())[:20]}
    if isinstance(value, list):
        return [_clip(v, depth + 1) for v in value[:10]]
    return value


def _open_text(path: Path) -> io.TextIOBase:
    if path.name.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - closed by the caller


def _read_rows(path: Path, limit: int) -> list[Any]:
    name = path.name.removesuffix(".gz")
    if name.endswith(".jsonl"):
        return [value for _, value in islice(iter_jsonl(path, errors="replace"), limit)]
    if name.endswith(".csv"):
        with _open_text(path) as handle:
            return [row for _, row in zip(range(limit), csv.DictReader(handle), strict=False)]
    if name.endswith((".json", ".traj")):
        if path.stat().st_size > MAX_JSON_BYTES:
            return []
        with _open_text(path) as handle:
            data = json.load(handle)
        if isinstance(data, list):
            return data[:limit]
        if isinstance(data, dict):
            for value in data.values():  # e.g. {"data": [...]} or a trajectory's {"trajectory": [...]}
                if isinstance(value, list) and value:
                    return value[:limit]
            return [data]
    return []


def _mirror_entries(mirror: Path) -> list[JSONObject]:
    index = mirror / "MIRROR.json"
    if not index.is_file():
        return []
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not JSON, or not UTF-8
        logger.warning("unreadable mirror index %s: %s", index, exc)
        return []
    return [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []


def mirrored_ids(mirror: Path | None) -> set[str]:
    """Return the Hub ids a local mirror holds (empty without a mirror or with an unreadable index)."""
    if mirror is None:
        return set()
    try:
        entries = _mirror_entries(mirror.resolve())
    except _UNREADABLE as exc:  # the mirror folder itself is a link loop
        logger.warning("unreadable mirror %s: %s", mirror, exc)
        return set()
    return {hub_id for e in entries if isinstance(hub_id := e.get("id"), str) and hub_id}


class SamplePreview(TypedDict):
    """A few rows of a dataset from the local mirror, or why there are none."""

    available: bool
    source: str | None  # `mirror:<file>` the rows came from
    config: str | None
    rows: list[Any]  # the dataset's own rows, clipped (long strings cut, deep values elided)
    message: str | None  # why there is no preview


def sample_preview(hub_id: str, mirror: Path | None, *, limit: int = PREVIEW_ROWS) -> SamplePreview:
    """Return `{available, source, config, rows, message}` for `hub_id` from the local mirror."""
    unavailable: SamplePreview = {"available": False, "source": None, "config": None, "rows": [],
                   "message": "no preview available offline: no local copy of this dataset"}
    if mirror is None:
        return unavailable
    try:
        root = mirror.resolve()
    except _UNREADABLE as exc:  # the mirror folder itself is a link loop
        logger.warning("unreadable mirror %s: %s", mirror, exc)
        return unavailable
    for entry in _mirror_entries(root):
        if entry.get("id") != hub_id:
            continue
        files = entry.get("files")
        for rel in files if isinstance(files, list) else []:
            if not isinstance(rel, str) or "\x00" in rel:
                continue
            try:
                path = (root / rel).resolve()
                if not path.is_relative_to(root) or not path.is_file():
                    continue
                rows = [_clip(r) for r in _read_rows(path, limit)]
            except _UNREADABLE as exc:
                logger.warning("preview of %s in %s failed: %s", rel, root, exc)
                continue
            if rows:
                config = entry.get("config")
                return {"available": True, "source": f"mirror:{rel}",
                        "config": config if isinstance(config, str) else None, "rows": rows, "message": None}
    return unavailable
