"""Review-page sessions in the catalog database: opened at login, ended by logout or expiry, on every replica.

A login opens a row and hands back a random secret; the cookie carries the secret, the row only its SHA-256
(a copy of the table opens no session). A session is live while its row exists, is not revoked and has not
expired, so a logout on one replica ends the session on all of them, and a cookie captured before the
logout reads nothing afterwards. Expired rows are deleted when the next session opens.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from sqlalchemy import delete, update
from sqlmodel import Session, col

from curation.catalog.models import ReviewSession, utcnow


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def open_review_session(session: Session, *, ttl_s: float, now: datetime | None = None) -> str:
    """Open a session live for `ttl_s` seconds and return its secret (never stored; only its hash is)."""
    now = now or utcnow()
    session.execute(delete(ReviewSession).where(col(ReviewSession.expires_at) <= now))
    secret = secrets.token_urlsafe(32)
    session.add(ReviewSession(id=_digest(secret), created_at=now, expires_at=now + timedelta(seconds=ttl_s)))
    session.flush()
    return secret


def review_session_live(session: Session, *, secret: str, now: datetime | None = None) -> bool:
    """True when `secret` opened a session that is neither revoked nor expired."""
    row = session.get(ReviewSession, _digest(secret))
    return row is not None and row.revoked_at is None and row.expires_at > (now or utcnow())


def revoke_review_session(session: Session, *, secret: str, now: datetime | None = None) -> bool:
    """End the session `secret` opened; return whether a live one was ended (not when unknown or over)."""
    now = now or utcnow()
    ended = session.execute(
        update(ReviewSession)
        .where(col(ReviewSession.id) == _digest(secret), col(ReviewSession.revoked_at).is_(None),
               col(ReviewSession.expires_at) > now)
        .values(revoked_at=now)
    )
    return bool(ended.rowcount)  # type: ignore[attr-defined]
