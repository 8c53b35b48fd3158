"""The verifier: pure checks that judge each candidate and each run, with a reason code for every objection.

A check is a function `(candidate, context) -> list[Reason]`; a reason (`core.types.Reason`) is
`{"code": ReasonCode, "detail": str, "blocking": bool}`. Blocking reasons reject the candidate; non-blocking
ones are flags for the human reviewer. Unknown is not bad: a check that cannot be answered (offline, a record
without license, size or columns) flags instead of rejecting. The only I/O is the existence lookup, done once
per Hub id by `lookup_existence` before the checks run, so every check stays a pure function of its inputs.
What a dataset *is* (an evaluation benchmark, a raw corpus, the wrong language) is judged by the checks in
`graph/suitability.py`, run here with the others.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from langgraph.runtime import Runtime

from agents.scoring import OFF_TOPIC_BELOW
from agents.search.base import SearchBackend
from core.candidates import Candidate, DatasetMetadata, Deliverable, VerifiedCandidate
from core.licenses import is_stated, license_risk
from core.types import Category, Decision, Reason, ReasonCode, RunStatus, is_hub_id
from graph.context import CampaignContext
from graph.state import BranchResult, CampaignState, VerifiedRun
from graph.suitability import (
    check_benchmark,
    check_draft_recipe,
    check_language,
    check_multimodal,
    check_raw_corpus,
)

logger = logging.getLogger(__name__)

Existence = Literal["found", "missing", "unknown"]
MIN_ROWS = 100  # fewer rows than this cannot teach a draft model anything for a category
# Column names (or parts of them) that hold text a chat sample can be built from.
TEXT_FIELD_HINTS = (
    "text", "content", "message", "conversation", "instruction", "input", "output", "prompt", "response",
    "question", "answer", "code", "diff", "patch", "commit", "completion", "chosen", "solution", "problem",
    "query", "dialog", "chat", "trajectory", "review", "comment", "body", "title", "explanation", "turns",
)


def reason(code: ReasonCode, detail: str, *, blocking: bool) -> Reason:
    """Return one reason as the catalog stores it."""
    return Reason(code=code.value, detail=detail, blocking=blocking)


@dataclass
class VerifyContext:
    """What the checks may consult: existence answers, the first category that found each id, thresholds."""

    existence: dict[str, Existence] = field(default_factory=dict)
    first_found_by: dict[str, str] = field(default_factory=dict)  # hub id -> first category (campaign order)
    off_topic_below: float = OFF_TOPIC_BELOW  # the scorer's threshold: one constant for both
    min_rows: int = MIN_ROWS
    gated_manual_blocks: bool = True  # policy: manual-approval datasets are rejected (else only flagged)
    target_language: str = "en"  # the target model's language (ISO 639-1)


Check = Callable[[Candidate, VerifyContext], list[Reason]]


def check_hub_id(candidate: Candidate, context: VerifyContext) -> list[Reason]:
    """Reject an id that is not `owner/name`."""
    if is_hub_id(candidate.hub_id):
        return []
    return [reason(ReasonCode.MALFORMED_ID, f"{candidate.hub_id!r} is not an 'owner/name' Hub id", blocking=True)]


def check_exists(candidate: Candidate, context: VerifyContext) -> list[Reason]:
    """Reject a dataset the Hub says does not exist; flag one nobody could confirm (offline, lookup failed)."""
    answer = context.existence.get(candidate.hub_id, "unknown")
    if answer == "found":
        return []
    if answer == "missing":
        return [reason(ReasonCode.NOT_FOUND, f"{candidate.hub_id} is neither in the index nor on the Hub",
                       blocking=True)]
    return [reason(ReasonCode.EXISTENCE_UNVERIFIED,
                   "existence could not be confirmed (offline or lookup failed)", blocking=False)]


def check_gated(candidate: Candidate, context: VerifyContext) -> list[Reason]:
    """Reject manual-approval gating (policy), flag automatic gating; unknown gating is not an objection."""
    gated = candidate.metadata.gated
    if gated == "manual":
        detail = "gated: access needs the owner's manual approval"
        return [reason(ReasonCode.GATED, detail, blocking=context.gated_manual_blocks)]
    if gated == "auto" or gated is True:
        return [reason(ReasonCode.GATED, "gated: access needs accepting terms (automatic approval)", blocking=False)]
    return []


def check_license(candidate: Candidate, context: VerifyContext) -> list[Reason]:
    """Reject a restricted license, flag a non-commercial or unknown one (`core/licenses.py`: the one rule)."""
    raw = candidate.metadata.license
    risk = license_risk(raw)
    if risk == "unknown" and not is_stated(raw):
        return [reason(ReasonCode.LICENSE_UNKNOWN, "license unknown: check the dataset card", blocking=False)]
    if risk == "unknown":
        detail = f"license {raw!r} is none datahunt recognises: read its terms"
        return [reason(ReasonCode.LICENSE_UNKNOWN, detail, blocking=False)]
    if risk == "restricted":
        return [reason(ReasonCode.LICENSE_RESTRICTED, f"license {raw!r} restricts training or derivatives",
                       blocking=True)]
    if risk == "non_commercial":
        return [reason(ReasonCode.LICENSE_NON_COMMERCIAL, f"license {raw!r} is non-commercial", blocking=False)]
    return []


def known_rows(metadata: DatasetMetadata) -> int | None:
    """Return the row count when known: `num_rows`, else a stated size such as "558k" or "1.2M"."""
    if metadata.num_rows is not None:
        return metadata.num_rows
    match = re.fullmatch(
        r"\s*~?([\d.,]+)\s*([kmb])?\s*(rows|samples|examples)?\s*", (metadata.size_stated or "").lower()
    )
    if not match:
        return None
    try:
        number = float(match.group(1).replace(",", ""))
    except ValueError:
        return None
    return int(number * {"k": 1e3, "m": 1e6, "b": 1e9}.get(match.group(2) or "", 1))


def check_size(candidate: Candidate, context: VerifyContext) -> list[Reason]:
    """Reject a dataset known to be tiny; flag one whose size nobody stated."""
    rows = known_rows(candidate.metadata)
    if rows is not None:
        if rows < context.min_rows:
            return [reason(ReasonCode.TOO_SMALL, f"{rows} rows, fewer than {context.min_rows}", blocking=True)]
        return []
    if candidate.metadata.size_category == "n<1K":
        return [reason(ReasonCode.TOO_SMALL, "fewer than 1K rows by its size category", blocking=False)]
    if candidate.metadata.size_category or candidate.metadata.size_stated:
        return []
    return [reason(ReasonCode.SIZE_UNKNOWN, "row count unknown", blocking=False)]


def check_text_fields(candidate: Candidate, context: VerifyContext) -> list[Reason]:
    """Reject known columns with nothing text-like; flag unknown columns."""
    features = candidate.metadata.features
    if not features:
        return [reason(ReasonCode.FIELDS_UNKNOWN, "columns unknown", blocking=False)]
    if any(hint in name.lower() for name in features for hint in TEXT_FIELD_HINTS):
        return []
    return [reason(ReasonCode.NO_TEXT_FIELDS, f"no text-like column among {sorted(features)}", blocking=True)]


def check_duplicate(candidate: Candidate, context: VerifyContext) -> list[Reason]:
    """Flag (never reject) a dataset another category found first; the catalog merges the categories."""
    first = context.first_found_by.get(candidate.hub_id)
    mine = candidate.categories[0].value if candidate.categories else None
    if first is None or first == mine:
        return []
    return [reason(ReasonCode.DUPLICATE, f"also found by {first}; categories merged into one entry", blocking=False)]


def check_on_topic(candidate: Candidate, context: VerifyContext) -> list[Reason]:
    """Reject a candidate whose relevance to its category is below the off-topic threshold."""
    if candidate.relevance >= context.off_topic_below:
        return []
    detail = f"relevance {candidate.relevance:.2f} < {context.off_topic_below:.2f}"
    if candidate.relevance_reason:
        detail += f" ({candidate.relevance_reason})"
    return [reason(ReasonCode.OFF_TOPIC, detail, blocking=True)]


CHECKS: tuple[Check, ...] = (
    check_hub_id, check_exists, check_gated, check_license, check_size, check_text_fields, check_duplicate,
    check_on_topic, check_benchmark, check_raw_corpus, check_multimodal, check_language, check_draft_recipe,
)


def judge_candidate(candidate: Candidate, context: VerifyContext) -> tuple[Decision, list[Reason]]:
    """Return (decision, reasons): reject when any reason blocks. A malformed id skips the other checks."""
    reasons = check_hub_id(candidate, context)
    if not reasons:
        reasons = [r for check in CHECKS[1:] for r in check(candidate, context)]
    decision = Decision.REJECT if any(r["blocking"] for r in reasons) else Decision.ACCEPT
    return decision, reasons


def judge_run(deliverable: Deliverable | None, error: str | None) -> tuple[RunStatus, list[Reason]]:
    """Return a run's (status, run-level reasons): failed without a deliverable, empty with no candidates."""
    if deliverable is None:
        detail = error or "the subagent returned no deliverable"
        return RunStatus.FAILED, [reason(ReasonCode.MISSING_DELIVERABLE, detail, blocking=True)]
    failed = [q for q in deliverable.queries if q.status == "failed"]
    reasons: list[Reason] = []
    if failed:
        errors = sorted({q.error or "unknown error" for q in failed})[:3]
        detail = f"{len(failed)} of {len(deliverable.queries)} queries failed: {'; '.join(errors)}"
        reasons.append(reason(ReasonCode.BACKEND_FAILED, detail, blocking=not deliverable.candidates))
    if deliverable.candidates:
        return RunStatus.SUCCEEDED, reasons
    if deliverable.queries and len(failed) == len(deliverable.queries):
        return RunStatus.FAILED, reasons
    reasons.append(reason(ReasonCode.EMPTY_DELIVERABLE, "the subagent delivered no candidates", blocking=True))
    return RunStatus.EMPTY, reasons


def first_found_by(deliverables: Iterable[Deliverable]) -> dict[str, str]:
    """Map each Hub id to the first category (in the given order) whose deliverable holds it."""
    first: dict[str, str] = {}
    for deliverable in deliverables:
        for candidate in deliverable.candidates:
            first.setdefault(candidate.hub_id, deliverable.category.value)
    return first


async def lookup_existence(
    candidates: Iterable[Candidate], backends: list[SearchBackend], *, timeout_s: float
) -> tuple[dict[str, Existence], dict[str, DatasetMetadata]]:
    """Answer 'does it exist?' once per Hub id; return the answers and any metadata the lookups brought.

    A candidate found by the offline index or the Hub search exists by construction. Others (web hits) are
    looked up on every index/Hub backend: any metadata means found; a None from a live Hub backend means
    missing; no answer at all (offline, errors, timeouts) stays unknown and is flagged, not rejected.
    """
    existence: dict[str, Existence] = {}
    to_check: list[str] = []
    for candidate in candidates:
        if candidate.hub_id in existence or not is_hub_id(candidate.hub_id):
            continue
        if any(e.backend in ("hub", "offline") for e in candidate.evidence):
            existence[candidate.hub_id] = "found"
        else:
            existence[candidate.hub_id] = "unknown"
            to_check.append(candidate.hub_id)
    lookups = [b for b in backends if b.name in ("hub", "offline")]
    found: dict[str, DatasetMetadata] = {}
    answers = await asyncio.gather(*(_lookup_one(hub_id, lookups, timeout_s) for hub_id in to_check))
    for hub_id, (answer, metadata) in zip(to_check, answers, strict=True):
        existence[hub_id] = answer
        if metadata is not None:
            found[hub_id] = metadata
    return existence, found


async def _lookup_one(
    hub_id: str, backends: list[SearchBackend], timeout_s: float
) -> tuple[Existence, DatasetMetadata | None]:
    hub_said_missing = False
    for backend in backends:
        try:
            metadata = await asyncio.wait_for(backend.lookup(hub_id), timeout_s)
        except Exception as exc:  # noqa: BLE001 - an unanswered lookup is 'unknown', recorded in the log
            logger.warning("lookup of %s on %s failed: %s: %s", hub_id, backend.name, type(exc).__name__, exc)
            continue
        if metadata is not None:
            return "found", metadata
        hub_said_missing = hub_said_missing or backend.name == "hub"
    return ("missing" if hub_said_missing else "unknown"), None


def enrich(candidate: Candidate, metadata: DatasetMetadata | None) -> Candidate:
    """Return `candidate` with unknown metadata fields filled from a lookup (known fields are kept)."""
    if metadata is None:
        return candidate
    known = candidate.metadata.model_dump(exclude_defaults=True)
    merged = metadata.model_dump() | known
    return candidate.model_copy(update={"metadata": DatasetMetadata.model_validate(merged)})


def verify_run(
    result: BranchResult, deliverable: Deliverable | None, context: VerifyContext, looked_up: dict[str, DatasetMetadata]
) -> VerifiedRun:
    """Judge each candidate of one branch result (the run itself was judged where it came back); return the run
    ready to persist."""
    if "status" in result and "reasons" in result:
        status, run_reasons = RunStatus(result["status"]), list(result["reasons"])
    else:  # a result checkpointed before verdicts travelled with it, or a branch that never came back
        status, run_reasons = judge_run(deliverable, result["error"])
    candidates: list[VerifiedCandidate] = []
    per_backend: dict[str, int] = {}
    for query in deliverable.queries if deliverable else []:
        per_backend[query.backend] = per_backend.get(query.backend, 0) + query.hits
    for candidate in deliverable.candidates if deliverable else []:
        candidate = enrich(candidate, looked_up.get(candidate.hub_id))
        decision, reasons = judge_candidate(candidate, context)
        candidates.append(
            VerifiedCandidate(candidate=candidate.model_dump(mode="json"), decision=decision, reasons=reasons)
        )
    return VerifiedRun(
        category=result["category"], run_id=result["run_id"], status=status, error=result["error"],
        reasons=run_reasons, planner=deliverable.planner if deliverable else None,
        queries=[q.model_dump(mode="json") for q in deliverable.queries] if deliverable else [],
        results_per_backend=per_backend, notes=list(deliverable.notes) if deliverable else [],
        candidates=candidates,
    )


async def verify(state: CampaignState, runtime: Runtime[CampaignContext]) -> dict[str, list[VerifiedRun]]:
    """The `verifier` node: judge every branch result; a requested category without one is a missing deliverable."""
    context = runtime.context
    by_category = {r["category"]: r for r in state.get("results", [])}  # a re-run branch's later result wins
    order = [c.value for c in Category if c.value in state.get("categories", [])]
    results: list[BranchResult] = []
    for category in order:
        result = by_category.get(category)
        if result is None:
            logger.warning("campaign %s: no branch result for %s", state["campaign_id"], category)
            result = BranchResult(category=category, run_id=None, deliverable=None,
                                  error="the branch never returned a deliverable", elapsed_s=0.0)
        results.append(result.copy())
    deliverables = {r["category"]: Deliverable.model_validate(r["deliverable"]) for r in results if r["deliverable"]}
    everything = [c for d in deliverables.values() for c in d.candidates]
    existence, looked_up = await lookup_existence(everything, context.backends, timeout_s=context.lookup_timeout_s)
    checks = VerifyContext(
        existence=existence, first_found_by=first_found_by(deliverables.values()),
        target_language=context.target_language,
    )
    verified = [verify_run(r, deliverables.get(r["category"]), checks, looked_up) for r in results]
    rejected = sum(c["decision"] == Decision.REJECT for run in verified for c in run["candidates"])
    logger.info("campaign %s: verified %d candidates, %d rejected", state["campaign_id"], len(everything), rejected)
    return {"verified": verified}
