"""The `persist` node: write verified runs, candidates, verdicts and catalog entries, then the campaign
status (`graph.lifecycle.finish`).

Each run is written in its own transaction, and a run whose row is already finished is skipped, so the node
is safe to run again after a crash (a resume re-runs it): a crash loses no run already committed and leaves
nothing of the run it interrupted. Within its transaction a run is written in batches (its candidates, then
their verdicts, one insert each; its entries through `store.upsert_entries`), not a flush per row. Catalog
entries are upserted in Hub-id order and a run's transaction runs again when PostgreSQL aborts it as a
deadlock victim, so campaigns persisting side by side never fail each other. Nothing is dropped: every
candidate is stored with its verdict, rejected ones included; a candidate with a malformed Hub id keeps its
candidate and verdict rows but gets no catalog entry (the catalog is keyed by valid Hub ids).
"""

from __future__ import annotations

import logging
from collections import Counter
from functools import partial

from langgraph.runtime import Runtime
from sqlalchemy import Engine
from sqlmodel import Session

from core.types import (
    INFORMATIONAL_CODES,
    UNVERIFIED_CODES,
    Decision,
    RunStatus,
    VerdictLabel,
    is_hub_id,
    label_verdict,
)
from curation.catalog import store
from graph import lifecycle
from graph.context import CampaignContext
from graph.state import CampaignState, CampaignSummary, RunCounts, VerifiedRun

logger = logging.getLogger(__name__)


def persist_run(session: Session, *, campaign_id: str, run: VerifiedRun) -> dict[str, int]:
    """Store one verified run: finish its row, then each candidate, its verdict and its catalog entry."""
    run_id = run["run_id"]
    if run_id is None:  # the branch never reported back: give the failure a row of its own
        run_id = store.start_run(session, campaign_id=campaign_id, category=run["category"]).id
        assert run_id is not None
    accepted = sum(c["decision"] == Decision.ACCEPT for c in run["candidates"])
    store.finish_run(
        session, run_id=run_id, status=run["status"], planner=run["planner"], queries=run["queries"],
        results_per_backend=run["results_per_backend"], candidates_found=len(run["candidates"]),
        candidates_accepted=accepted, error=run["error"], reasons=run["reasons"],
        notes=run.get("notes", []),
    )
    if run["status"] != RunStatus.SUCCEEDED:
        store.add_verdict(session, campaign_id=campaign_id, decision=Decision.REJECT.value, reasons=run["reasons"],
                          run_id=run_id)
    records = store.add_verified_candidates(
        session, campaign_id=campaign_id, run_id=run_id, category=run["category"], verified=run["candidates"])
    entries = [(record, v["decision"], v["reasons"])
               for record, v in zip(records, run["candidates"], strict=True) if is_hub_id(record.hub_id)]
    store.upsert_entries(session, verified=entries)
    return {"candidates": len(run["candidates"]), "accepted": accepted}


async def persist(state: CampaignState, runtime: Runtime[CampaignContext]) -> CampaignState:
    """The `persist` node: store every verified run not stored yet, then set the campaign's status (blocking
    work, run through the catalog port in a worker thread)."""
    return await runtime.context.catalog.run(partial(persist_all, state))


def persist_all(state: CampaignState, engine: Engine) -> CampaignState:
    """Store every verified run of `state` not stored yet, one transaction each, then set the campaign's status;
    return the summary."""
    campaign_id = state["campaign_id"]
    with store.open_session(engine) as session:
        done = {r.id for r in store.list_runs(session, campaign_id=campaign_id, latest_only=False)
                if r.status != RunStatus.RUNNING}
    counts = {"candidates": 0, "accepted": 0}
    for run in state.get("verified", []):
        if run["run_id"] is not None and run["run_id"] in done:
            logger.info("campaign %s: run %s already stored, skipped", campaign_id, run["run_id"])
            continue
        stored = store.run_transaction(
            engine, partial(persist_run, campaign_id=campaign_id, run=run),
            what=f"persisting the {run['category']} run of campaign {campaign_id}",
        )
        for key, value in stored.items():
            counts[key] += value
    with store.open_session(engine) as session:
        status, error = lifecycle.finish(session, campaign_id=campaign_id)
    logger.info("campaign %s: %s, %d candidates stored", campaign_id, status, counts["candidates"])
    verified = state.get("verified", [])
    return CampaignState(summary=CampaignSummary(
        status=status.value, error=error, stored=counts, by_category={r["category"]: run_counts(r) for r in verified}))


def run_counts(run: VerifiedRun) -> RunCounts:
    """Return a run's status and candidate counts, as `catalog summary` counts them per category.

    `accepted` (every candidate the verifier let through) splits into `unverified` (only unknowns open, as
    offline), `flagged` (a real flag) and the clean rest; `rejected` includes the `eval_sets` (benchmarks
    blocked from training). `reasons` counts each flag or rejection code once per candidate.
    """
    labels = Counter(label_verdict(c["reasons"]) for c in run["candidates"])
    accepted = sum(c["decision"] == Decision.ACCEPT for c in run["candidates"])
    reasons: Counter[str] = Counter()
    for candidate in run["candidates"]:
        reasons.update(
            {str(r["code"]) for r in candidate["reasons"]} - set(UNVERIFIED_CODES) - set(INFORMATIONAL_CODES)
        )
    return RunCounts(
        status=run["status"], error=run["error"], candidates=len(run["candidates"]),
        accepted=accepted, unverified=labels[VerdictLabel.UNVERIFIED], flagged=labels[VerdictLabel.FLAGGED],
        eval_sets=labels[VerdictLabel.EVAL_SET], rejected=len(run["candidates"]) - accepted,
        reasons=dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
    )
