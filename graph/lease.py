"""Holding a campaign's lease while its graph runs: taken before the first write, renewed, released at the end.

Every way of running a campaign (a new run, a resume, a re-run of one category; from the CLI or any service
replica) goes through `graph.campaign._drive`, which holds the campaign's lease in the catalog
(`curation.catalog.leases`) for as long as the graph runs. So exactly one process works on a campaign at a
time: a second one is refused (`LeaseHeldElsewhere`) before it touches a run row, and a dead one's work is
taken over once its lease expires. A heartbeat renews the lease every third of its time; if a renewal finds
the lease taken (this process stalled past expiry and another took over), the run is cancelled rather than
left writing beside the new owner. The heartbeat is a thread of its own, not a task on the graph's loop nor a
job in its default thread pool: under load the pool was queued with embedding and search work and the loop
blocked in catalog calls, and a lease went 29.9 s of its 30 s unrenewed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from curation.catalog import store
from graph.errors import GraphError

logger = logging.getLogger(__name__)


class LeaseHeldElsewhere(GraphError):
    """Another process holds the campaign's lease: it is running, resuming or re-running it now."""


class LeaseLost(GraphError):
    """The lease expired while this process ran the campaign, and another process took it over."""


class HeldLease:
    """The lease of one campaign for one run of its graph (`async with HeldLease(...).held():`)."""

    def __init__(self, engine: Engine, campaign_id: str, *, ttl_s: float) -> None:
        self.engine = engine
        self.campaign_id = campaign_id
        self.name = store.campaign_lease(campaign_id)
        self.owner = store.new_owner()
        self.ttl_s = ttl_s
        self.lost = False

    def _acquire(self) -> None:
        with store.open_session(self.engine) as session:
            lease = store.acquire_lease(session, name=self.name, owner=self.owner, ttl_s=self.ttl_s)
            holder = None if lease is not None else store.lease_holder(session, name=self.name)
        if lease is None:
            who = f"{holder.owner}, lease until {holder.expires_at:%H:%M:%S} UTC" if holder else "another process"
            raise LeaseHeldElsewhere(f"campaign {self.campaign_id} is being worked on elsewhere ({who})")

    def _renew(self) -> bool:
        with store.open_session(self.engine) as session:
            return store.renew_lease(session, name=self.name, owner=self.owner, ttl_s=self.ttl_s)

    def _release(self) -> None:
        with store.open_session(self.engine) as session:
            store.release_lease(session, name=self.name, owner=self.owner)

    def _heartbeat(self, stop: threading.Event, loop: asyncio.AbstractEventLoop, worker: asyncio.Task[object]) -> None:
        while not stop.wait(self.ttl_s / 3):
            try:
                renewed = self._renew()
            except Exception:  # a database hiccup: the lease still has two thirds of its time; try again
                logger.warning("campaign %s: renewing its lease failed; retrying", self.campaign_id, exc_info=True)
                continue
            if not renewed:
                logger.error("campaign %s: its lease was taken over by another process; stopping here",
                             self.campaign_id)
                self.lost = True
                with contextlib.suppress(RuntimeError):  # the loop may have closed meanwhile
                    loop.call_soon_threadsafe(worker.cancel)
                return

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[HeldLease]:
        """Hold the lease for the block: raise LeaseHeldElsewhere if another process holds it, LeaseLost
        if it is lost on the way; released when the block ends, however it ends."""
        await asyncio.to_thread(self._acquire)
        worker = asyncio.current_task()
        assert worker is not None
        stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(stop, asyncio.get_running_loop(), worker),
                                name=f"lease:{self.campaign_id}", daemon=True)
        beat.start()
        try:
            yield self
        except asyncio.CancelledError:
            if self.lost:
                worker.uncancel()
                raise LeaseLost(f"campaign {self.campaign_id}: another process took over its lease") from None
            raise
        finally:
            stop.set()
            beat.join()  # at most one renewal in flight: a single short catalog write
            if not self.lost:
                try:
                    await asyncio.shield(asyncio.to_thread(self._release))
                except SQLAlchemyError as exc:  # the catalog locked or gone: the lease runs out by itself
                    logger.warning("campaign %s: could not release its lease (%s); it expires within %.0f s",
                                   self.campaign_id, str(getattr(exc, "orig", None) or exc).splitlines()[0], self.ttl_s)
