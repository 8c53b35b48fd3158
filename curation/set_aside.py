"""The records of the rows a curation run sets aside, one shape per side file, alike in both engines.

`dropped/<source>.jsonl` holds each row a step dropped (`DroppedRow`), `dropped/duplicates.jsonl` each duplicate
with the row it duplicates (`DuplicateRecord`), `decontaminated.jsonl` each row that matched an eval item
(`ContaminatedRecord`).
"""

from __future__ import annotations

from typing import Literal, TypedDict

from core.samples import Message


class DroppedRow(TypedDict):
    """A row a step left out, with the step's reason."""

    id: str
    source: str
    row: int
    reason: str
    detail: str
    messages: list[Message]


class DuplicateRecord(TypedDict):
    """A row left out as a duplicate of the row kept in its place."""

    id: str
    kept_id: str
    kind: Literal["exact", "near"]
    similarity: float  # 1.0 for an exact duplicate, the Jaccard estimate for a near one


class ContaminatedRecord(TypedDict):
    """A row left out because its prompt matched an evaluation item (both texts cut to 500 characters)."""

    id: str
    source: str
    row: int
    eval_item: str
    eval_text: str
    prompt: str
