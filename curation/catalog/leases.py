"""Leases in the catalog database: one owner at a time for a piece of work, taken over only after it expires.

Several service replicas (and CLI processes) share one catalog. Before one of them runs, resumes or re-runs a
campaign it takes the campaign's lease; while it works it renews the lease (a heartbeat); when it is done it
releases it. A second process asking for a lease another holds gets `None` and leaves the work alone, unless
the lease expired: then its holder stopped renewing (it died or hung) and the work is taken over. A holder on
the same host whose process is gone is taken over at once (a SIGKILLed CLI run need not wait for expiry).

Each acquire or renew is one conditional statement (`UPDATE … WHERE owner = me OR expires_at < now`, else an
`INSERT` that the primary key lets only one process win), so two processes can never both hold a lease.
Times are the processes' clocks, in UTC: keep replicas' clocks in sync (NTP) well within the lease time.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from datetime import datetime, timedelta

from sqlalchemy import delete, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from curation.catalog.models import Lease, utcnow

logger = logging.getLogger(__name__)


def new_owner() -> str:
    """Return a fresh lease owner name: host, pid and a random part, one per piece of work, so two pieces of
    work in one process exclude each other too."""
    return f"{socket.gethostname()[:120]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def campaign_lease(campaign_id: str) -> str:
    """Return the lease name guarding work on one campaign."""
    return f"campaign:{campaign_id}"


def acquire_lease(session: Session, *, name: str, owner: str, ttl_s: float, now: datetime | None = None) -> Lease | None:
    """Take (or renew, when `owner` holds it) the lease `name` for `ttl_s` seconds; return it, or None while
    another owner holds it unexpired."""
    now = now or utcnow()
    expires = now + timedelta(seconds=ttl_s)
    if not renew_lease(session, name=name, owner=owner, ttl_s=ttl_s, now=now):
        taken = session.execute(
            update(Lease)
            .where(col(Lease.name) == name, col(Lease.expires_at) < now)
            .values(owner=owner, acquired_at=now, heartbeat_at=now, expires_at=expires)
        )
        if taken.rowcount == 1:  # type: ignore[attr-defined]
            logger.warning("lease %s had expired; %s takes it over", name, owner)
        else:
            try:
                with session.begin_nested():
                    session.add(Lease(name=name, owner=owner, acquired_at=now, heartbeat_at=now, expires_at=expires))
                    session.flush()
            except IntegrityError:
                _take_from_dead_holder(session, name=name, owner=owner, now=now, expires=expires)
    lease = session.get(Lease, name, populate_existing=True)  # as the statements above left it
    if lease is None or lease.owner != owner:
        logger.info("lease %s is held by %s", name, lease.owner if lease else "another process")
        return None
    return lease


def _take_from_dead_holder(session: Session, *, name: str, owner: str, now: datetime, expires: datetime) -> None:
    # A holder on this host whose process is gone (killed, crashed) will never renew: no need to wait it out.
    holder = session.get(Lease, name, populate_existing=True)
    if holder is None or not holder_is_dead(holder.owner):
        return
    taken = session.execute(
        update(Lease)
        .where(col(Lease.name) == name, col(Lease.owner) == holder.owner)
        .values(owner=owner, acquired_at=now, heartbeat_at=now, expires_at=expires)
    )
    if taken.rowcount == 1:  # type: ignore[attr-defined]
        logger.warning("lease %s: its holder %s is no longer running; %s takes it over", name, holder.owner, owner)


def holder_is_dead(holder: str) -> bool:
    """True when `holder` names a process on this host that no longer exists (a lease owner from
    `process_owner`); False for other hosts and live processes, which only expiry can settle."""
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


def renew_lease(session: Session, *, name: str, owner: str, ttl_s: float, now: datetime | None = None) -> bool:
    """Extend a lease `owner` still holds (a heartbeat); False when it expired and another took it over."""
    now = now or utcnow()
    renewed = session.execute(
        update(Lease)
        .where(col(Lease.name) == name, col(Lease.owner) == owner)
        .values(heartbeat_at=now, expires_at=now + timedelta(seconds=ttl_s))
    )
    return bool(renewed.rowcount == 1)  # type: ignore[attr-defined]


def release_lease(session: Session, *, name: str, owner: str) -> bool:
    """Give the lease up if `owner` holds it; return whether it did."""
    released = session.execute(delete(Lease).where(col(Lease.name) == name, col(Lease.owner) == owner))
    return bool(released.rowcount == 1)  # type: ignore[attr-defined]


def lease_holder(session: Session, *, name: str, now: datetime | None = None) -> Lease | None:
    """Return the lease `name` while someone holds it unexpired, else None."""
    lease = session.get(Lease, name, populate_existing=True)
    if lease is None or lease.expires_at < (now or utcnow()):
        return None
    return lease
