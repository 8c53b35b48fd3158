"""The offline index's document embeddings: what text each record is embedded from, and the shipped file.

Every snapshot record is embedded once, by `python -m agents.search.build_vectors` (about half a minute on two
cores), from `document_text(record)`: its id split into words, description, tags, task categories and the
curated-list sections naming it. The result ships as package data (`data/hf_datasets_vectors.npz`: ids, the
SHA-256 of each embedded text, float16 unit vectors), so a campaign only embeds its queries. A test rebuilds
the texts from the snapshot and fails when an id or a digest no longer matches, i.e. when the snapshot changed
and the file was not rebuilt.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from agents.search.snapshot import SnapshotRecord
from agents.search.terms import split_terms

logger = logging.getLogger(__name__)

VECTORS_NAME = "hf_datasets_vectors.npz"


def document_text(record: SnapshotRecord) -> str:
    """Return the text a snapshot record is embedded from (id words first: they carry most of the meaning)."""
    hub_id = str(record.get("id") or "")
    owner, _, name = hub_id.partition("/")
    parts = [" ".join(split_terms(name)) + f" ({owner})"]
    if record.get("description"):
        parts.append(str(record["description"]))
    tags = [*(record.get("tags") or []), *(record.get("task_categories") or [])]
    if tags:
        parts.append("Tags: " + ", ".join(str(t) for t in tags))
    if record.get("source_sections"):
        parts.append("Listed under: " + "; ".join(str(s) for s in record["source_sections"]))
    return ". ".join(parts)


def text_digest(text: str) -> str:
    """Return the SHA-256 hex digest of `text` (UTF-8), as the vectors file stores it per record."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class DocumentVectors:
    """Unit-length embeddings of the index's records, with the id and text digest each was made from."""

    ids: list[str]
    digests: list[str]
    matrix: np.ndarray  # (len(ids), dim) float32, rows unit length
    model: str

    def save(self, path: Path) -> None:
        """Write the vectors as a compressed `.npz` (float16 rows; no pickled objects)."""
        np.savez_compressed(
            path,
            ids=np.array(self.ids, dtype=np.str_),
            digests=np.array(self.digests, dtype=np.str_),
            vectors=self.matrix.astype(np.float16),
            model=np.array(self.model, dtype=np.str_),
        )

    @classmethod
    def load(cls, path: Path | Any) -> DocumentVectors:
        """Read vectors written by `save` (a path or a package-resource file)."""
        with path.open("rb") as handle, np.load(handle, allow_pickle=False) as data:
            matrix = data["vectors"].astype(np.float32)
            return cls(
                ids=[str(i) for i in data["ids"]],
                digests=[str(d) for d in data["digests"]],
                matrix=matrix,
                model=str(data["model"]),
            )

    @classmethod
    def shipped(cls) -> DocumentVectors | None:
        """Return the vectors shipped with the package, or None when the file is missing."""
        resource = resources.files("agents.search").joinpath("data", VECTORS_NAME)
        if not resource.is_file():
            logger.warning("no shipped document vectors (%s); semantic search is off", VECTORS_NAME)
            return None
        return cls.load(resource)

    def mismatches(self, records: list[SnapshotRecord]) -> list[str]:
        """Return the ids whose record is missing here or whose text changed since the vectors were built."""
        built = dict(zip(self.ids, self.digests, strict=True))
        wrong = [str(r["id"]) for r in records if built.get(str(r["id"])) != text_digest(document_text(r))]
        present = {str(r["id"]) for r in records}
        return wrong + [i for i in self.ids if i not in present]
