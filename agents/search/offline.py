"""The embedded offline index: a snapshot of real Hub dataset metadata searched with SQLite FTS5 and BM25.

The snapshot (`data/hf_datasets_snapshot.jsonl`, shipped as package data) is loaded once per process into an
in-memory FTS5 table. Ids are indexed twice: as written and split into words (`CodeReviewer` → `code
reviewer`), so spaced queries find glued ids. Columns are weighted: id words and tags/task categories above
the curated-list section names, above free description text. Queries are split the same way and every term
is quoted (user text never reaches FTS5 syntax); each term is scored with BM25, weighted by its repeats in
the query, and documents covering more of the terms get a bonus, so "code review" prefers review datasets
over anything that merely mentions code.
"""

from __future__ import annotations

import logging
import math
import re
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from agents.models import BackendName, DatasetMetadata, SearchHit
from agents.search.base import SearchError
from agents.search.terms import query_terms_repeated, split_filters, split_terms
from core.jsonl import parse_jsonl
from core.types import is_hub_id

logger = logging.getLogger(__name__)

SNAPSHOT_NAME = "hf_datasets_snapshot.jsonl"
# bm25() weights per indexed column, in table order: id_words, tags, sections, description.
COLUMN_WEIGHTS = (6.0, 4.0, 2.0, 1.0)
PREFIX_WEIGHT = 0.5  # a term matching only as a word prefix (`commit` in `commitpack`) counts this much
MIN_PREFIX_LEN = 4
COVERAGE_BONUS = 0.6  # a document matching every query term scores up to 1.6× one matching a single term
EVAL_ONLY_PENALTY = 0.7  # records only ever listed as evaluation benchmarks are rarely training data
_BENCHMARK_SECTION = re.compile(r"lm-eval task|evaluation datasets|benchmarks?\b", re.IGNORECASE)


class OfflineIndex:
    """Full-text search over a snapshot of Hub dataset metadata; never touches the network."""

    name: BackendName = "offline"

    def __init__(self, records: Iterable[dict[str, Any]]) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute(
            "CREATE VIRTUAL TABLE docs USING fts5(id_words, tags, sections, description, "
            "tokenize = 'porter unicode61 remove_diacritics 2')"
        )
        self._records: list[dict[str, Any]] = []
        self._by_id: dict[str, int] = {}
        skipped = 0
        for record in records:
            hub_id = str(record.get("id") or "").strip()
            if not is_hub_id(hub_id) or hub_id.lower() in self._by_id:
                skipped += 1
                continue
            self._by_id[hub_id.lower()] = len(self._records)
            self._records.append(record)
            self._db.execute(
                "INSERT INTO docs(rowid, id_words, tags, sections, description) VALUES (?, ?, ?, ?, ?)",
                (len(self._records) - 1, *_columns(hub_id, record)),
            )
        if skipped:
            logger.warning("offline index skipped %d records with a malformed or repeated id", skipped)

    @classmethod
    def from_jsonl(cls, path: Path) -> OfflineIndex:
        """Build an index from a JSONL file of Hub records (one JSON object with at least `id` per line)."""
        return cls(_read_jsonl(path.read_text(encoding="utf-8"), str(path)))

    @classmethod
    def default(cls) -> OfflineIndex:
        """Return the index of the shipped snapshot, built once per process."""
        return _default_index()

    def __len__(self) -> int:
        return len(self._records)

    def rank(self, query: str, *, limit: int = 20) -> list[tuple[str, float]]:
        """Return up to `limit` `(hub_id, score)` pairs for `query`, best first (score > 0).

        Each distinct query term is scored with BM25 on its own and weighted by how often the query repeats
        it (a term in several seed queries matters more); documents covering more of the query's terms get a
        bonus, and records that are only ever listed as evaluation benchmarks are discounted.
        """
        counts: dict[str, int] = {}
        for term in query_terms_repeated(split_filters(query)[0]):
            counts[term] = counts.get(term, 0) + 1
        if not counts or limit <= 0:
            return []
        weights = ", ".join(str(w) for w in COLUMN_WEIGHTS)
        sql = f"SELECT rowid, -bm25(docs, {weights}) FROM docs WHERE docs MATCH ?"
        totals: dict[int, float] = {}
        matched: dict[int, int] = {}
        with self._lock:
            for term, count in counts.items():
                quoted = '"' + term.replace('"', '""') + '"'
                try:
                    per_doc = dict(self._db.execute(sql, (quoted,)).fetchall())
                    if len(term) >= MIN_PREFIX_LEN:  # `commit` also finds the glued `commitpack`
                        for rowid, score in self._db.execute(sql, (quoted + "*",)).fetchall():
                            per_doc[rowid] = max(per_doc.get(rowid, 0.0), PREFIX_WEIGHT * score)
                except sqlite3.Error as exc:  # quoting makes this unreachable for text input; keep it clear
                    raise SearchError(f"offline index could not run query {query!r}: {exc}") from exc
                weight = 1.0 + math.log(count)
                for rowid, score in per_doc.items():
                    totals[rowid] = totals.get(rowid, 0.0) + weight * score
                    matched[rowid] = matched.get(rowid, 0) + 1
        scored: list[tuple[str, float]] = []
        for rowid, score in totals.items():
            record = self._records[rowid]
            score *= 1.0 + COVERAGE_BONUS * (matched[rowid] - 1) / max(1, len(counts) - 1)
            if _benchmark_only(record):
                score *= EVAL_ONLY_PENALTY
            scored.append((record["id"], float(score)))
        scored.sort(key=lambda pair: (-pair[1], pair[0].lower()))
        return scored[:limit]

    async def search(self, query: str, *, limit: int = 20) -> list[SearchHit]:
        """Return up to `limit` hits for `query` from the snapshot, best first."""
        hits: list[SearchHit] = []
        for rank, (hub_id, score) in enumerate(self.rank(query, limit=limit), start=1):
            record = self._records[self._by_id[hub_id.lower()]]
            hits.append(
                SearchHit(
                    hub_id=hub_id,
                    title=hub_id.split("/", 1)[1],
                    description=str(record.get("description") or ""),
                    metadata=record_metadata(record),
                    backend=self.name,
                    query=query,
                    rank=rank,
                    score=round(score, 4),
                    url=f"https://huggingface.co/datasets/{hub_id}",
                )
            )
        return hits

    async def lookup(self, hub_id: str) -> DatasetMetadata | None:
        """Return the snapshot's metadata for `hub_id` (case-insensitive), or None when it is not in it."""
        index = self._by_id.get(hub_id.strip().lower())
        return None if index is None else record_metadata(self._records[index])

    def record(self, hub_id: str) -> dict[str, Any] | None:
        """Return the raw snapshot record of `hub_id`, or None."""
        index = self._by_id.get(hub_id.strip().lower())
        return None if index is None else self._records[index]

    def records(self) -> list[dict[str, Any]]:
        """Return every record of the index, in snapshot order."""
        return list(self._records)


def record_metadata(record: dict[str, Any]) -> DatasetMetadata:
    """Return the DatasetMetadata a snapshot record states (unknown fields stay None)."""
    languages = record.get("language") or []
    if isinstance(languages, str):
        languages = [languages]
    return DatasetMetadata(
        license=record.get("license") or None,
        num_rows=record.get("num_rows"),
        size_category=record.get("size_category") or None,
        size_stated=record.get("size_stated") or None,
        tags=list(record.get("tags") or []),
        task_categories=list(record.get("task_categories") or []),
        languages=[str(lang) for lang in languages],
        downloads=record.get("downloads"),
        likes=record.get("likes"),
    )


def _columns(hub_id: str, record: dict[str, Any]) -> tuple[str, str, str, str]:
    owner, name = hub_id.split("/", 1)
    id_words = " ".join([name, *split_terms(name), owner])
    tag_text = " ".join(
        split_terms(" ".join([*(record.get("tags") or []), *(record.get("task_categories") or [])]))
    )
    sections = " ".join(record.get("source_sections") or [])
    return id_words, tag_text, sections, str(record.get("description") or "")


def _benchmark_only(record: dict[str, Any]) -> bool:
    """True when every curated-list section naming the record is an evaluation/benchmark list, or it is tagged so."""
    if "benchmark" in (t.lower() for t in record.get("tags") or []):
        return True
    sections: Sequence[str] = record.get("source_sections") or []
    return bool(sections) and all(_BENCHMARK_SECTION.search(s) for s in sections)


def _read_jsonl(text: str, where: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for number, record in parse_jsonl(text, where):
        if not isinstance(record, dict) or "id" not in record:
            raise ValueError(f"{where}:{number}: expected an object with an 'id'")
        records.append(record)
    return records


@lru_cache(maxsize=1)
def _default_index() -> OfflineIndex:
    text = resources.files("agents.search").joinpath("data", SNAPSHOT_NAME).read_text(encoding="utf-8")
    return OfflineIndex(_read_jsonl(text, SNAPSHOT_NAME))
