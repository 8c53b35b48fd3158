"""The typed state of a campaign graph: what the supervisor fans out, what each branch returns, what is verified.

Everything in the state is plain JSON (dicts, lists, strings) or a `core.types` enum (a `str` whose value is
what the catalog stores; the checkpointer's serializer knows them, `graph.checkpoint.STATE_TYPES`). Branch
results meet in `results` through an `operator.add` reducer: each `Send` branch appends one `BranchResult`,
and a branch that finished before a crash keeps its result in the checkpoint's pending writes, so a resume
runs only the branches that had not finished.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, NotRequired, TypedDict

from core.candidates import VerifiedCandidate
from core.types import Reason, RunStatus


class BranchInput(TypedDict):
    """The payload of one `Send`: which campaign and which category this branch searches for."""

    campaign_id: str
    category: str


class BranchResult(TypedDict):
    """What one category branch hands back: its run row, the deliverable (or why there is none), timings."""

    category: str
    run_id: int | None
    deliverable: dict[str, Any] | None  # core.candidates.Deliverable as JSON; None when it never came
    error: str | None  # why the subagent failed or delivered nothing usable
    elapsed_s: float
    # The run's verdict, judged once where the deliverable arrives (`graph.verifier.judge_run`); absent in a
    # result checkpointed by an earlier release, which the verifier then judges.
    status: NotRequired[RunStatus]
    reasons: NotRequired[list[Reason]]


class VerifiedRun(TypedDict):
    """One category's run as the verifier judged it, ready to be persisted."""

    category: str
    run_id: int | None
    status: RunStatus  # succeeded | empty | failed
    error: str | None
    reasons: list[Reason]  # run-level reasons (empty/missing deliverable, backend failures)
    planner: str | None
    queries: list[dict[str, Any]]
    results_per_backend: dict[str, int]
    notes: list[str]  # the subagent's own notes (offline fallback, LLM answers replaced, …)
    candidates: list[VerifiedCandidate]


class RunCounts(TypedDict):
    """One category's latest run as `catalog summary` counts it (`graph.persist.run_counts`)."""

    status: RunStatus
    error: str | None
    candidates: int
    accepted: int  # let through by the verifier: unverified + flagged + the clean rest
    unverified: int
    flagged: int
    eval_sets: int  # benchmarks blocked from training, counted in `rejected`
    rejected: int
    reasons: dict[str, int]  # flag or rejection code -> candidates, most first


class CampaignSummary(TypedDict):
    """What the `persist` node reports: the campaign's status, what it stored, and each category's counts."""

    status: str  # a CampaignStatus value
    error: str | None
    stored: dict[str, int]  # {"candidates", "accepted"} written by this pass
    by_category: dict[str, RunCounts]


class CampaignState(TypedDict, total=False):
    """The graph's state: the campaign, its categories, branch results (fan-in), verified runs, a summary."""

    campaign_id: str
    categories: list[str]
    results: Annotated[list[BranchResult], operator.add]
    verified: list[VerifiedRun]
    summary: CampaignSummary
