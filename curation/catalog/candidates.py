"""Candidates and the verifier's verdicts in the catalog: one at a time, or a whole run's at once.

A candidate row is what one subagent run delivered for one Hub id; a verdict row is the verifier's decision
on a candidate (or on a whole failed run) with its reasons. `add_candidate` and `add_verdict` write one row
each, checking the campaign, run and candidate they point at. `add_verified_candidates` writes a run's
candidates and their verdicts in two batched inserts, checking the run once: the campaign's persist node
stores ~100 candidates per run, and a flush and two id look-ups per row were most of its time. Both ways write
the same rows, in the same order, inside the caller's transaction. A row is built from the one candidate model,
`core.candidates.Candidate` (`CandidateRecord.from_candidate`). Callers use `curation.catalog.store`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from sqlmodel import Session

from core.candidates import Candidate, VerifiedCandidate
from core.types import Decision, Reason
from curation.catalog.campaigns import category_name, get_campaign, get_run
from curation.catalog.errors import InvalidValueError, RunNotFoundError
from curation.catalog.models import CandidateRecord, SubagentRun, Verdict
from curation.catalog.storable import storable

_DECISIONS = {d.value for d in Decision}


def add_candidate(
    session: Session, *, campaign_id: str, run_id: int, category: str, candidate: Candidate | Mapping[str, Any]
) -> CandidateRecord:
    """Store one candidate as a run delivered it (a `Candidate` or its `model_dump(mode="json")`); return the row."""
    _run_of(session, campaign_id=campaign_id, run_id=run_id)
    name = category_name(category)
    record = CandidateRecord.from_candidate(
        checked_candidate(candidate, category=name), campaign_id=campaign_id, run_id=run_id, category=name)
    session.add(record)
    session.flush()
    return record


def add_verdict(
    session: Session,
    *,
    campaign_id: str,
    decision: str,
    reasons: Sequence[Reason],
    run_id: int | None = None,
    candidate_id: int | None = None,
    hub_id: str | None = None,
) -> Verdict:
    """Store the verifier's decision on a candidate or on a whole run; return the row."""
    get_campaign(session, campaign_id=campaign_id)
    if run_id is not None:
        get_run(session, run_id=run_id)
    if candidate_id is not None:
        candidate = session.get(CandidateRecord, candidate_id)
        if candidate is None:
            raise InvalidValueError(f"no candidate with id {candidate_id}")
        hub_id = hub_id or candidate.hub_id
        run_id = run_id if run_id is not None else candidate.run_id
    verdict = Verdict(
        campaign_id=campaign_id,
        run_id=run_id,
        candidate_id=candidate_id,
        hub_id=hub_id,
        decision=checked_decision(decision),
        reasons=stored_reasons(reasons),
    )
    session.add(verdict)
    session.flush()
    return verdict


def add_verified_candidates(
    session: Session, *, campaign_id: str, run_id: int, category: str, verified: Sequence[VerifiedCandidate]
) -> list[CandidateRecord]:
    """Store a run's candidates and the verdict on each, as `add_candidate` then `add_verdict` per candidate
    would (same rows, same ids), in one insert per table; return the candidate rows in the order given."""
    _run_of(session, campaign_id=campaign_id, run_id=run_id)
    name = category_name(category)
    records = [CandidateRecord.from_candidate(checked_candidate(v["candidate"], category=name), campaign_id=campaign_id,
                                              run_id=run_id, category=name) for v in verified]
    session.add_all(records)
    session.flush()  # one INSERT … RETURNING for the run: the verdicts need the candidates' ids
    verdicts = [
        Verdict(campaign_id=campaign_id, run_id=run_id, candidate_id=record.id, hub_id=record.hub_id,
                decision=checked_decision(v["decision"]), reasons=stored_reasons(v["reasons"]))
        for record, v in zip(records, verified, strict=True)
    ]
    session.add_all(verdicts)
    session.flush()
    return records


def checked_candidate(candidate: Candidate | Mapping[str, Any], *, category: str) -> Candidate:
    """Return `candidate` as the model; its JSON is validated (one without `categories` is the run's category's);
    raise InvalidValueError for one that is not a candidate or has no Hub id."""
    if not isinstance(candidate, Candidate):
        if not str(candidate.get("hub_id") or "").strip():
            raise InvalidValueError("candidate without a hub_id")
        try:
            candidate = Candidate.model_validate({"categories": [category], **candidate})
        except ValidationError as exc:
            raise InvalidValueError(f"not a candidate: {exc}") from None
    if not candidate.hub_id.strip():
        raise InvalidValueError("candidate without a hub_id")
    return candidate


def checked_decision(value: str) -> str:
    """Return `value` when it is a `core.types.Decision` value; else raise InvalidValueError."""
    if value not in _DECISIONS:
        raise InvalidValueError(f"unknown decision {value!r}; known: {', '.join(sorted(_DECISIONS))}")
    return value


def stored_reasons(reasons: Sequence[Reason]) -> list[Reason]:
    """Return `reasons` as the catalog stores them (storable text, `code`/`detail`/`blocking` normalised);
    raise InvalidValueError for a reason that is not a dict with a `code`."""
    out: list[Reason] = []
    for reason in storable(reasons):  # details quote what the datasets say: stored whatever they hold
        if not isinstance(reason, dict) or "code" not in reason:
            raise InvalidValueError(f"a reason must be a dict with a 'code': {reason!r}")
        out.append({**reason, "code": str(reason["code"]), "detail": str(reason.get("detail", "")),
                    "blocking": bool(reason.get("blocking", True))})
    return out


def _run_of(session: Session, *, campaign_id: str, run_id: int) -> SubagentRun:
    run = get_run(session, run_id=run_id)
    if run.campaign_id != campaign_id:
        raise RunNotFoundError(f"run {run_id} belongs to campaign {run.campaign_id!r}, not {campaign_id!r}")
    return run
