"""Leases in the catalog database: one owner at a time for a piece of work, taken over only after it expires.

Several service replicas (and CLI processes) share one catalog. Before one of them runs, resumes or re-runs a
campaign it takes the campaign's lease; while it works it renews the lease (a heartbeat); when it is done it
releases it. A second process asking for a lease another holds gets `None` and leaves the work alone, unless
the lease expired: then its holder stopped renewing (it died or hung) and the work is taken over. A holder on
the same host whose process is gone is taken over at once (a SIGKILLed CLI run need not wait for expiry).

Time is the database's: every acquire, renewal and expiry test reads the clock in the statement that decides
(`now()` on PostgreSQL, `julianday('now')` on SQLite), so replicas' clocks, and how late a starved process
computes a deadline, never matter. Each acquisition by a new owner takes the next **generation** of the lease
(a counter that only grows: a released lease keeps its row, owner empty, so the count survives). The holder
fences its writes with it (`Fence`, checked by `check_fence` in the same transaction as the write, the lease
row share-locked on PostgreSQL so no takeover commits in between): a holder that stalled past expiry and was
taken over has its next write refused and stops, instead of writing beside the new owner.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Interval, bindparam, case, func, insert, select, tuple_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import ColumnElement
from sqlmodel import Session, col

from curation.catalog.audit import record_audit
from curation.catalog.errors import CatalogError
from curation.catalog.models import Lease

logger = logging.getLogger(__name__)

RELEASED = ""  # the owner of a lease nobody holds (its row keeps the generation count)


class LeaseFencedError(CatalogError):
    """A write made under a lease generation that is no longer the lease's: another process took the work over."""


@dataclass(frozen=True)
class Fence:
    """The lease a holder's writes are fenced by: the name, the holder, and the generation it acquired."""

    name: str
    owner: str
    generation: int


def new_owner() -> str:
    """Return a fresh lease owner name: host, pid and a random part, one per piece of work, so two pieces of
    work in one process exclude each other too."""
    return f"{socket.gethostname()[:120]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def campaign_lease(campaign_id: str) -> str:
    """Return the lease name guarding work on one campaign."""
    return f"campaign:{campaign_id}"


def db_now(session: Session) -> ColumnElement[Any]:
    """The database's clock, as an expression comparable to and storable in the lease's times."""
    if session.get_bind().dialect.name == "sqlite":  # naive UTC text, as the catalog stores times there
        return func.strftime("%Y-%m-%d %H:%M:%f", "now")
    return func.now()


def _db_later(session: Session, seconds: float) -> ColumnElement[Any]:
    if session.get_bind().dialect.name == "sqlite":
        return func.strftime("%Y-%m-%d %H:%M:%f", "now", f"{seconds:+.3f} seconds")
    return func.now() + bindparam(None, timedelta(seconds=seconds), type_=Interval())


def _expired(session: Session) -> ColumnElement[bool]:
    if session.get_bind().dialect.name == "sqlite":  # stored times differ in their digits: compare as numbers
        return func.julianday(col(Lease.expires_at)) < func.julianday("now")
    return col(Lease.expires_at) < func.now()


def _locked(session: Session, name: str) -> Lease | None:
    """The lease row, locked for this transaction (SQLite: its open session already holds the write lock)."""
    stmt = select(Lease).where(col(Lease.name) == name).execution_options(populate_existing=True)
    if session.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    return session.scalars(stmt).first()


def acquire_lease(session: Session, *, name: str, owner: str, ttl_s: float) -> Lease | None:
    """Take (or renew, when `owner` holds it) the lease `name` for `ttl_s` seconds of the database's clock;
    return it, or None while another owner holds it unexpired. Taking it from another owner (expired, or dead
    on this host) is logged and audited."""
    before = _locked(session, name)
    if before is None:
        try:
            with session.begin_nested():
                session.execute(insert(Lease).values(
                    name=name, owner=owner, generation=1, acquired_at=db_now(session), heartbeat_at=db_now(session),
                    expires_at=_db_later(session, ttl_s)))
        except IntegrityError:  # another process inserted it first
            return None
        return _reread(session, name, owner)
    previous = before.owner
    fresh = col(Lease.owner) != owner
    values: dict[str, Any] = {
        "owner": owner, "heartbeat_at": db_now(session), "expires_at": _db_later(session, ttl_s),
        "generation": case((fresh, col(Lease.generation) + 1), else_=col(Lease.generation)),
        "acquired_at": case((fresh, db_now(session)), else_=col(Lease.acquired_at)),
    }
    taken = session.execute(update(Lease).where(
        col(Lease.name) == name,
        (col(Lease.owner) == owner) | (col(Lease.owner) == RELEASED) | _expired(session)).values(**values))
    if taken.rowcount != 1 and holder_is_dead(previous):  # type: ignore[attr-defined]
        # A holder on this host whose process is gone (killed, crashed) will never renew: no need to wait it out.
        taken = session.execute(update(Lease).where(col(Lease.name) == name, col(Lease.owner) == previous)
                                .values(**values))
    lease = _reread(session, name, owner)
    if lease is not None and previous not in (owner, RELEASED):
        why = "had expired" if not holder_is_dead(previous) else "was held by a process no longer running"
        logger.warning("lease %s %s; %s takes it over from %s (generation %d)", name, why, owner, previous,
                       lease.generation)
        record_audit(session, entity="lease", entity_id=name, action="taken_over", from_status=None, to_status=None,
                     detail={"from_owner": previous, "to_owner": owner, "generation": lease.generation})
    return lease


def _reread(session: Session, name: str, owner: str) -> Lease | None:
    lease = session.get(Lease, name, populate_existing=True)  # as the statements above left it
    if lease is None or lease.owner != owner:
        logger.info("lease %s is held by %s", name, lease.owner if lease and lease.owner else "another process")
        return None
    return lease


def holder_is_dead(holder: str) -> bool:
    """True when `holder` names a process on this host that no longer exists (a lease owner from
    `new_owner`); False for other hosts and live processes, which only expiry can settle."""
    host, _, rest = holder.partition(":")
    pid_text = rest.split(":", 1)[0]
    if host != socket.gethostname()[:120] or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, under another user
        return False
    return False


def renew_lease(session: Session, *, name: str, owner: str, ttl_s: float, generation: int | None = None) -> bool:
    """Extend a lease `owner` still holds (a heartbeat), in its `generation` when given; False when it was
    taken over (the caller must stop)."""
    where = [col(Lease.name) == name, col(Lease.owner) == owner]
    if generation is not None:
        where.append(col(Lease.generation) == generation)
    renewed = session.execute(update(Lease).where(*where).values(
        heartbeat_at=db_now(session), expires_at=_db_later(session, ttl_s)))
    return bool(renewed.rowcount == 1)  # type: ignore[attr-defined]


def renew_leases(session: Session, *, fences: Sequence[Fence], ttl_s: float) -> set[Fence]:
    """Renew every lease of `fences` still held in its generation, in one statement; return those renewed
    (the others were taken over). What one heartbeat of a process holding many leases costs: one round trip."""
    if not fences:
        return set()
    key = tuple_(col(Lease.name), col(Lease.owner), col(Lease.generation))
    renewed = session.execute(
        update(Lease).where(key.in_([(f.name, f.owner, f.generation) for f in fences]))
        .values(heartbeat_at=db_now(session), expires_at=_db_later(session, ttl_s))
        .returning(col(Lease.name), col(Lease.owner), col(Lease.generation)))
    return {Fence(name=n, owner=o, generation=g) for n, o, g in renewed}


def release_lease(session: Session, *, name: str, owner: str) -> bool:
    """Give the lease up if `owner` holds it (the row stays, with its generation); return whether it did."""
    released = session.execute(update(Lease).where(col(Lease.name) == name, col(Lease.owner) == owner).values(
        owner=RELEASED, expires_at=db_now(session)))
    return bool(released.rowcount == 1)  # type: ignore[attr-defined]


def lease_holder(session: Session, *, name: str) -> Lease | None:
    """Return the lease `name` while someone holds it unexpired (by the database's clock), else None."""
    stmt = select(Lease).where(col(Lease.name) == name, col(Lease.owner) != RELEASED, ~_expired(session))
    return session.scalars(stmt.execution_options(populate_existing=True)).first()


def check_fence(session: Session, fence: Fence) -> None:
    """Raise LeaseFencedError unless `fence` is still the lease's holder and generation. Called last in the
    transaction of a fenced write: on PostgreSQL the lease row stays share-locked until the commit, so a
    takeover (which updates the row) waits for it; on SQLite the writer holds the database's write lock."""
    stmt = select(col(Lease.generation)).where(col(Lease.name) == fence.name, col(Lease.owner) == fence.owner,
                                               col(Lease.generation) == fence.generation)
    if session.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update(read=True)
    if session.scalars(stmt).first() is None:
        raise LeaseFencedError(f"lease {fence.name} generation {fence.generation} was taken over; write refused")
