"""Logging in to the review page: the token is posted once and answered with a session cookie for reads.

With `DATAHUNT_API_READ_REQUIRES_TOKEN=1` a browser cannot send a bearer header on a page load or from
`EventSource`, so `POST /session` takes the API token once and sets `datahunt_session`: `HttpOnly` (page
scripts never see it), `SameSite=Strict` (no other site's page can make the browser send it), `Path=/`, and
`Secure` when the request came over TLS. The cookie authorises reads (pages, API reads, the event stream) until
it expires (12 h, kept by the server); writes still need the bearer token, so a cookie alone can never approve,
export or launch. The session lives in the catalog database (`server.api.session_cookie`), so every replica
accepts it, and `POST /session/logout` ends it on all of them: a copy of the cookie taken before the logout is
refused afterwards. Changing the token ends every session.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Request, Response, status
from pydantic import BaseModel, ConfigDict, Field

from server.api.deps import EngineDep, SettingsDep
from server.api.session_cookie import (
    COOKIE,
    SESSION_S,
    configured_token,
    issue_cookie,
    revoke_cookie,
    token_matches,
)

router = APIRouter(prefix="/session", tags=["session"])


class Login(BaseModel):
    """The API token, posted once by the review page's login form."""

    model_config = ConfigDict(extra="forbid")
    token: Annotated[str, Field(min_length=1, max_length=512)]


class SessionOut(BaseModel):
    """The session a login opened (the cookie itself is HttpOnly and not repeated here)."""

    expires_in_s: int


@router.post("", responses={401: {"description": "Wrong token"}, 403: {"description": "No token configured"}})
def login(
    body: Login, request: Request, response: Response, settings: SettingsDep, engine: EngineDep
) -> SessionOut:
    """Check the API token once, open a session in the catalog and set its cookie."""
    if configured_token(settings) is None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "logins disabled: set DATAHUNT_API_TOKEN on the server")
    if not token_matches(settings, body.token):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "wrong token")
    response.set_cookie(
        COOKIE, issue_cookie(settings, engine), max_age=SESSION_S, path="/", httponly=True, samesite="strict",
        secure=request.url.scheme == "https",
    )
    return SessionOut(expires_in_s=SESSION_S)


@router.post("/logout")
def logout(request: Request, response: Response, settings: SettingsDep, engine: EngineDep) -> SessionOut:
    """End the session on the server (every replica refuses its cookie from now on) and clear the cookie."""
    revoke_cookie(settings, engine, request.cookies.get(COOKIE))
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict", secure=request.url.scheme == "https")
    return SessionOut(expires_in_s=0)
