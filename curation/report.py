"""The curation report (`report.json`) as a typed model: what every engine writes and the CLI and summary read.

Both the in-process run (`curation.pipeline`) and the datatrove engine (`curation.engine.report`) build a
`CurationReport`; it is written with sorted keys, so the file is the same whichever engine made it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from curation.mixing import CategoryMix


class SourceReport(BaseModel):
    """One manifest source: rows read, drops by reason, and how many of its rows each later step removed or kept."""

    rows_in: int
    drops: dict[str, int]
    format: str | None
    error: str | None = Field(description="why the source failed (it then contributes no rows), or None")
    duplicates: int
    decontaminated: int
    selected: int
    slug: str


class CategoryReport(BaseModel):
    """The budget outcome of one category (`quota` None: no total, every row kept)."""

    available: int
    quota: int | None
    selected: int
    unmet: int

    @classmethod
    def from_mix(cls, mix: CategoryMix) -> CategoryReport:
        """Return the report line of a category's mix outcome."""
        return cls(available=mix.available, quota=mix.quota, selected=mix.selected, unmet=mix.unmet)


class EvalSetStatus(BaseModel):
    """How many prompts of an eval set entered the decontamination index, or why it could not be read."""

    items: int
    error: str | None = None


class DuplicateCounts(BaseModel):
    """Rows removed as exact and as near duplicates."""

    exact: int
    near: int


class StepCounts(BaseModel):
    """Rows left after each step of the run."""

    loaded: int
    after_cleaning: int
    after_dedup: int
    after_decontamination: int
    after_mix: int


class CurationReport(BaseModel):
    """report.json: counts per step, per source and per category, warnings, failed sources and the shards written."""

    schema_version: int = 1
    seed: int
    token_counter: str
    rows_in: int
    rows_out: int
    drops: dict[str, int]
    duplicates: DuplicateCounts
    decontaminated: int
    per_category: dict[str, CategoryReport]
    unmet_budgets: dict[str, int]
    warnings: list[str] = Field(default_factory=list)
    target_native: int
    needs_regeneration: int
    per_source: dict[str, SourceReport]
    failed_sources: list[str]
    eval_sets: dict[str, EvalSetStatus]
    steps: StepCounts
    shards: list[str] = Field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Return the report as report.json holds it (plain JSON values)."""
        return self.model_dump(mode="json")


def category_reports(per_category: dict[str, CategoryMix]) -> dict[str, CategoryReport]:
    """Return the per-category report lines, sorted by category."""
    return {c: CategoryReport.from_mix(m) for c, m in sorted(per_category.items())}
