"""SQLModel tables of the catalog: campaigns, subagent runs, candidates, verdicts, catalog entries, audit, leases,
review-page sessions.

Lists and nested objects are JSON columns so SQLite and PostgreSQL store them alike. Every status change of a
campaign, run or entry writes an `AuditEvent` row (the store does it; nothing writes status directly).
Timestamps are timezone-aware UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Column, DateTime, Dialect, Text, TypeDecorator, UniqueConstraint
from sqlmodel import Field, SQLModel

from core.candidates import Candidate
from core.json_types import JSONScalar
from core.licenses import license_risk
from core.types import CampaignStatus, Reason, ReasonCode, RunStatus
from curation.catalog.storable import storable


def utcnow() -> datetime:
    """Return the current time in UTC."""
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """`TIMESTAMP WITH TIME ZONE` that always hands back aware UTC datetimes, on SQLite too.

    SQLite keeps no zone, so values are converted to UTC before they are stored and tagged UTC when read.
    A naive datetime is refused rather than guessed.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the catalog stores timezone-aware UTC only")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Campaign(SQLModel, table=True):
    """One discovery campaign: a LangGraph thread over some categories."""

    id: str = Field(primary_key=True, max_length=64)
    status: str = Field(default=CampaignStatus.PENDING.value, index=True, max_length=32)  # a core.types.CampaignStatus
    categories: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    offline: bool = False
    backends: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    thread_id: str = Field(max_length=128)
    error: str | None = Field(default=None, sa_column=Column(Text))
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class SubagentRun(SQLModel, table=True):
    """One attempt of one category's subagent in a campaign (DESIGN.md: SubagentRun)."""

    __table_args__ = (UniqueConstraint("campaign_id", "category", "attempt", name="uq_subagentrun_attempt"),)

    id: int | None = Field(default=None, primary_key=True)
    campaign_id: str = Field(foreign_key="campaign.id", index=True, max_length=64)
    category: str = Field(index=True, max_length=64)
    attempt: int = 1
    status: str = Field(default=RunStatus.PENDING.value, max_length=16)  # a core.types.RunStatus
    planner: str | None = Field(default=None, max_length=32)
    queries: list[dict[str, Any]] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    results_per_backend: dict[str, int] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    candidates_found: int = 0
    candidates_accepted: int = 0
    error: str | None = Field(default=None, sa_column=Column(Text))
    reasons: list[Reason] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    # What the subagent said about its own run (offline fallback, LLM answers replaced, ids dropped, …).
    notes: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False, server_default="[]"))
    started_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    elapsed_s: float | None = None


class CandidateRecord(SQLModel, table=True):
    """A candidate as one subagent run delivered it, with its evidence (DESIGN.md: Candidate)."""

    __tablename__ = "candidate"

    id: int | None = Field(default=None, primary_key=True)
    campaign_id: str = Field(foreign_key="campaign.id", index=True, max_length=64)
    run_id: int = Field(foreign_key="subagentrun.id", index=True)
    category: str = Field(index=True, max_length=64)
    hub_id: str = Field(index=True, max_length=256)
    title: str = Field(default="", sa_column=Column(Text, nullable=False))
    description: str = Field(default="", sa_column=Column(Text, nullable=False))
    dataset_metadata: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    evidence: list[dict[str, Any]] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    relevance: float = 0.0
    relevance_reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    format_guess: str | None = Field(default=None, max_length=64)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)

    @classmethod
    def from_candidate(cls, candidate: Candidate, *, campaign_id: str, run_id: int, category: str) -> CandidateRecord:
        """Return the row of `candidate` as run `run_id` delivered it for `category` (not added to a session).

        The JSON columns hold what the run said (`model_dump(mode="json")`, a field it never set left out), and
        text from the Hub with a NUL or a lone surrogate becomes U+FFFD rather than failing the run.
        """
        return cls(
            campaign_id=campaign_id,
            run_id=run_id,
            category=category,
            hub_id=storable(candidate.hub_id.strip()),
            title=storable(candidate.title),
            description=storable(candidate.description),
            dataset_metadata=storable(candidate.metadata.model_dump(mode="json", exclude_unset=True)),
            evidence=[storable(e.model_dump(mode="json", exclude_unset=True)) for e in candidate.evidence],
            relevance=candidate.relevance,
            relevance_reason=storable(candidate.relevance_reason),
            format_guess=storable(candidate.format_guess),
        )


class Verdict(SQLModel, table=True):
    """The verifier's decision on a candidate, or on a whole run (empty/missing deliverable)."""

    id: int | None = Field(default=None, primary_key=True)
    campaign_id: str = Field(foreign_key="campaign.id", index=True, max_length=64)
    run_id: int | None = Field(default=None, foreign_key="subagentrun.id", index=True)
    candidate_id: int | None = Field(default=None, foreign_key="candidate.id", index=True)
    hub_id: str | None = Field(default=None, index=True, max_length=256)
    decision: str = Field(max_length=16)  # core.types.Decision
    # core.types.Reason, each tagged with its category; non-blocking reasons are flags for the reviewer.
    reasons: list[Reason] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class CatalogEntry(SQLModel, table=True):
    """One dataset in the catalog, unique by Hub id, with its review state (DESIGN.md: Catalog entry)."""

    id: int | None = Field(default=None, primary_key=True)
    hub_id: str = Field(unique=True, index=True, max_length=256)
    title: str = Field(default="", sa_column=Column(Text, nullable=False))
    description: str = Field(default="", sa_column=Column(Text, nullable=False))
    categories: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    relevance: dict[str, float] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    best_relevance: float = Field(default=0.0, index=True)
    status: str = Field(default="pending_review", index=True, max_length=32)  # core.types.EntryStatus
    verifier_decision: str | None = Field(default=None, max_length=16)
    reasons: list[Reason] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    dataset_metadata: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    license: str | None = Field(default=None, index=True, max_length=128)
    format_guess: str | None = Field(default=None, max_length=64)
    # What the manifest pins when the entry is approved.
    revision: str | None = Field(default=None, max_length=64)
    config: str | None = Field(default=None, max_length=128)
    split: str | None = Field(default=None, max_length=64)
    # adapter field → dataset column (`curation.adapters.apply_mapping`)
    field_mapping: dict[str, str] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    reviewer: str | None = Field(default=None, max_length=128)
    note: str | None = Field(default=None, sa_column=Column(Text))
    version: int = 1  # bumped on every change; guards concurrent reviews
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)

    def license_risk(self) -> str:
        """Return `ok`, `non_commercial`, `restricted` or `unknown` for the entry's licence (`curation.licenses`)."""
        return license_risk(self.license)

    def ranked_categories(self) -> tuple[list[str], list[str]]:
        """Return `(categories most relevant first, categories the verifier found it off-topic for)`: a chat set
        that one bug-fixing query happened to return is chat data, not a bug-fixing set rejected for it."""
        off = {r.get("category") for r in self.reasons if r.get("code") == ReasonCode.OFF_TOPIC and r.get("blocking")}
        kept = sorted((c for c in self.categories if c not in off), key=lambda c: (-self.relevance.get(c, 0.0), c))
        return kept, sorted(c for c in self.categories if c in off)


class AuditEvent(SQLModel, table=True):
    """One status change of a campaign, run or catalog entry; written by the store, never edited."""

    id: int | None = Field(default=None, primary_key=True)
    entity: str = Field(index=True, max_length=32)  # campaign | run | entry
    entity_id: str = Field(index=True, max_length=256)  # campaign id, run id, or Hub id
    action: str = Field(max_length=64)  # created, status_changed, approved, rejected, verdict, …
    from_status: str | None = Field(default=None, max_length=32)
    to_status: str | None = Field(default=None, max_length=32)
    actor: str = Field(default="system", max_length=128)
    note: str | None = Field(default=None, sa_column=Column(Text))
    detail: dict[str, JSONScalar] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, index=True)


class Lease(SQLModel, table=True):
    """Who works on something now (a campaign's run, resume or re-run): one owner until `expires_at`.

    The owner renews it (`heartbeat_at`, `expires_at`) while it works; another replica may take it over only
    once it has expired, so a dead replica's work is picked up and a live one's is never touched.
    """

    name: str = Field(primary_key=True, max_length=160)  # e.g. "campaign:<id>"
    owner: str = Field(max_length=200)  # host:pid:random of the process holding it
    acquired_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    heartbeat_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    expires_at: datetime = Field(sa_type=UTCDateTime, index=True)


class ReviewSession(SQLModel, table=True):
    """A review-page login: live from `created_at` until `expires_at`, or until its logout (`revoked_at`).

    Only the SHA-256 of the secret the cookie carries is stored, so reading this table opens no session.
    Every replica checks the same rows, so a logout on one is a logout on all.
    """

    __tablename__ = "review_session"

    id: str = Field(primary_key=True, max_length=64)  # hex SHA-256 of the cookie's secret
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    expires_at: datetime = Field(sa_type=UTCDateTime, index=True)
    revoked_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class MeasuredValueRecord(SQLModel, table=True):
    """The measured value of a source (a Hub id) or a category, as one value run measured it
    (`core.measured_value.MeasuredValue`): the mean over the eval sets in columns, every set in `per_set`."""

    __tablename__ = "measured_value"
    __table_args__ = (UniqueConstraint("kind", "subject", "op", "run", name="uq_measured_value_run"),)

    id: int | None = Field(default=None, primary_key=True)
    kind: str = Field(max_length=16)  # core.measured_value.UnitKind
    subject: str = Field(index=True, max_length=256)  # the Hub id or the category
    op: str = Field(max_length=16)  # core.measured_value.ValueOp
    budget: int
    rows_swapped: float
    seeds: int
    noise_dof: int
    per_10k: float
    low: float | None = None
    high: float | None = None
    delta: float
    per_set: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    run: str = Field(max_length=512)
    measured_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, index=True)
