"""The counts the engine's tasks hand on: a staged shard's meta, a decontaminated shard's rows, a source's totals.

A stage task writes each shard's `ShardMeta` (also as `meta/<shard>.json`), a decontaminate task its
`DeconCounts`; the finishing step sums a source's shards into `SourceCounts`, from which `report.json` is built.
"""

from __future__ import annotations

from typing import TypedDict


class ShardMeta(TypedDict):
    """What staging one shard did: rows read and kept, drops and scrubbed values by reason, the format found."""

    rows_in: int  # the shard's own rows among those read
    read: int  # rows of the source read so far (every shard reads the whole source)
    drops: dict[str, int]  # reason -> rows (a Counter while the shard runs)
    format: str | None
    error: str | None
    failed_row: int | None  # rows read when the shard failed
    kept: int
    scrubbed: dict[str, int]  # PII kind -> values replaced (a Counter while the shard runs)


class DeconCounts(TypedDict):
    """What decontaminating one shard found: the rows that matched an eval item."""

    contaminated: list[int]


class SourceCounts(TypedDict):
    """One source's totals over its shards, in the shape `report.json`'s per-source report is built from."""

    rows_in: int
    drops: dict[str, int]
    format: str | None
    error: str | None
    kept: int
    duplicates: int
    decontaminated: int
    selected: int
    scrubbed: dict[str, int]
