"""Request and response models of the API, kept apart from the tables they are read from.

Request bodies forbid unknown fields so a typo is a 422, not a silently ignored option. Responses are built
from catalog rows with `from_attributes`, so a column added to a table never leaks unannounced.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, field_validator

from core.measured_value import MeasuredValue, describe_value
from core.types import HUB_ID_SCHEMA_PATTERN, CampaignStatus, Category, Reason, RunStatus
from curation.manifest import Manifest
from server.api.preview import SamplePreview

# Relative, portable and unable to climb: no part starts with '.', so neither '..' nor hidden names; each part
# fits a file system's 255-byte name limit, temporary names included.
EXPORT_PATH_PATTERN = r"^(?!.*\n)(?:[A-Za-z0-9_][A-Za-z0-9._-]{0,254}/){0,16}[A-Za-z0-9_][A-Za-z0-9._-]{0,249}\.json$"
_EXPORT_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
SHARE_PATTERN = rf"^(?:{'|'.join(c.value for c in Category)})=(?:0(?:\.[0-9]{{1,12}})?|1(?:\.0{{1,12}})?)$"


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Row(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class CampaignCreate(_Request):
    """Start a campaign: which categories (default all ten) and whether to stay offline."""

    # An empty list is refused rather than read as "all ten": a client whose filter left nothing would otherwise
    # launch the largest campaign there is. `offline` takes JSON true/false only, not "yes" or 0.
    categories: list[Category] | None = Field(default=None, min_length=1, max_length=10,
                                              description="Default (absent or null): all ten.")
    offline: StrictBool | None = Field(default=None, description="Default: the server's DATAHUNT_OFFLINE setting.")


class CampaignAccepted(BaseModel):
    """Answer of a launch or re-run: the campaign id and its status at that moment."""

    id: str
    status: CampaignStatus
    category: str | None = None


class RunOut(_Row):
    """One subagent run (the latest attempt of its category, unless history was asked for)."""

    id: int | None
    category: str
    attempt: int
    status: RunStatus
    planner: str | None
    queries: list[dict[str, Any]]
    results_per_backend: dict[str, int]
    candidates_found: int
    candidates_accepted: int
    error: str | None
    reasons: list[Reason]
    notes: list[str] = Field(default_factory=list, description="What the subagent said about its own run.")
    started_at: datetime | None
    finished_at: datetime | None
    elapsed_s: float | None


class CampaignOut(_Row):
    """A campaign with its status, error, and per-category runs."""

    id: str
    status: CampaignStatus
    categories: list[str]
    offline: bool
    backends: list[str]
    error: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    active: bool = Field(default=False, description="A task for it runs in this server process.")
    runs: list[RunOut] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict, description="Runs per status.")


class MeasuredOut(MeasuredValue):
    """A measured value of the entry's source or of one of its categories (`datahunt value`)."""

    text: str = Field(description="The line a reviewer reads: 'measured +0.06 AL per 10K rows on humaneval (...)'.")

    @classmethod
    def of(cls, value: MeasuredValue) -> MeasuredOut:
        """The value with its line."""
        return cls(**value.model_dump(), text=describe_value(value))


class EntryOut(_Row):
    """One catalog entry as the review table shows it."""

    hub_id: str
    title: str
    description: str
    categories: list[str]
    relevance: dict[str, float]
    best_relevance: float
    status: str
    verifier_decision: str | None
    reasons: list[Reason]
    dataset_metadata: dict[str, Any]
    license: str | None
    format_guess: str | None
    revision: str | None
    config: str | None
    split: str | None
    reviewer: str | None
    note: str | None
    version: int
    created_at: datetime
    updated_at: datetime
    measured: list[MeasuredOut] = Field(default_factory=list, description="The newest measured value of its "
                                        "source, then of each of its categories (empty: never measured).")


class EntryPage(BaseModel):
    """A filtered page of the catalog and the total number of matches."""

    items: list[EntryOut]
    total: int
    limit: int
    offset: int


class CandidateOut(_Row):
    """A candidate as one subagent run delivered it, with its evidence."""

    id: int | None
    campaign_id: str
    run_id: int
    category: str
    hub_id: str
    title: str
    description: str
    dataset_metadata: dict[str, Any]
    evidence: list[dict[str, Any]]
    relevance: float
    relevance_reason: str
    format_guess: str | None
    created_at: datetime


class VerdictOut(_Row):
    """The verifier's decision on a candidate, or on a whole run."""

    id: int | None
    campaign_id: str
    run_id: int | None
    candidate_id: int | None
    hub_id: str | None
    decision: str
    reasons: list[Reason]
    created_at: datetime


class AuditOut(_Row):
    """One status change of the entry."""

    id: int | None
    entity: str
    entity_id: str
    action: str
    from_status: str | None
    to_status: str | None
    actor: str
    note: str | None
    detail: dict[str, Any]
    at: datetime


class EntryDetail(BaseModel):
    """An entry with its candidates (evidence), verdict history, audit trail and sample preview."""

    entry: EntryOut
    candidates: list[CandidateOut]
    verdicts: list[VerdictOut]
    audit: list[AuditOut]
    preview: SamplePreview


class ReviewRequest(_Request):
    """A reviewer's decision. `override` is required to approve what the verifier rejected."""

    # The documented patterns add "no NUL", which the store refuses with a 422 naming the field.
    reviewer: str = Field(min_length=1, max_length=128, pattern=r"\S",
                          json_schema_extra={"pattern": r"^[^\x00]*\S[^\x00]*$"})
    note: str | None = Field(default=None, max_length=4000, json_schema_extra={"pattern": r"^[^\x00]*$"})
    override: StrictBool = False  # JSON true/false only: "true" or 1 is a 422, not a silent override


BULK_REVIEW_MAX = 500  # entries one bulk review may decide: the largest page the catalog lists


class BulkReviewRequest(ReviewRequest):
    """One decision for many entries: all of them change, or (an unknown id, an override needed) none."""

    hub_ids: list[Annotated[str, Field(max_length=256, json_schema_extra={"pattern": HUB_ID_SCHEMA_PATTERN})]] = Field(
        min_length=1, max_length=BULK_REVIEW_MAX, description="Hub ids (`owner/name`); a repeated id counts once.")


class StatusCounts(BaseModel):
    """How many catalog entries are in each review status, and in all."""

    total: int
    by_status: dict[str, int] = Field(description="Every review status, zeros included.")


class BulkReviewed(BaseModel):
    """The entries a bulk review decided, in Hub-id order, and the catalog's counts after it."""

    entries: list[EntryOut]
    counts: StatusCounts


class ManifestOptions(_Request):
    """Budget and target written into the manifest, and where to export it (inside the data directory)."""

    path: str | None = Field(
        default=None, max_length=1024, json_schema_extra={"pattern": EXPORT_PATH_PATTERN},
        description="A file under the data directory, relative to it: folders and a name of letters, digits, '.', "
        "'_' and '-' (none starting with '.'), ending in .json. Default: manifests/manifest-<time>.json.",
    )
    target_model: str | None = Field(default=None, max_length=256)
    tokenizer: str | None = Field(default=None, max_length=256)
    # Numbers are JSON numbers only: false, "7" or 7.0 for an integer is a 422, not read as 0 or 7.
    budget_total: StrictInt | None = Field(default=None, gt=0, le=10**12)
    shares: dict[Category, Annotated[StrictFloat, Field(ge=0, le=1)]] = Field(default_factory=dict)
    seed: StrictInt = Field(default=0, ge=0, le=2**31 - 1)

    @field_validator("path")
    @classmethod
    def _portable_relative_path(cls, value: str | None) -> str | None:
        # Exactly EXPORT_PATH_PATTERN, with a message saying which rule the path broke.
        if value is None or re.fullmatch(EXPORT_PATH_PATTERN, value):
            return value
        if value.startswith("/"):
            raise ValueError("the export path is relative to the data directory; it may not start with '/'")
        if not value.endswith(".json"):
            raise ValueError("the export path must end in .json")
        parts = value.split("/")
        if len(parts) > 17:
            raise ValueError("the export path may have at most 16 folders")
        for part in parts:
            if not _EXPORT_PART.fullmatch(part):
                raise ValueError(
                    f"export path part {part[:40]!r}: use letters, digits, '.', '_' and '-', not first '.'"
                )
            if len(part) > 255:
                raise ValueError(f"export path part {part[:40]!r}… is over 255 characters")
        raise ValueError(f"the file name may be at most 255 characters, .json included: {parts[-1][:40]!r}…")


class ManifestExported(BaseModel):
    """Where the manifest was written, and the manifest itself."""

    path: str
    manifest: Manifest
