"""The review page's session cookie: issued for the API token, checked on reads, ended by logout everywhere.

The value is `<secret>.<HMAC-SHA256>` keyed by the API token. The secret names a session row in the catalog
database (`curation.catalog.sessions`), which holds its expiry and its logout, so every replica sharing the
catalog agrees on which sessions are live, and a cookie copied before a logout is refused after it. The
signature refuses forged or foreign values without a database query, and voids every session as soon as the
token changes. Routes that set and clear the cookie live in `session.py`.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime

from sqlalchemy import Engine

from core.settings import Settings
from curation.catalog import store

COOKIE = "datahunt_session"
SESSION_S = 12 * 3600


def configured_token(settings: Settings) -> str | None:
    """Return the configured API token, or None when none (or an empty one) is set."""
    if settings.api_token is None or not settings.api_token.get_secret_value():
        return None
    return settings.api_token.get_secret_value()


def token_matches(settings: Settings, given: str) -> bool:
    """True when `given` is the configured API token (compared in constant time)."""
    expected = configured_token(settings)
    return expected is not None and hmac.compare_digest(given.encode(), expected.encode())


def _signature(key: str, secret: str) -> str:
    return hmac.new(key.encode(), f"datahunt-session:{secret}".encode(), hashlib.sha256).hexdigest()


def _signed_secret(settings: Settings, value: str | None) -> str | None:
    # The session's secret when `value` carries the current token's signature over it, else None.
    key = configured_token(settings)
    if not value or key is None:
        return None
    secret, _, signature = value.rpartition(".")
    if not secret or not hmac.compare_digest(signature.encode(), _signature(key, secret).encode()):
        return None
    return secret


def issue_cookie(settings: Settings, engine: Engine, *, now: datetime | None = None,
                 lifetime_s: int = SESSION_S) -> str:
    """Open a session live for `lifetime_s` seconds in the catalog and return its cookie value (needs a
    configured API token)."""
    key = configured_token(settings)
    assert key is not None, "sessions need DATAHUNT_API_TOKEN"
    # Run again if PostgreSQL picks this login as a deadlock victim (two logins pruning the same expired rows).
    secret = store.run_transaction(engine, lambda session: store.open_review_session(session, ttl_s=lifetime_s,
                                                                                      now=now), what="a login")
    return f"{secret}.{_signature(key, secret)}"


def valid_cookie(settings: Settings, engine: Engine, value: str | None, *,
                 now: datetime | None = None) -> bool:
    """True when `value` is signed with the current API token and names a live session (not revoked, not
    expired)."""
    secret = _signed_secret(settings, value)
    if secret is None:
        return False
    with store.open_session(engine, readonly=True) as session:
        return store.review_session_live(session, secret=secret, now=now)


def revoke_cookie(settings: Settings, engine: Engine, value: str | None) -> bool:
    """End the session `value` names, for every replica; return whether a live one was ended."""
    secret = _signed_secret(settings, value)
    if secret is None:
        return False
    with store.open_session(engine) as session:
        return store.revoke_review_session(session, secret=secret)
