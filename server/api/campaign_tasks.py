"""Campaigns running in the service process: background tasks, the event hub behind SSE, restart handling.

`CampaignManager` has the graph prepare a campaign (its backends chosen and its row created, status
`pending`) and launches `graph.campaign.start_campaign` / `rerun_category` as asyncio tasks so a request
returns at once; the graph gets this server's `Settings`. Tasks wait for a slot: on SQLite one campaign
runs at a time per process (the graph's synchronous catalog writes and its checkpointer share one database
write lock, so two campaigns in one event loop would stall each other), on PostgreSQL `PARALLEL_POSTGRES`.
It fans the graph's `CampaignEvent`s out to per-campaign subscriber queues (the SSE stream),
and on start-up resumes campaigns a previous process left unfinished from their LangGraph checkpoint; a
campaign whose resume fails is marked `interrupted` so its failed categories can be re-run. On shutdown the
tasks are cancelled and their campaigns stay `running` in the catalog, which is what the next start resumes.
Replicas sharing one database coordinate through each campaign's lease (`graph.lease`), claimed in the
database before a request is answered (`graph.claims`): a new campaign, a re-run and a takeover each take the
lease first and keep it renewed while their task waits for a slot, so a campaign another replica holds is
neither resumed nor re-run here (a re-run answers 409), and `sweep` claims, every lease period, the
unfinished campaigns whose holder stopped renewing, so a dead replica's work is taken over.
Each campaign is a task on the server's own event loop: the graph reaches the catalog only through its async
port (`graph.catalog_port`), whose blocking calls run in worker threads, so they never stall the HTTP loop;
the manager's port counts them, and `shutdown` waits for those a cancelled campaign left running before the
engine is disposed of. After each run (a launch, a re-run, a resume) the mirror's licences are adopted, as
the CLI adopts them after `campaign run` (`server.usecases.licenses`). Injection points (`subagent`,
`backends`) pass straight through to the graph, for tests and benchmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

from sqlalchemy import Engine

from core.settings import Settings
from core.types import FINAL_CAMPAIGN_STATUSES, CampaignStatus, Category
from curation.catalog import store
from graph import campaign as campaign_graph
from graph import claims
from graph.catalog_port import CatalogPort
from graph.events import CampaignEvent
from graph.lease import HeldLease
from server.usecases.licenses import adopt_mirror_licenses

logger = logging.getLogger(__name__)

PARALLEL_POSTGRES = 4
SHUTDOWN_WAIT_S = 10.0
FINISH_WAIT_S = 10.0  # how long a re-run waits for a run whose status is final to let go of its lease
FINISH_POLL_S = 0.05


def _cancelling() -> bool:
    """True when the current task is being cancelled (a shutdown: nothing more is written then)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class CampaignManager:
    """Owns the campaign tasks of one server process and the queues that stream their events."""

    def __init__(
        self, engine: Engine, settings: Settings, *, overrides: dict[str, Any] | None = None,
        max_parallel: int | None = None,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.overrides = dict(overrides or {})
        if max_parallel is None:
            max_parallel = 1 if engine.dialect.name == "sqlite" else PARALLEL_POSTGRES
        self._slots = asyncio.Semaphore(max_parallel)
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._subscribers: dict[str, set[asyncio.Queue[CampaignEvent]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.catalog = CatalogPort(engine)  # counts every blocking catalog call of this server's campaigns

    # -- events ---------------------------------------------------------------------------------------
    def publish(self, event: CampaignEvent) -> None:
        """Hand `event` to every subscriber of its campaign (safe to call from any thread)."""
        loop = self._loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._deliver(event)
        else:
            loop.call_soon_threadsafe(self._deliver, event)

    def _deliver(self, event: CampaignEvent) -> None:
        for queue in self._subscribers.get(event.campaign_id, set()):
            queue.put_nowait(event)

    def subscribe(self, campaign_id: str) -> asyncio.Queue[CampaignEvent]:
        """Return a new queue that receives the events of `campaign_id` from now on."""
        queue: asyncio.Queue[CampaignEvent] = asyncio.Queue()
        self._subscribers.setdefault(campaign_id, set()).add(queue)
        return queue

    def unsubscribe(self, campaign_id: str, queue: asyncio.Queue[CampaignEvent]) -> None:
        """Stop delivering events to `queue`."""
        queues = self._subscribers.get(campaign_id)
        if queues is not None:
            queues.discard(queue)
            if not queues:
                del self._subscribers[campaign_id]

    # -- tasks ----------------------------------------------------------------------------------------
    def is_active(self, campaign_id: str) -> bool:
        """True while a task for `campaign_id` runs in this process."""
        task = self._tasks.get(campaign_id)
        return task is not None and not task.done()

    def _spawn(self, campaign_id: str, coro: Coroutine[Any, Any, Any], *, what: str, lease: HeldLease) -> None:
        """Run `coro` (holding `lease`, claimed already) as a task when a slot frees."""
        self._loop = asyncio.get_running_loop()
        task = asyncio.create_task(
            self._guarded(campaign_id, coro, what=what, lease=lease), name=f"{what}:{campaign_id}"
        )
        self._tasks[campaign_id] = task

    async def _guarded(self, campaign_id: str, coro: Coroutine[Any, Any, Any], *, what: str, lease: HeldLease) -> None:
        try:
            async with self._slots:
                try:
                    await coro
                finally:  # what the run stored, even a failed one's, gets the mirror's licences as the CLI's does
                    if not _cancelling():
                        await asyncio.to_thread(self._adopt_licenses)
        except asyncio.CancelledError:
            logger.info("%s of campaign %s cancelled; it is resumed at the next start", what, campaign_id)
            raise
        except (campaign_graph.CampaignBusyError, campaign_graph.CampaignLeaseLostError) as exc:
            logger.info("%s of campaign %s left to another process: %s", what, campaign_id, exc)
        except campaign_graph.CampaignError as exc:  # the graph recorded it on the campaign row already
            logger.warning("%s of campaign %s ended: %s", what, campaign_id, exc)
        except Exception as exc:  # recorded on the campaign row, logged with its traceback
            logger.exception("%s of campaign %s failed", what, campaign_id)
            await asyncio.to_thread(lease.release)  # `_mark` takes the lease anew: unless another process has it
            await asyncio.to_thread(self._mark, campaign_id, CampaignStatus.FAILED, f"{what} failed: {exc}")
        finally:
            coro.close()  # a task cancelled while queued never started its coroutine
            # The run released its lease when it ended; one that never started still holds the claim.
            with contextlib.suppress(Exception):
                await asyncio.shield(asyncio.to_thread(lease.release))

    async def _wait_if_finishing(self, campaign_id: str) -> None:
        """Raise CampaignBusyError while a task here works on the campaign; wait (at most `FINISH_WAIT_S`) for one
        that is only finishing (its final status written, its lease or task not let go yet)."""
        task = self._tasks.get(campaign_id)
        if task is None or task.done():
            return
        if not await asyncio.to_thread(self._status_is_final, campaign_id):
            raise campaign_graph.CampaignBusyError(f"campaign {campaign_id} is already running in this server")
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(task), timeout=FINISH_WAIT_S)
        if not task.done():
            raise campaign_graph.CampaignBusyError(f"campaign {campaign_id} is already running in this server")

    def _status_is_final(self, campaign_id: str) -> bool:
        with store.open_session(self.engine, readonly=True) as session:
            return store.get_campaign(session, campaign_id=campaign_id).status in FINAL_CAMPAIGN_STATUSES

    def _adopt_licenses(self) -> None:
        try:
            adopted = adopt_mirror_licenses(engine=self.engine, settings=self.settings)
        except Exception:  # the catalog briefly away: the next review or export adopts them
            logger.warning("mirror licences not adopted after a campaign", exc_info=True)
            return
        if adopted.warning:
            logger.warning("%s", adopted.warning)

    def _mark(self, campaign_id: str, status: CampaignStatus, error: str) -> None:
        claims.mark_unless_completed(engine=self.engine, settings=self.settings, campaign_id=campaign_id,
                                     status=status, error=error)

    async def launch(self, *, categories: list[Category] | None, offline: bool | None) -> str:
        """Create a `pending` campaign under its lease and start it in the background (when a slot frees);
        return its id."""
        # Off the event loop: choosing the backends may probe the Hub, creating the row writes the catalog.
        prepared, lease = await asyncio.to_thread(
            claims.claim_new_campaign, engine=self.engine, settings=self.settings, categories=categories,
            offline=offline, backends=self.overrides.get("backends"),
        )
        coro = campaign_graph.start_campaign(
            prepared, engine=self.engine, settings=self.settings, on_event=self.publish,
            subagent=self.overrides.get("subagent"), lease=lease, catalog=self.catalog,
        )
        self._spawn(prepared.id, coro, what="campaign", lease=lease)
        return prepared.id

    async def rerun(self, *, campaign_id: str, category: Category) -> None:
        """Claim a re-run of one category (the campaign's lease taken, the attempt recorded) and run it in the
        background; raise CampaignBusyError while the campaign runs here or in another process.

        The graph writes a campaign's final status before its run lets go (checkpoints deleted, lease released,
        task ended), so a client acting on a final status it just read would be refused for that moment: a
        campaign whose status is final is only finishing, and the claim waits for it (at most `FINISH_WAIT_S`).
        """
        await self._wait_if_finishing(campaign_id)
        deadline = asyncio.get_running_loop().time() + FINISH_WAIT_S
        while True:
            try:
                lease = await asyncio.to_thread(claims.claim_rerun, engine=self.engine, settings=self.settings,
                                                campaign_id=campaign_id, category=category)
                break
            except campaign_graph.CampaignBusyError:
                finishing = await asyncio.to_thread(self._status_is_final, campaign_id)
                if not finishing or asyncio.get_running_loop().time() >= deadline:
                    raise
                await asyncio.sleep(FINISH_POLL_S)  # another replica releasing its lease
        coro = campaign_graph.rerun_category(
            engine=self.engine, settings=self.settings, campaign_id=campaign_id, category=category,
            on_event=self.publish, lease=lease, catalog=self.catalog, **self.overrides,
        )
        self._spawn(campaign_id, coro, what=f"rerun of {category.value}", lease=lease)

    async def resume_unfinished(self) -> list[str]:
        """Claim and resume every campaign left pending/running that no process holds; return their ids."""
        ids = await asyncio.to_thread(campaign_graph.unfinished_campaigns, engine=self.engine)
        resumed = []
        for campaign_id in ids:
            if self.is_active(campaign_id):
                continue
            lease = await asyncio.to_thread(claims.claim_unfinished, engine=self.engine, settings=self.settings,
                                            campaign_id=campaign_id)
            if lease is None:
                logger.debug("campaign %s is held elsewhere or finished: left to it", campaign_id)
                continue
            logger.info("resuming unfinished campaign %s from its checkpoint", campaign_id)
            self._spawn(campaign_id, self._resume_or_interrupt(campaign_id, lease), what="resume", lease=lease)
            resumed.append(campaign_id)
        return resumed

    async def sweep(self, every_s: float) -> None:
        """Resume, every `every_s` seconds until cancelled, unfinished campaigns nobody holds a lease on."""
        while True:
            await asyncio.sleep(every_s)
            try:
                taken = await self.resume_unfinished()
            except Exception:  # the database may be briefly away; the next sweep tries again
                logger.warning("sweep for abandoned campaigns failed", exc_info=True)
                continue
            if taken:
                logger.warning("took over %d abandoned campaign(s): %s", len(taken), ", ".join(taken))

    async def _resume_or_interrupt(self, campaign_id: str, lease: HeldLease) -> None:
        try:
            await campaign_graph.resume_campaign(
                engine=self.engine, settings=self.settings, campaign_id=campaign_id, on_event=self.publish,
                lease=lease, catalog=self.catalog, **self.overrides,
            )
        except asyncio.CancelledError:
            raise
        except campaign_graph.CampaignFinishedError as exc:  # its owner finished it meanwhile: nothing to do
            logger.info("resume of campaign %s not needed: %s", campaign_id, exc)
        except (campaign_graph.CampaignBusyError, campaign_graph.CampaignLeaseLostError) as exc:
            logger.info("resume of campaign %s left to another process: %s", campaign_id, exc)
        except Exception as exc:  # the campaign stays re-runnable category by category
            logger.exception("resume of campaign %s failed; marking it interrupted", campaign_id)
            await asyncio.to_thread(lease.release)  # `_mark` takes the lease anew: unless another process has it
            await asyncio.to_thread(self._mark, campaign_id, CampaignStatus.INTERRUPTED, f"resume failed: {exc}")

    async def shutdown(self) -> None:
        """Cancel the running tasks (their campaigns stay `running` and are resumed at the next start); return
        once their blocking catalog calls are done (at most `SHUTDOWN_WAIT_S`), so none holds a pooled
        connection when the engine is disposed of."""
        tasks = [t for t in self._tasks.values() if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=SHUTDOWN_WAIT_S)
        for task in tasks:
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: a task that failed while cancelled is logged by `_guarded`
        self._tasks.clear()
        if not await self.catalog.drain(SHUTDOWN_WAIT_S):
            logger.warning("shutdown: blocking catalog calls of cancelled campaigns still running after %.0f s",
                           SHUTDOWN_WAIT_S)
