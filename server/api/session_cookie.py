"""The review page's session cookie: issued for the API token, checked on reads, valid on every replica.

The value is `<expiry>.<nonce>.<HMAC-SHA256>` keyed by the API token: stateless (any replica checks it without
shared state) and void as soon as the token changes. Routes that set and clear it live in `session.py`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

from core.settings import Settings

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


def _signature(key: str, payload: str) -> str:
    return hmac.new(key.encode(), f"datahunt-session:{payload}".encode(), hashlib.sha256).hexdigest()


def issue_cookie(settings: Settings, *, now: float | None = None, lifetime_s: int = SESSION_S) -> str:
    """Return a fresh session cookie value valid for `lifetime_s` seconds (needs a configured API token)."""
    key = configured_token(settings)
    assert key is not None, "sessions need DATAHUNT_API_TOKEN"
    payload = f"{int((now or time.time()) + lifetime_s)}.{secrets.token_hex(16)}"
    return f"{payload}.{_signature(key, payload)}"


def valid_cookie(settings: Settings, value: str | None, *, now: float | None = None) -> bool:
    """True when `value` is an unexpired session cookie signed with the current API token."""
    key = configured_token(settings)
    if not value or key is None:
        return False
    payload, _, signature = value.rpartition(".")
    expiry, _, _nonce = payload.partition(".")
    if not expiry.isdigit() or not hmac.compare_digest(signature.encode(), _signature(key, payload).encode()):
        return False
    return int(expiry) > (now or time.time())
