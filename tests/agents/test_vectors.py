"""The shipped document embeddings match the offline index; stale vectors switch the index to BM25 alone."""

from __future__ import annotations

import numpy as np
import pytest

from agents.search.embedding import default_encoder
from agents.search.offline import OfflineIndex
from agents.search.vectors import DocumentVectors, document_text, text_digest


@pytest.fixture(scope="module")
def shipped() -> DocumentVectors:
    vectors = DocumentVectors.shipped()
    assert vectors is not None, "agents/search/data/hf_datasets_vectors.npz is missing"
    return vectors


def test_shipped_vectors_cover_exactly_the_index_records_as_they_are_now(shipped: DocumentVectors) -> None:
    records = OfflineIndex.default().records()
    assert shipped.mismatches(records) == [], "snapshot changed: run python -m agents.search.build_vectors"
    assert len(shipped.ids) == len(records) == 917
    assert shipped.matrix.shape == (917, 384)
    assert np.allclose(np.linalg.norm(shipped.matrix, axis=1), 1.0, atol=2e-3)


def test_shipped_vectors_are_the_encoder_output_of_each_document_text(shipped: DocumentVectors) -> None:
    records = OfflineIndex.default().records()
    sample = [records[i] for i in range(0, len(records), 97)]  # ten records spread over the snapshot
    fresh = default_encoder().encode([document_text(r) for r in sample])
    stored = np.stack([shipped.matrix[shipped.ids.index(r["id"])] for r in sample])
    assert (fresh * stored).sum(axis=1).min() > 0.999  # float16 storage keeps the direction


def test_the_default_index_ranks_hybrid() -> None:
    assert OfflineIndex.default().retrieval.startswith("hybrid")


def test_a_changed_record_makes_the_vectors_stale_and_the_index_falls_back_to_bm25(shipped: DocumentVectors) -> None:
    records = [dict(r) for r in OfflineIndex.default().records()]
    records[0]["description"] = "something else entirely"
    index = OfflineIndex(records, vectors=shipped, encoder=default_encoder)
    assert index.retrieval.startswith("bm25 (document embeddings are stale for 1 records")
    assert index.rank("code review") == index.rank_bm25("code review")
    assert text_digest(document_text(records[0])) not in shipped.digests
