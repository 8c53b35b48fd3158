"""The curation report (`report.json`) as a typed model: what every engine writes and the CLI and summary read.

Both the in-process run (`curation.pipeline`) and the datatrove engine (`curation.engine.report`) build a
`CurationReport`; it is written with sorted keys, so the file is the same whichever engine made it.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from core.json_types import JSONObject
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
    kind: str = Field(default="dataset", description="dataset, target-written or traffic")
    scrubbed: dict[str, int] = Field(default_factory=dict, description="traffic: PII replaced by placeholders, by kind")


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
    unavailable: str | None = Field(default=None, description="why it could not be had at all (offline, not mirrored)")


class DecontaminationCoverage(BaseModel):
    """Which eval sets the training rows were actually checked against: only those whose prompts were loaded."""

    eval_sets: int = Field(description="eval sets the manifest (and mirror) named")
    checked: list[str] = Field(description="loaded, with at least one prompt in the index")
    unavailable: list[str] = Field(description="not in the mirror while offline or the Hub did not answer")
    failed: list[str] = Field(description="found but unreadable, or holding no usable prompt")

    @classmethod
    def of(cls, status: dict[str, EvalSetStatus]) -> DecontaminationCoverage:
        """Return the coverage of the eval sets' statuses."""
        names = sorted(status)
        return cls(
            eval_sets=len(names),
            checked=[n for n in names if status[n].items > 0 and not status[n].error and not status[n].unavailable],
            unavailable=[n for n in names if status[n].unavailable],
            failed=[n for n in names if not status[n].unavailable and (status[n].error or status[n].items == 0)],
        )

    def warning(self, shown: int = 8) -> str | None:
        """Return the one line saying how much was checked, or None when every eval set was."""
        if len(self.checked) == self.eval_sets:
            return None
        line = f"decontaminated against {len(self.checked)} of {self.eval_sets} eval sets"
        for names, why in ((self.unavailable, "not available offline"), (self.failed, "failed or empty")):
            if names:
                more = f", … (+{len(names) - shown} more; report.json lists all)" if len(names) > shown else ""
                line += f"; {len(names)} {why}: {', '.join(names[:shown])}{more}"
        return line


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
    decontamination: DecontaminationCoverage | None = Field(
        default=None, description="derived from eval_sets: which sets were really checked")
    steps: StepCounts
    shards: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _coverage(self) -> CurationReport:
        # Derived here, so every engine's report states it alike, with its one warning line.
        self.decontamination = DecontaminationCoverage.of(self.eval_sets)
        line = self.decontamination.warning()
        if line and line not in self.warnings:
            self.warnings = [*self.warnings, line]
        return self

    def to_json(self) -> JSONObject:
        """Return the report as report.json holds it (plain JSON values)."""
        return self.model_dump(mode="json")


def category_reports(per_category: dict[str, CategoryMix]) -> dict[str, CategoryReport]:
    """Return the per-category report lines, sorted by category."""
    return {c: CategoryReport.from_mix(m) for c, m in sorted(per_category.items())}
