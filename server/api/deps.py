"""Dependencies of the API: settings, the catalog engine, and bearer auth.

Mutating routes depend on `require_token`: with no `DATAHUNT_API_TOKEN` configured they are refused (403),
never open; a missing or wrong token is a 401. Read routes depend on `require_read_token`, which checks the
token only when `api_read_requires_token` is set, and then also accepts the review page's session cookie
(`server.api.session`). Tokens are compared with `hmac.compare_digest`.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine

from core.settings import Settings
from server.api.session_cookie import COOKIE, token_matches, valid_cookie

_bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer $DATAHUNT_API_TOKEN`")


def get_app_settings(request: Request) -> Settings:
    """Return the settings the app was created with."""
    settings: Settings = request.app.state.settings
    return settings


def get_engine(request: Request) -> Engine:
    """Return the catalog engine the app was created with."""
    engine: Engine = request.app.state.engine
    return engine


def _check(settings: Settings, credentials: HTTPAuthorizationCredentials | None) -> None:
    if settings.api_token is None or not settings.api_token.get_secret_value():
        raise HTTPException(status.HTTP_403_FORBIDDEN, "mutations disabled: set DATAHUNT_API_TOKEN on the server")
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "missing bearer token", headers={"WWW-Authenticate": "Bearer"}
        )
    expected = settings.api_token.get_secret_value().encode()
    if not hmac.compare_digest(credentials.credentials.encode(), expected):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "wrong token", headers={"WWW-Authenticate": "Bearer"})


def require_token(
    settings: Annotated[Settings, Depends(get_app_settings)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Allow the request only with the configured bearer token (mutating routes)."""
    _check(settings, credentials)


def read_allowed(settings: Settings, request: Request) -> bool:
    """True when reads are open, or the request carries the cookie of a live session (the bearer is checked
    apart); the session is looked up in the catalog, so a logout on any replica counts."""
    if not settings.api_read_requires_token:
        return True
    return valid_cookie(settings, get_engine(request), request.cookies.get(COOKIE))


def read_authorised(settings: Settings, request: Request) -> bool:
    """True when this request may read: reads open, a valid session cookie, or the right bearer token."""
    if read_allowed(settings, request):
        return True
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and token_matches(settings, given.strip())


def require_read_token(
    request: Request,
    settings: Annotated[Settings, Depends(get_app_settings)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Allow the request when reads are open, else with the bearer token or a valid session cookie."""
    if read_allowed(settings, request):
        return
    _check(settings, credentials)


# Routes open their session with `store.open_session(engine)` inside their (threadpool) body, so a request
# takes, uses and returns its connection in one thread. A yield dependency would release it from another
# thread, and under load every request thread can be waiting for a connection that only such a release frees.
EngineDep = Annotated[Engine, Depends(get_engine)]
SettingsDep = Annotated[Settings, Depends(get_app_settings)]
