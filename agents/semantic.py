"""Semantic similarity of candidates to their category: embeddings of the category's anchors against each dataset.

A category's anchors are its description and its exemplar descriptions (`prompts/categories/<name>.md`). A
candidate's closeness to a category is its best cosine to any of the category's anchors (a dataset only has
to look like one kind of good dataset, not like all of them). The similarity the scorer gets is contrastive:
that closeness, minus `CONTRAST` times how much closer the candidate is to another category's anchors, so a
code-review set that mentions code does not read as code explanation. Candidates the offline index holds use
its shipped vectors; others (Hub and web hits) are embedded from the same fields at run time. The
deterministic scorer adds this similarity to its keyword evidence. Without the embedding model every
similarity is None and scoring is keywords alone.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from functools import lru_cache

import numpy as np

from agents.categories import CategoryDefinition, load_category, semantic_anchors
from agents.search.embedding import SentenceEncoder
from agents.search.offline import OfflineIndex
from agents.search.vectors import document_text
from core.candidates import Candidate
from core.types import Category

logger = logging.getLogger(__name__)

CONTRAST = 1.0  # how much being closer to another category counts against this one


class CategorySimilarity:
    """Cosine of each candidate to the nearest anchor of a category, from an encoder and the index's vectors."""

    def __init__(self, encoder: SentenceEncoder | None, index: OfflineIndex | None = None) -> None:
        self._encoder = encoder
        self._index = index
        self._anchors: dict[str, Future[np.ndarray]] = {}
        self._lock = threading.Lock()

    @classmethod
    def default(cls) -> CategorySimilarity:
        """Return the process-wide similarity over the shipped index and its encoder (off without the model)."""
        return _default_similarity()

    @property
    def enabled(self) -> bool:
        """True when similarities are computed (the embedding model is available)."""
        return self._encoder is not None

    def anchors(self, definition: CategoryDefinition) -> np.ndarray | None:
        """Return the unit embeddings of the category's anchors, computed once per anchor text set."""
        if self._encoder is None:
            return None
        texts = semantic_anchors(definition)
        key = "\n".join(texts)
        with self._lock:  # the first caller of a key encodes it; others wait for that one result
            pending, mine = self._anchors.get(key), False
            if pending is None:
                pending, mine = self._anchors.setdefault(key, Future()), True
        if mine:  # encoded outside the lock, so categories embed their anchors side by side
            try:
                pending.set_result(self._encoder.encode(texts))
            except BaseException as exc:
                with self._lock:
                    del self._anchors[key]  # not cached: the next caller tries again
                pending.set_exception(exc)
                raise
        return pending.result()

    def similarities(self, definition: CategoryDefinition, candidates: list[Candidate]) -> dict[str, float]:
        """Return `{hub_id: contrastive similarity}` for every candidate (see the module text); empty when off."""
        anchors = self.anchors(definition)
        if anchors is None or self._encoder is None or not candidates:
            return {}
        others = [self.anchors(load_category(c)) for c in Category if c is not definition.category]
        vectors: list[np.ndarray | None] = [
            self._index.vector(c.hub_id) if self._index is not None else None for c in candidates
        ]
        missing = [i for i, v in enumerate(vectors) if v is None]
        if missing:
            encoded = self._encoder.encode([_candidate_text(candidates[i]) for i in missing])
            for row, i in enumerate(missing):
                vectors[i] = encoded[row]
        matrix = np.stack([v for v in vectors if v is not None])
        own = (matrix @ anchors.T).max(axis=1)
        nearest_other = np.max([(matrix @ a.T).max(axis=1) for a in others if a is not None], axis=0)
        contrastive = own - CONTRAST * np.maximum(0.0, nearest_other - own)
        return {c.hub_id: round(float(s), 4) for c, s in zip(candidates, contrastive, strict=True)}


@lru_cache(maxsize=1)
def _default_similarity() -> CategorySimilarity:
    index = OfflineIndex.default()
    return CategorySimilarity(index.encoder(), index)


def _candidate_text(candidate: Candidate) -> str:
    """Return the text a candidate is embedded from: the same fields, in the same shape, as an index record."""
    meta = candidate.metadata
    return document_text(
        {"id": candidate.hub_id, "description": candidate.description, "tags": meta.tags,
         "task_categories": meta.task_categories}
    )
