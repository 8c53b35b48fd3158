"""Holding a campaign's lease while its graph runs: taken before the first write, renewed, released at the end.

Every way of running a campaign (a new run, a resume, a re-run of one category; from the CLI or any service
replica) goes through `graph.campaign._drive`, which holds the campaign's lease in the catalog
(`curation.catalog.leases`) for as long as the graph runs. So exactly one process works on a campaign at a
time: a second one is refused (`LeaseHeldElsewhere`) before it touches a run row, and a dead one's work is
taken over once its lease expires. The service takes the lease when it accepts the work (`acquire`, before
its answer) and hands the held lease to the task that runs it later.

The lease fences the holder's writes: `fenced_engine` is the catalog engine whose every writing session
commits only while this holder's generation is still the lease's, so a holder that stalled past expiry and was
taken over cannot write beside the new owner; its write fails (`LeaseFencedError`) and the run stops.

Renewals come from one `LeaseKeeper` thread per process and database, on a database connection of its own,
every sixth of the lease's time: under load the graph's own work had every pooled connection checked out
and its thread pool queued, and a lease went 29.9 s of its 30 s unrenewed. The keeper records the longest
gap between two renewals of each lease (`max_gap_s`) and warns when it passes half the lease; if a renewal
finds the lease taken, the run is cancelled rather than left writing beside the new owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from curation.catalog import store
from graph.errors import GraphError

logger = logging.getLogger(__name__)

RENEWALS_PER_TTL = 6  # renew every sixth of the lease's time: five missed in a row before it can expire


class LeaseHeldElsewhere(GraphError):
    """Another process holds the campaign's lease: it is running, resuming or re-running it now."""


class LeaseLost(GraphError):
    """The lease expired while this process ran the campaign, and another process took it over."""


class HeldLease:
    """The lease of one campaign for one piece of work (`acquire()`, then `async with lease.held():`)."""

    def __init__(self, engine: Engine, campaign_id: str, *, ttl_s: float) -> None:
        self.engine = engine
        self.campaign_id = campaign_id
        self.name = store.campaign_lease(campaign_id)
        self.owner = store.new_owner()
        self.ttl_s = ttl_s
        self.generation: int | None = None
        self.lost = False
        self.renewed_at = 0.0  # time.monotonic() of the last renewal that went through
        self.max_gap_s = 0.0  # the longest time between two renewals (or the acquire and the first)
        self._worker: tuple[asyncio.AbstractEventLoop, asyncio.Task[object]] | None = None

    @property
    def fence(self) -> store.Fence:
        assert self.generation is not None, "acquire the lease first"
        return store.Fence(name=self.name, owner=self.owner, generation=self.generation)

    @property
    def fenced_engine(self) -> Engine:
        """The catalog engine whose writing sessions commit only while this lease is still ours."""
        return store.fenced(self.engine, self.fence)

    def acquire(self) -> None:
        """Take the lease (blocking) and start renewing it; raise LeaseHeldElsewhere while another holds it."""
        with store.open_session(self.engine) as session:
            lease = store.acquire_lease(session, name=self.name, owner=self.owner, ttl_s=self.ttl_s)
            holder = None if lease is not None else store.lease_holder(session, name=self.name)
            generation = None if lease is None else lease.generation
        if generation is None:
            who = f"{holder.owner}, lease until {holder.expires_at:%H:%M:%S} UTC" if holder else "another process"
            raise LeaseHeldElsewhere(f"campaign {self.campaign_id} is being worked on elsewhere ({who})")
        self.generation = generation
        self.renewed_at = time.monotonic()
        keeper_for(self.engine).add(self)

    def release(self) -> None:
        """Stop renewing and give the lease up (blocking); safe to call twice, and after the lease was lost."""
        keeper_for(self.engine).remove(self)
        if self.lost or self.generation is None:
            return
        try:
            with store.open_session(self.engine) as session:
                store.release_lease(session, name=self.name, owner=self.owner)
        except SQLAlchemyError as exc:  # the catalog locked or gone: the lease runs out by itself
            logger.warning("campaign %s: could not release its lease (%s); it expires within %.0f s",
                           self.campaign_id, str(getattr(exc, "orig", None) or exc).splitlines()[0], self.ttl_s)
        if self.max_gap_s > self.ttl_s / 2:
            logger.warning("campaign %s: its lease went %.1f s unrenewed at the worst (lease %.0f s)",
                           self.campaign_id, self.max_gap_s, self.ttl_s)

    def renewed(self, ok: bool) -> None:
        """The keeper's report of one renewal: note the gap, or stop the work when the lease was taken over."""
        now = time.monotonic()
        if ok:
            self.max_gap_s = max(self.max_gap_s, now - self.renewed_at)
            self.renewed_at = now
            return
        logger.error("campaign %s: its lease was taken over by another process; stopping here", self.campaign_id)
        self.lost = True
        worker = self._worker
        if worker is not None:
            with contextlib.suppress(RuntimeError):  # the loop may have closed meanwhile
                worker[0].call_soon_threadsafe(worker[1].cancel)

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[HeldLease]:
        """Hold the lease for the block (taking it first unless `acquire` already did): raise LeaseHeldElsewhere
        if another process holds it, LeaseLost if it is lost on the way; released when the block ends."""
        if self.generation is None:
            await asyncio.to_thread(self.acquire)
        worker = asyncio.current_task()
        assert worker is not None
        try:
            if self.lost:
                raise LeaseLost(f"campaign {self.campaign_id}: another process took over its lease")
            self._worker = (asyncio.get_running_loop(), worker)
            yield self
        except asyncio.CancelledError:
            if self.lost:
                worker.uncancel()
                raise LeaseLost(f"campaign {self.campaign_id}: another process took over its lease") from None
            raise
        except store.LeaseFencedError:
            self.lost = True
            raise LeaseLost(f"campaign {self.campaign_id}: another process took over its lease") from None
        finally:
            self._worker = None
            await asyncio.shield(asyncio.to_thread(self.release))


def check_fence(engine: Engine) -> None:
    """Raise LeaseFencedError unless the lease `engine` is fenced by (`HeldLease.fenced_engine`) is still ours."""
    with store.open_session(engine):  # a writing session on a fenced engine: its commit checks the fence
        pass


def refused_by_fence(exc: BaseException | None) -> bool:
    """Whether `exc`, or an exception it was raised from, is a write the lease's fence refused."""
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, store.LeaseFencedError):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class LeaseKeeper:
    """Renews every lease this process holds on one database, from one thread on a connection of its own.

    The thread starts with the first lease and ends (closing its connection) when the last is released.
    """

    def __init__(self, engine: Engine) -> None:
        self._url = engine.url.render_as_string(hide_password=False)
        self._leases: dict[int, HeldLease] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, lease: HeldLease) -> None:
        with self._lock:
            self._leases[id(lease)] = lease
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
                self._thread.start()
        self._wake.set()

    def remove(self, lease: HeldLease) -> None:
        with self._lock:
            self._leases.pop(id(lease), None)
        self._wake.set()

    def _run(self) -> None:
        # Its own connection, kept open between ticks: never queued behind the pool's borrowers. One statement
        # renews every lease due (as few interpreter switches as can be: a starved process gets few).
        side = store.make_engine(self._url, pre_ping=False)
        try:
            while True:
                with self._lock:
                    leases = list(self._leases.values())
                    if not leases:
                        self._thread = None
                        return
                now = time.monotonic()
                due = [lease for lease in leases
                       if now - lease.renewed_at >= lease.ttl_s / RENEWALS_PER_TTL and not lease.lost]
                for ttl_s in {lease.ttl_s for lease in due}:
                    self._renew(side, [lease for lease in due if lease.ttl_s == ttl_s], ttl_s)
                self._wake.clear()
                self._wake.wait(min(lease.ttl_s for lease in leases) / RENEWALS_PER_TTL / 4)
        finally:
            side.dispose()

    def _renew(self, side: Engine, leases: list[HeldLease], ttl_s: float) -> None:
        try:
            with store.open_session(side) as session:
                renewed = store.renew_leases(session, fences=[lease.fence for lease in leases], ttl_s=ttl_s)
        except Exception as exc:  # a database hiccup or lock: the leases have most of their time; the next tick retries
            logger.warning("renewing %d campaign lease(s) failed (%s); retrying", len(leases), store.outage_reason(exc))
            return
        for lease in leases:
            with self._lock:
                if id(lease) not in self._leases:  # released meanwhile: its row is no longer ours to judge
                    continue
            ok = lease.fence in renewed
            lease.renewed(ok)
            if not ok:
                self.remove(lease)


_KEEPERS: dict[str, LeaseKeeper] = {}
_KEEPERS_LOCK = threading.Lock()


def keeper_for(engine: Engine) -> LeaseKeeper:
    """Return this process's keeper for `engine`'s database (one per URL)."""
    url = engine.url.render_as_string(hide_password=False)
    with _KEEPERS_LOCK:
        keeper = _KEEPERS.get(url)
        if keeper is None:
            keeper = _KEEPERS[url] = LeaseKeeper(engine)
        return keeper
