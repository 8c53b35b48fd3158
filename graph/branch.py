"""One category's branch of the fan-out: open a run row, call the subagent, catch everything, report back.

Each `Send` from the supervisor lands here with one category. The branch never raises for a subagent
failure (LangGraph re-raises a failing node for the whole superstep, issue #8277): an exception, a timeout or
a garbage return becomes a failure record in the branch result, logged and shown as an event. Only
cancellation (a killed process, a cancelled task) propagates, and then the checkpoint lets a resume re-run
just this branch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial
from typing import Any

from langgraph.runtime import Runtime
from sqlmodel import Session

from core.candidates import Deliverable
from core.types import Category, ReasonCode, RunStatus
from curation.catalog import store
from graph.context import CampaignContext
from graph.events import CampaignEvent, emit
from graph.state import BranchInput, BranchResult
from graph.verifier import judge_run, reason

logger = logging.getLogger(__name__)

INTERRUPTED = "interrupted: the process stopped before this attempt finished"


def open_run(session: Session, *, campaign_id: str, category: str) -> int:
    """Close an attempt a crash left running for this category (as failed), start a new one (or the one a
    re-run's claim recorded), return its id."""
    close_interrupted(session, campaign_id=campaign_id, category=category)
    run_id = store.start_run(session, campaign_id=campaign_id, category=category).id
    assert run_id is not None
    return run_id


def close_interrupted(session: Session, *, campaign_id: str, category: str) -> None:
    """Mark failed the category's latest attempt if it is still `running`: whoever ran it stopped (a crash, or
    a takeover), since the caller holds the campaign's lease now."""
    for run in store.list_runs(session, campaign_id=campaign_id, latest_only=True):
        if run.category == category and run.status == RunStatus.RUNNING and run.id is not None:
            logger.warning("campaign %s: closing interrupted run %s of %s", campaign_id, run.id, category)
            store.finish_run(
                session, run_id=run.id, status=RunStatus.FAILED.value, planner=None, queries=[],
                results_per_backend={}, candidates_found=0, candidates_accepted=0, error=INTERRUPTED,
                reasons=[reason(ReasonCode.MISSING_DELIVERABLE, INTERRUPTED, blocking=True)],
            )


async def call_subagent(context: CampaignContext, category: Category) -> tuple[Deliverable | None, str | None]:
    """Run the subagent under the branch deadline; return (deliverable, None) or (None, why there is none)."""
    try:
        result: Any = await asyncio.wait_for(
            context.subagent(
                category, backends=context.backends, llm=context.llm, retries=context.search_retries,
                timeout_s=context.search_timeout_s,
            ),
            timeout=context.branch_timeout_s,
        )
    except TimeoutError:
        return None, f"no deliverable within {context.branch_timeout_s:g} s (subagent timed out)"
    except Exception as exc:  # noqa: BLE001 - every failure becomes the run's recorded error, with a traceback logged
        logger.exception("subagent %s raised", category.value)
        return None, f"subagent raised {type(exc).__name__}: {exc}"
    if not isinstance(result, Deliverable):
        return None, f"subagent returned {type(result).__name__}, not a Deliverable"
    if result.category != category:
        return None, f"subagent for {category.value} delivered for {result.category.value}"
    return result, None


async def run_branch(state: BranchInput, runtime: Runtime[CampaignContext]) -> dict[str, list[BranchResult]]:
    """The `subagent` node: one category's search, as one appended `BranchResult`."""
    context = runtime.context
    campaign_id, category = state["campaign_id"], Category(state["category"])
    # In a worker thread (the port): a blocking SQLite write on the event loop could wait on a transaction the
    # async checkpointer holds on the same loop, and stall the whole campaign until the busy timeout.
    run_id = await context.catalog.call(partial(open_run, campaign_id=campaign_id, category=category.value))
    emit(context.on_event, CampaignEvent(
        campaign_id=campaign_id, kind="run_started", category=category.value, status=RunStatus.RUNNING.value,
        detail={"run_id": run_id},
    ))
    started = time.monotonic()
    deliverable, error = await call_subagent(context, category)
    elapsed = time.monotonic() - started
    status, reasons = judge_run(deliverable, error)
    if status != RunStatus.SUCCEEDED:
        logger.warning("campaign %s: %s %s: %s", campaign_id, category.value, status, error or reasons)
    queries = deliverable.queries if deliverable else []
    notes = deliverable.notes if deliverable else []
    for note in notes:  # e.g. an LLM answer that was garbage and replaced by the deterministic scorer
        logger.warning("campaign %s: %s: %s", campaign_id, category.value, note)
    emit(context.on_event, CampaignEvent(
        campaign_id=campaign_id, kind="run_finished", category=category.value, status=status,
        detail={
            "run_id": run_id, "queries": len(queries), "failed_queries": sum(q.status == "failed" for q in queries),
            "candidates": len(deliverable.candidates) if deliverable else 0, "elapsed_s": round(elapsed, 3),
            "error": error, "reasons": [r["code"] for r in reasons], "notes": notes,
        },
    ))
    result = BranchResult(
        category=category.value, run_id=run_id,
        deliverable=deliverable.model_dump(mode="json") if deliverable else None,
        error=error, elapsed_s=elapsed, status=status, reasons=reasons,
    )
    return {"results": [result]}
