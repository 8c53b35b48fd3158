"""The shape of one record of the offline index's snapshot (`data/hf_datasets_snapshot.jsonl`).

A record is what the snapshot states about one Hub dataset, as the curated lists and the Hub said it: every key
but `id` may be missing or null. The offline index ranks these records, the document vectors embed them and
`record_metadata` turns one into the candidates' `DatasetMetadata`.
"""

from __future__ import annotations

from typing import Required, TypedDict


class SnapshotRecord(TypedDict, total=False):
    """One Hub dataset of the snapshot: its id, text, tags, size and the curated lists that name it."""

    id: Required[str]
    description: str | None
    tags: list[str]
    task_categories: list[str] | None
    license: str | None
    language: list[str] | str | None
    size_category: str | None  # e.g. "10K<n<100K"
    num_rows: int | None
    size_stated: str | None  # free text such as "558k" from a curated list
    downloads: int | None
    likes: int | None
    source_sections: list[str]  # the curated-list sections naming the dataset
    source: list[str]  # the curated lists and repositories naming it (`agents/source_repos.py`)
