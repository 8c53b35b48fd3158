"""Running campaigns: start a new one, resume one from its checkpoint, re-run one category, list unfinished ones.

These are the entry points the CLI and the service call, each taking the process's `Settings` from its caller.
A new campaign has one way in: `prepare_campaign` chooses its search backends (`graph.search`) and creates
its `pending` row, `start_campaign` runs it from the start (`run_campaign` does both, for the CLI). A
campaign's LangGraph thread id is its id, so a killed process resumes (`resume_campaign`) where the
checkpoint left off (a finished graph's checkpoints are deleted: its results are in the catalog;
`prune_checkpoints` clears what older catalogs kept); a single category re-runs on a thread of its own
(`<id>:rerun:<category>:<n>`) through the same graph, adding a new attempt without touching the other
categories. Each holds the campaign's lease
in the catalog (`graph.lease`; taken here, or already by the service's claim in `graph.claims`), so one process
at a time works on a campaign: a second gets CampaignBusyError, and a dead one's campaign is taken over when
its lease expires. Every catalog write and checkpoint of the run is fenced by the lease's generation, so a run
taken over stops at its next write (CampaignLeaseLostError) and a resume that finds the campaign finished
leaves it as it is (CampaignFinishedError). A run's catalog calls go through the async port in its context
(`graph.catalog_port`), in worker threads, so a service runs a campaign as a task on its own event loop and
hands in its port (`catalog=`) to wait for them at shutdown; the CLI runs one with `asyncio.run`. Subagent and
backends are injectable for tests and benchmarks; by default they are the real agents (`agents.subagent.run_subagent`,
the backends `graph.search.choose_search` picks).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from sqlalchemy import Engine
from sqlmodel import Session

from agents.llm import make_llm
from agents.search.base import SearchBackend
from agents.subagent import run_subagent
from core.settings import Settings
from core.types import (
    COMPLETED_CAMPAIGN_STATUSES,
    UNFINISHED_CAMPAIGN_STATUSES,
    CampaignStatus,
    Category,
    RunStatus,
    parse_category,
)
from curation.catalog import store
from curation.catalog.models import Campaign
from graph import lifecycle
from graph.builder import build_graph
from graph.catalog_port import CatalogPort
from graph.checkpoint import fence_writes, open_checkpointer
from graph.context import CampaignContext, SubagentRunner
from graph.errors import GraphError
from graph.events import CampaignEvent, EventCallback, emit
from graph.lease import HeldLease, LeaseHeldElsewhere, LeaseLost, check_fence, refused_by_fence
from graph.search import SearchPlan, choose_search
from graph.state import CampaignState

logger = logging.getLogger(__name__)


class CampaignError(GraphError):
    """A campaign request that cannot be carried out (the message says why)."""


class CampaignFinishedError(CampaignError):
    """Asked to start or resume a campaign that already finished."""


class CampaignAlreadyStartedError(CampaignError):
    """Asked to start a campaign that is no longer pending (another process started it): resume it instead."""


class CategoryNotInCampaignError(CampaignError):
    """Asked to re-run a category the campaign never searched."""


class CampaignBusyError(CampaignError):
    """Someone is running, resuming or re-running the campaign now: another process (a replica, a CLI run)
    holding its lease, or in the service another task of the same process (the one busy error for both)."""


class CampaignLeaseLostError(CampaignError):
    """This process stalled past its lease and another took the campaign over; this run stopped."""


class CampaignRunError(CampaignError):
    """The graph itself failed (not a subagent: those are recorded per run); the campaign is marked failed."""


@dataclass(frozen=True)
class PreparedCampaign:
    """A new campaign's pending row and what it will search with: what `start_campaign` runs."""

    id: str
    categories: list[str]
    search: SearchPlan


def make_context(
    engine: Engine, settings: Settings, search: SearchPlan, *, on_event: EventCallback | None,
    subagent: SubagentRunner | None, catalog: CatalogPort | None = None,
) -> CampaignContext:
    """Return the run context: the catalog on `engine` through the port (counting its calls with `catalog`'s
    when given), the real subagent unless injected, the plan's backends, limits from `settings`."""
    return CampaignContext(
        catalog=(catalog or CatalogPort(engine)).on(engine), subagent=subagent or run_subagent,
        backends=list(search.backends),
        llm=make_llm(settings), on_event=on_event, offline=search.offline, search_retries=settings.search_retries,
        search_timeout_s=settings.search_timeout_s, branch_timeout_s=settings.campaign_branch_timeout_s,
        lookup_timeout_s=settings.search_timeout_s, lease_ttl_s=settings.lease_ttl_s,
        target_language=settings.target_language,
    )


async def _drive(
    context: CampaignContext, *, campaign_id: str, thread_id: str, categories: list[str], notes: list[str],
    resume: bool, max_concurrency: int | None = None, must_be_pending: bool = False, must_be_unfinished: bool = False,
    lease: HeldLease | None = None,
) -> CampaignState:
    """Run (or resume) the graph on `thread_id` holding the campaign's lease (`lease`, taken already by the
    caller, or taken here: CampaignBusyError while another process holds it), every catalog write fenced by it;
    mark the campaign failed if the graph itself breaks. With `must_be_pending`, refuse
    (CampaignAlreadyStartedError) a campaign another process started before this one got the lease; with
    `must_be_unfinished` (a resume), one that finished meanwhile (CampaignFinishedError), leaving it as it is."""
    lease = lease or HeldLease(context.catalog.engine, campaign_id, ttl_s=context.lease_ttl_s)
    try:
        async with lease.held():
            context = replace(context, catalog=context.catalog.on(lease.fenced_engine))
            status = (await context.catalog.call(partial(_campaign, campaign_id=campaign_id), readonly=True)).status
            if must_be_pending and status != CampaignStatus.PENDING:
                raise CampaignAlreadyStartedError(
                    f"campaign {campaign_id} is {status}, not pending: resume it instead of starting it")
            if must_be_unfinished and status in COMPLETED_CAMPAIGN_STATUSES:
                raise CampaignFinishedError(f"campaign {campaign_id} already finished ({status}); left as it is")
            return await _drive_held(context, campaign_id=campaign_id, thread_id=thread_id, categories=categories,
                                     notes=notes, resume=resume, max_concurrency=max_concurrency)
    except LeaseHeldElsewhere as exc:
        raise CampaignBusyError(str(exc)) from None
    except LeaseLost as exc:
        raise CampaignLeaseLostError(str(exc)) from None
    finally:
        if context.llm is not None:  # its HTTP connections close on the loop that opened them
            await context.llm.aclose()


async def _drive_held(
    context: CampaignContext, *, campaign_id: str, thread_id: str, categories: list[str], notes: list[str],
    resume: bool, max_concurrency: int | None,
) -> CampaignState:
    catalog = context.catalog
    await catalog.call(partial(lifecycle.begin, campaign_id=campaign_id))
    emit(context.on_event, CampaignEvent(
        campaign_id=campaign_id, kind="campaign_started", status=CampaignStatus.RUNNING, detail={
            "categories": categories, "offline": context.offline, "backends": [b.name for b in context.backends],
            "notes": notes, "resumed": resume, "thread_id": thread_id}))
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    if max_concurrency is not None:
        config["max_concurrency"] = max_concurrency  # at most this many branches at once (default: all)
    try:
        async with open_checkpointer(catalog.engine.url.render_as_string(hide_password=False)) as saver:
            fence_writes(saver, partial(catalog.run, check_fence))
            graph = build_graph(saver)
            snapshot = await graph.aget_state(config) if resume else None
            checkpointed = snapshot is not None and bool(snapshot.values)
            if (snapshot is not None and checkpointed and not snapshot.next) or (
                    resume and not checkpointed and _persisted(await _latest(catalog, campaign_id), categories)):
                # The graph had finished (its checkpoints are deleted then); only the status lagged.
                output = cast(CampaignState, dict(snapshot.values) if snapshot is not None and checkpointed else {})
                await catalog.call(partial(lifecycle.finish, campaign_id=campaign_id))
            else:
                start: CampaignState | None = None
                if not checkpointed:
                    if resume:  # e.g. a one-category re-run killed mid-run: redo what was unfinished, no more
                        categories = _unfinished(await _latest(catalog, campaign_id), categories)
                    start = CampaignState(campaign_id=campaign_id, categories=categories)
                output = cast(CampaignState, await graph.ainvoke(start, config, context=context, durability="sync"))
            await forget_thread(saver, thread_id)
    except Exception as exc:
        if refused_by_fence(exc):  # another process took the campaign over: it is theirs to finish, not ours to mark
            raise store.LeaseFencedError(f"campaign {campaign_id}: its lease was taken over") from exc
        if store.is_outage(exc):  # the catalog database went down or filled up; the caller reports it, once
            logger.info("campaign %s: the catalog database failed: %s", campaign_id, store.outage_reason(exc))
        else:
            logger.exception("campaign %s: the graph failed", campaign_id)
        error = f"graph failed: {type(exc).__name__}: {exc}"
        await catalog.call(partial(lifecycle.fail, campaign_id=campaign_id, error=error))
        emit(context.on_event, CampaignEvent(campaign_id=campaign_id, kind="campaign_finished",
                                             status=CampaignStatus.FAILED, detail={"error": error}))
        raise CampaignRunError(f"campaign {campaign_id}: {error} (resume it with `campaign resume`)") from exc
    final = await catalog.call(partial(_campaign, campaign_id=campaign_id))
    emit(context.on_event, CampaignEvent(campaign_id=campaign_id, kind="campaign_finished", status=final.status,
                                         detail={"error": final.error, **output.get("summary", {})}))
    return output


_OPEN_RUNS = (RunStatus.PENDING, RunStatus.RUNNING)  # claimed for a re-run, or started: not closed yet


def _campaign(session: Session, *, campaign_id: str) -> Campaign:
    return store.get_campaign(session, campaign_id=campaign_id)


def _latest_run_id(session: Session, *, campaign_id: str, category: str) -> int | None:
    runs = [r for r in store.list_runs(session, campaign_id=campaign_id, latest_only=True) if r.category == category]
    return runs[0].id if runs else None


async def _latest(catalog: CatalogPort, campaign_id: str) -> dict[str, str]:
    """Return each category's latest run status."""
    def read(session: Session) -> dict[str, str]:
        return {r.category: r.status for r in store.list_runs(session, campaign_id=campaign_id)}

    return await catalog.call(read, readonly=True)


def _unfinished(latest: dict[str, str], categories: list[str]) -> list[str]:
    """Return the categories whose latest run the persist node never closed (all when none was closed)."""
    open_ones = [c for c in categories if latest.get(c, RunStatus.RUNNING) in _OPEN_RUNS]
    return open_ones or categories


def _persisted(latest: dict[str, str], categories: list[str]) -> bool:
    """Whether the persist node already closed a run of every category (runs stay `running` until it does)."""
    return all(c in latest and latest[c] not in _OPEN_RUNS for c in categories)




async def forget_thread(saver: BaseCheckpointSaver[str], thread_id: str) -> None:
    """Delete a finished graph thread's checkpoints: they exist to resume an unfinished campaign, and a finished
    one's results live in the catalog (each of its ~6 checkpoints holds every candidate, ~1 MB on the offline
    index). A failure here costs only disk, so it is logged, never raised."""
    try:
        await saver.adelete_thread(thread_id)
    except Exception:
        logger.warning("could not delete the checkpoints of finished thread %s", thread_id, exc_info=True)


@dataclass(frozen=True)
class PruneResult:
    """What `prune_checkpoints` did: threads deleted, and threads kept because their campaign is unfinished
    (a resume needs them) or being worked on now (its lease is held)."""

    deleted: list[str]
    unfinished: list[str]
    busy: list[str]


async def prune_checkpoints(*, engine: Engine, settings: Settings) -> PruneResult:
    """Delete the checkpoints of every finished campaign and re-run (threads `<id>` and `<id>:rerun:...`) that
    no process is working on: what catalogs made before finished threads were deleted at once still hold."""
    async with open_checkpointer(engine.url.render_as_string(hide_password=False)) as saver:
        with engine.connect() as conn:
            # The thread ids only: the saver's `alist` would load every checkpoint (each ~1 MB). Both LangGraph
            # savers keep them in a `checkpoints` table.
            rows = conn.exec_driver_sql("SELECT DISTINCT thread_id FROM checkpoints").scalars()
            threads = sorted(str(t) for t in rows)
        by_campaign: dict[str, list[str]] = {}
        for thread in threads:
            by_campaign.setdefault(thread.split(":rerun:")[0], []).append(thread)
        deleted: list[str] = []
        unfinished: list[str] = []
        busy: list[str] = []
        for campaign_id, mine in by_campaign.items():
            with store.open_session(engine) as session:
                try:
                    status = store.get_campaign(session, campaign_id=campaign_id).status
                except store.CampaignNotFoundError:
                    status = None  # its row is gone: nothing can resume it
            if status is not None and status not in COMPLETED_CAMPAIGN_STATUSES:
                unfinished += mine
                continue
            try:  # a re-run of a finished campaign holds the campaign's lease while it runs
                async with HeldLease(engine, campaign_id, ttl_s=settings.lease_ttl_s).held():
                    for thread in mine:
                        await saver.adelete_thread(thread)
                    deleted += mine
            except LeaseHeldElsewhere:
                busy += mine
    return PruneResult(deleted=deleted, unfinished=unfinished, busy=busy)


def prepare_campaign(
    *, engine: Engine, settings: Settings, categories: list[Category] | None = None, offline: bool | None = None,
    campaign_id: str | None = None, backends: list[SearchBackend] | None = None,
) -> PreparedCampaign:
    """Choose a new campaign's backends and create its `pending` row over `categories` (default: all ten);
    return it for `start_campaign`. Blocking (it may probe the Hub): services call it off their event loop."""
    wanted = [parse_category(str(c)).value for c in (categories or list(Category))]
    chosen: list[str] = [c.value for c in Category if c.value in wanted]
    search = choose_search(settings, offline=offline, backends=backends)
    with store.open_session(engine) as session:
        campaign = store.create_campaign(session, categories=chosen, offline=search.offline, backends=search.names,
                                         campaign_id=campaign_id)
        return PreparedCampaign(id=campaign.id, categories=list(campaign.categories), search=search)


async def start_campaign(
    campaign: PreparedCampaign, *, engine: Engine, settings: Settings, on_event: EventCallback | None = None,
    subagent: SubagentRunner | None = None, max_concurrency: int | None = None, lease: HeldLease | None = None,
    catalog: CatalogPort | None = None,
) -> str:
    """Run a prepared campaign from the start and return its id (holding `lease` when the caller took it
    already); CampaignAlreadyStartedError when another process started it first. `max_concurrency` caps how
    many subagents run at once (default: all; 1 runs them one after another, as the fan-out benchmark's
    baseline does). The final status is succeeded, partial (some runs failed or came back empty) or failed
    (all did)."""
    context = make_context(engine, settings, campaign.search, on_event=on_event, subagent=subagent, catalog=catalog)
    await _drive(context, campaign_id=campaign.id, thread_id=campaign.id, categories=campaign.categories,
                 notes=campaign.search.notes, resume=False, max_concurrency=max_concurrency, must_be_pending=True,
                 lease=lease)
    return campaign.id


async def run_campaign(
    *, engine: Engine, settings: Settings, categories: list[Category] | None = None, offline: bool | None = None,
    campaign_id: str | None = None, on_event: EventCallback | None = None, subagent: SubagentRunner | None = None,
    backends: list[SearchBackend] | None = None, max_concurrency: int | None = None,
) -> str:
    """Prepare and start a new campaign over `categories` (default: all ten) and return its id (`campaign run`).

    With the id of a campaign that exists, resume it from its checkpoint instead (`resume_campaign`); the id
    of a finished one raises CampaignFinishedError.
    """
    if campaign_id is not None:
        with store.open_session(engine) as session:
            try:
                store.get_campaign(session, campaign_id=campaign_id)
                exists = True
            except store.CampaignNotFoundError:
                exists = False
        if exists:
            return await resume_campaign(engine=engine, settings=settings, campaign_id=campaign_id,
                                         on_event=on_event, subagent=subagent, backends=backends)
    prepared = prepare_campaign(engine=engine, settings=settings, categories=categories, offline=offline,
                                campaign_id=campaign_id, backends=backends)
    return await start_campaign(prepared, engine=engine, settings=settings, on_event=on_event, subagent=subagent,
                                max_concurrency=max_concurrency)


async def resume_campaign(
    *, engine: Engine, settings: Settings, campaign_id: str, on_event: EventCallback | None = None,
    subagent: SubagentRunner | None = None, backends: list[SearchBackend] | None = None,
    lease: HeldLease | None = None, catalog: CatalogPort | None = None,
) -> str:
    """Continue an unfinished (or graph-failed) campaign from its checkpoint; finished branches do not re-run.
    A campaign found finished (before or once its lease is held) raises CampaignFinishedError, untouched."""
    campaign = await (catalog or CatalogPort(engine)).on(engine).call(partial(_campaign, campaign_id=campaign_id))
    status, offline, categories, thread_id = campaign.status, campaign.offline, campaign.categories, campaign.thread_id
    if status in COMPLETED_CAMPAIGN_STATUSES:
        raise CampaignFinishedError(f"campaign {campaign_id} already finished ({status}); re-run a category instead")
    search = await asyncio.to_thread(choose_search, settings, offline=offline, backends=backends)  # may probe the Hub
    context = make_context(engine, settings, search, on_event=on_event, subagent=subagent, catalog=catalog)
    await _drive(context, campaign_id=campaign_id, thread_id=thread_id, categories=list(categories),
                 notes=search.notes, resume=True, must_be_unfinished=True, lease=lease)
    return campaign_id


async def rerun_category(
    *, engine: Engine, settings: Settings, campaign_id: str, category: Category | str,
    on_event: EventCallback | None = None, subagent: SubagentRunner | None = None,
    backends: list[SearchBackend] | None = None, lease: HeldLease | None = None, catalog: CatalogPort | None = None,
) -> int:
    """Run one category of a campaign again as a new attempt, leaving the others alone; return the new run id.
    With `lease` (taken by `graph.claims.claim_rerun`, which recorded the attempt) the claimed attempt runs."""
    chosen = parse_category(str(category)).value
    port = (catalog or CatalogPort(engine)).on(engine)
    campaign = await port.call(partial(_campaign, campaign_id=campaign_id))
    offline, categories = campaign.offline, list(campaign.categories)
    if chosen not in categories:
        raise CategoryNotInCampaignError(
            f"campaign {campaign_id} did not search {chosen!r}; its categories: {', '.join(categories)}")
    search = await asyncio.to_thread(choose_search, settings, offline=offline, backends=backends)  # may probe the Hub
    context = make_context(engine, settings, search, on_event=on_event, subagent=subagent, catalog=port)
    thread_id = f"{campaign_id}:rerun:{chosen}:{uuid.uuid4().hex[:8]}"
    await _drive(context, campaign_id=campaign_id, thread_id=thread_id, categories=[chosen], notes=search.notes,
                 resume=False, lease=lease)
    latest = await port.call(partial(_latest_run_id, campaign_id=campaign_id, category=chosen))
    assert latest is not None, "a re-run always leaves a run row"
    return latest


def unfinished_campaigns(*, engine: Engine) -> list[str]:
    """Return the ids of campaigns left pending or running (a crash or a restart stopped them), oldest first."""
    with store.open_session(engine) as session:
        campaigns = store.list_campaigns(session, limit=1_000_000)
    return [c.id for c in reversed(campaigns) if c.status in UNFINISHED_CAMPAIGN_STATUSES]


def latest_runs(*, engine: Engine, campaign_id: str) -> list[dict[str, Any]]:
    """Return each category's latest run of a campaign as plain dicts (for status displays)."""
    with store.open_session(engine) as session:
        store.get_campaign(session, campaign_id=campaign_id)
        runs = store.list_runs(session, campaign_id=campaign_id, latest_only=True)
        return [r.model_dump(mode="json") for r in runs]

