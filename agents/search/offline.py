"""The embedded offline index: a snapshot of real Hub dataset metadata, searched with BM25 fused with embeddings.

The snapshot (`data/hf_datasets_snapshot.jsonl`, shipped as package data) is loaded once per process into an
in-memory FTS5 table. Ids are indexed twice: as written and split into words (`CodeReviewer` → `code
reviewer`), so spaced queries find glued ids. Columns are weighted: id words and tags/task categories above
the curated-list section names, above free description text. Queries are split the same way and every term
is quoted (user text never reaches FTS5 syntax); each term is scored with BM25, weighted by its repeats in
the query, and documents covering more of the terms get a bonus, so "code review" prefers review datasets
over anything that merely mentions code.

Hybrid retrieval: each record also has a shipped all-MiniLM-L6-v2 embedding (`agents/search/vectors.py`);
the query is embedded at run time and the records closest in meaning form a second ranking. The two rankings
are merged (`fuse`): BM25 hits scoring at least a quarter of the best BM25 score keep BM25's order at the top,
and everything after them is ordered by reciprocal rank fusion (score = sum of 1 / (RRF_K + rank) over the
rankings a record is in), so an issue-to-patch set whose text never says "bug fix" can still surface for "bug
fix" without a weak dense ranking displacing a strong keyword match. Without the model
package (or with stale vectors) the index falls back to BM25 alone and `retrieval` says so.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import cast

import numpy as np

from agents.benchmark_rule import benchmark_rule
from agents.search.base import SearchError, SearchHit
from agents.search.embedding import EncoderUnavailableError, SentenceEncoder, default_encoder
from agents.search.snapshot import SnapshotRecord
from agents.search.terms import query_terms_repeated, split_filters, split_terms
from agents.search.vectors import DocumentVectors
from agents.source_repos import media_libraries_of, recipes_using
from core.candidates import BackendName, DatasetMetadata
from core.jsonl import parse_jsonl
from core.types import is_hub_id

logger = logging.getLogger(__name__)

SNAPSHOT_NAME = "hf_datasets_snapshot.jsonl"
# bm25() weights per indexed column, in table order: id_words, tags, sections, description.
COLUMN_WEIGHTS = (6.0, 4.0, 2.0, 1.0)
PREFIX_WEIGHT = 0.5  # a term matching only as a word prefix (`commit` in `commitpack`) counts this much
MIN_PREFIX_LEN = 4
COVERAGE_BONUS = 0.6  # a document matching every query term scores up to 1.6× one matching a single term
RRF_K = 60  # reciprocal rank fusion constant: rank 1 scores 1/61, rank 20 scores 1/80
# BM25 hits scoring at least this share of the query's best BM25 score are strong: they keep BM25's order at the
# top, and the fusion orders only what follows them. Plain fusion let a weak dense ranking of a long keyword query
# push strong BM25 hits out of the top 20; chosen on the dev half (benchmarks/results/index_quality_notes.md).
STRONG_BM25_SHARE = 0.25
DENSE_DEPTH = 50  # how many of the nearest records the dense ranking contributes
DENSE_MIN_SIMILARITY = 0.2  # records less similar than this to the query are not semantic matches at all


class OfflineIndex:
    """Full-text search over a snapshot of Hub dataset metadata; never touches the network."""

    name: BackendName = "offline"

    def __init__(
        self,
        records: Iterable[SnapshotRecord],
        *,
        vectors: DocumentVectors | None = None,
        encoder: SentenceEncoder | Callable[[], SentenceEncoder] | None = None,
    ) -> None:
        """Index `records`; with `vectors` (matching the records) and an `encoder` (or a loader), rank hybrid."""
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute(
            "CREATE VIRTUAL TABLE docs USING fts5(id_words, tags, sections, description, "
            "tokenize = 'porter unicode61 remove_diacritics 2')"
        )
        self._records: list[SnapshotRecord] = []
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
        self._matrix: np.ndarray | None = None
        self._encoder_source = encoder
        self._encoder: SentenceEncoder | None = None
        self._query_vectors: dict[str, np.ndarray] = {}  # query text -> embedding, so repeated queries are free
        self.retrieval = "bm25 (no document embeddings given)"
        if vectors is not None and encoder is not None:
            self._attach(vectors)

    def _attach(self, vectors: DocumentVectors) -> None:
        stale = vectors.mismatches(self._records)
        if stale:
            self.retrieval = f"bm25 (document embeddings are stale for {len(stale)} records, e.g. {stale[0]})"
            logger.warning("offline index: %s; rebuild with python -m agents.search.build_vectors", self.retrieval)
            return
        row = {hub_id.lower(): i for i, hub_id in enumerate(vectors.ids)}
        self._dense_weight = np.array([_benchmark_weight(r) for r in self._records], dtype=np.float32)
        self._matrix = vectors.matrix[[row[r["id"].lower()] for r in self._records]]
        self.retrieval = f"hybrid (BM25 + {vectors.model} embeddings: strong BM25 hits first, then rank fusion)"

    def encoder(self) -> SentenceEncoder | None:
        """Return the query encoder (loaded on first use), or None when semantic search is off."""
        if self._matrix is None or self._encoder_source is None:
            return None
        if self._encoder is None:
            source = self._encoder_source
            try:
                self._encoder = source() if callable(source) and not isinstance(source, SentenceEncoder) else source
            except EncoderUnavailableError as exc:
                self.retrieval = f"bm25 ({exc})"
                logger.warning("offline index: %s", self.retrieval)
                self._matrix = self._encoder_source = None
                return None
        return self._encoder

    @property
    def semantic(self) -> bool:
        """True when queries are ranked hybrid (document embeddings attached and an encoder available)."""
        return self.encoder() is not None

    def vector(self, hub_id: str) -> np.ndarray | None:
        """Return the record's unit embedding, or None when the id is unknown or semantic search is off."""
        index = self._by_id.get(hub_id.strip().lower())
        return None if index is None or self._matrix is None else self._matrix[index]

    @classmethod
    def from_jsonl(cls, path: Path) -> OfflineIndex:
        """Build an index from a JSONL file of Hub records (one JSON object with at least `id` per line)."""
        return cls(_read_jsonl(path.read_text(encoding="utf-8"), str(path)))

    @classmethod
    def default(cls) -> OfflineIndex:
        """Return the index of the shipped snapshot (hybrid when the model is installed), built once per process."""
        return _default_index()

    def __len__(self) -> int:
        return len(self._records)

    def rank(self, query: str, *, limit: int = 20) -> list[tuple[str, float]]:
        """Return up to `limit` `(hub_id, score)` pairs for `query`, best first: hybrid when it can, else BM25.

        Hybrid: the BM25 and embedding rankings merged by `fuse` (strong BM25 hits first, then fusion).
        """
        text = split_filters(query)[0]
        encoder = self.encoder()
        if encoder is None or self._matrix is None or limit <= 0 or not text.strip():
            return self.rank_bm25(query, limit=limit)
        depth = max(limit, DENSE_DEPTH)
        bm25 = self.rank_bm25(query, limit=depth)
        dense = self.rank_dense(self.query_vectors([text])[0], limit=depth)
        return fuse(bm25, dense, limit=limit)

    def query_vectors(self, queries: Sequence[str]) -> list[np.ndarray]:
        """Return the embedding of each query's text (filters stripped), encoding the ones not seen yet in one call.

        The subagent hands all its queries over before searching (`prepare`), so a category costs one batched
        encode instead of one per query; the cache also makes a repeated query free. Empty without an encoder.
        """
        encoder = self.encoder()
        if encoder is None:
            return []
        texts = [split_filters(q)[0] for q in queries]
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._query_vectors))
        if missing:
            encoded = encoder.encode(missing)
            with self._lock:
                self._query_vectors.update(zip(missing, encoded, strict=True))
        with self._lock:
            return [self._query_vectors[t] for t in texts]

    def prepare(self, queries: Sequence[str]) -> None:
        """Embed `queries` ahead of searching them, in one batch (a no-op when semantic search is off)."""
        self.query_vectors(queries)

    def rank_dense(self, query_vector: np.ndarray, *, limit: int = 20) -> list[tuple[str, float]]:
        """Return up to `limit` `(hub_id, cosine)` pairs nearest to `query_vector` (cosine >= the floor)."""
        if self._matrix is None:
            return []
        similarity = (self._matrix @ query_vector.astype(np.float32)) * self._dense_weight
        order = np.argsort(-similarity, kind="stable")[:limit]
        return [
            (self._records[i]["id"], float(similarity[i])) for i in order if similarity[i] >= DENSE_MIN_SIMILARITY
        ]

    def rank_bm25(self, query: str, *, limit: int = 20) -> list[tuple[str, float]]:
        """Return up to `limit` `(hub_id, score)` pairs for `query` by BM25 alone, best first (score > 0).

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
            score *= _benchmark_weight(record)
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

    def record(self, hub_id: str) -> SnapshotRecord | None:
        """Return the raw snapshot record of `hub_id`, or None."""
        index = self._by_id.get(hub_id.strip().lower())
        return None if index is None else self._records[index]

    def records(self) -> list[SnapshotRecord]:
        """Return every record of the index, in snapshot order."""
        return list(self._records)


def fuse(
    bm25: Sequence[tuple[str, float]], dense: Sequence[tuple[str, float]], *, limit: int
) -> list[tuple[str, float]]:
    """Merge a BM25 and a dense ranking (each best first) into up to `limit` `(hub_id, score)` pairs.

    BM25 hits scoring at least `STRONG_BM25_SHARE` of the best BM25 score come first, in BM25's order, with
    scores in (1, 2] (1 + their share of the best). Every other record of either ranking follows by reciprocal
    rank fusion (the sum of 1 / (RRF_K + rank) over the rankings it is in), scaled by RRF_K / 2 into (0, 1).
    So a dense-only hit can only ever add to what BM25 finds strongly, never displace it; where BM25 is weak
    (a short or unusual query) the fusion decides most of the list.
    """
    best = bm25[0][1] if bm25 else 0.0
    strong = {hub_id: 1.0 + score / best for hub_id, score in bm25 if best > 0 and score >= STRONG_BM25_SHARE * best}
    fused: dict[str, float] = {}
    for ranking in (bm25, dense):
        for position, (hub_id, _) in enumerate(ranking, start=1):
            if hub_id not in strong:
                fused[hub_id] = fused.get(hub_id, 0.0) + 1.0 / (RRF_K + position)
    ranked = [*strong.items(), *((hub_id, score * RRF_K / 2) for hub_id, score in fused.items())]
    ranked.sort(key=lambda pair: (-pair[1], pair[0].lower()))
    return [(hub_id, round(score, 4)) for hub_id, score in ranked[:limit]]


def record_metadata(record: SnapshotRecord) -> DatasetMetadata:
    """Return the DatasetMetadata a snapshot record states (unknown fields stay None)."""
    languages = record.get("language") or []
    if isinstance(languages, str):
        languages = [languages]
    sources = [str(s) for s in record.get("source") or []]
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
        sections=[str(s) for s in record.get("source_sections") or []],
        draft_recipes=recipes_using(sources),
        media_libraries=media_libraries_of(sources),
    )


def _columns(hub_id: str, record: SnapshotRecord) -> tuple[str, str, str, str]:
    owner, name = hub_id.split("/", 1)
    id_words = " ".join([name, *split_terms(name), owner])
    tag_text = " ".join(
        split_terms(" ".join([*(record.get("tags") or []), *(record.get("task_categories") or [])]))
    )
    sections = " ".join(record.get("source_sections") or [])
    return id_words, tag_text, sections, str(record.get("description") or "")


def _benchmark_weight(record: SnapshotRecord) -> float:
    """Return the share of its score the record keeps by the benchmark rule (`agents/benchmark_rule.py`): its
    `search_penalty` when the record is listed only as an evaluation benchmark, else 1."""
    return benchmark_rule().index_weight(
        str(record.get("id") or ""), list(record.get("tags") or []), list(record.get("source_sections") or [])
    )


def _read_jsonl(text: str, where: str) -> list[SnapshotRecord]:
    records: list[SnapshotRecord] = []
    for number, record in parse_jsonl(text, where):
        if not isinstance(record, dict) or "id" not in record:
            raise ValueError(f"{where}:{number}: expected an object with an 'id'")
        records.append(cast(SnapshotRecord, record))  # the snapshot's own shape: every key but `id` optional
    return records


@lru_cache(maxsize=1)
def _default_index() -> OfflineIndex:
    text = resources.files("agents.search").joinpath("data", SNAPSHOT_NAME).read_text(encoding="utf-8")
    return OfflineIndex(_read_jsonl(text, SNAPSHOT_NAME), vectors=DocumentVectors.shipped(), encoder=default_encoder)
