"""Rebuild the offline index's shipped document embeddings: `python -m agents.search.build_vectors`.

Embeds `document_text` of every record of the shipped snapshot with all-MiniLM-L6-v2 and writes
`agents/search/data/hf_datasets_vectors.npz`. Run it whenever the snapshot changes; a test fails until then.
"""

from __future__ import annotations

import logging
import time
from importlib import resources
from pathlib import Path

from agents.search.embedding import MODEL_NAME, default_encoder
from agents.search.offline import SNAPSHOT_NAME, OfflineIndex
from agents.search.snapshot import SnapshotRecord
from agents.search.vectors import VECTORS_NAME, DocumentVectors, document_text, text_digest

logger = logging.getLogger(__name__)


def build_vectors(records: list[SnapshotRecord]) -> DocumentVectors:
    """Return the embeddings of `records` (one unit row each, in record order)."""
    texts = [document_text(r) for r in records]
    matrix = default_encoder().encode(texts)
    return DocumentVectors(
        ids=[str(r["id"]) for r in records], digests=[text_digest(t) for t in texts], matrix=matrix, model=MODEL_NAME
    )


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    data = Path(str(resources.files("agents.search").joinpath("data")))
    records = OfflineIndex.from_jsonl(data / SNAPSHOT_NAME).records()  # the records the index keeps
    started = time.monotonic()
    vectors = build_vectors(records)
    vectors.save(data / VECTORS_NAME)
    logger.info("embedded %d records in %.1f s -> %s", len(records), time.monotonic() - started, data / VECTORS_NAME)


if __name__ == "__main__":
    main()
