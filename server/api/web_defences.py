"""What the service tells browsers and which `Host` it answers to: security headers and the allowed-hosts check.

Every response carries `X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer`, `X-Frame-Options:
DENY` and a `Content-Security-Policy` that allows only the service's own scripts, styles and connections (no
inline script, no framing: `frame-ancestors 'none'`). The interactive API docs (`/docs`, `/redoc`) load
their assets from the service itself (`server/api/offline_docs.py`) and start with an inline script, so those
pages get a policy that allows inline script and style, and nothing else does; no page may load another origin.

A request whose `Host` is not one of the allowed hosts gets a 400 before any route runs: a page on another
site whose name was re-pointed at this server (DNS rebinding) cannot read or drive it. Entries are host
names or IP literals without a port; `*.example.org` allows sub-domains, `*` allows any host.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)

PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
DOCS_POLICY = (  # Swagger UI and ReDoc start with an inline script and set inline styles; their files are ours
    "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; base-uri 'none'; "
    "frame-ancestors 'none'"
)
DOCS_PATHS = frozenset({"/docs", "/redoc", "/docs/oauth2-redirect"})
STATIC_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
]


class SecurityHeadersMiddleware:
    """Add the browser security headers to every HTTP response (streams included)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        policy = (DOCS_POLICY if scope["path"] in DOCS_PATHS else PAGE_POLICY).encode()

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in [*STATIC_HEADERS, (b"content-security-policy", policy)]:
                    if name.decode() not in headers:
                        headers.append(name.decode(), value.decode())
            await send(message)

        await self.app(scope, receive, with_headers)


def host_name(header: str) -> str:
    """Return the host part of a `Host` header, lower-cased, without the port (IPv6 literals keep brackets)."""
    header = header.strip().lower()
    if header.startswith("["):
        end = header.find("]")
        return header[: end + 1] if end > 0 else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def host_allowed(host: str, allowed: Iterable[str]) -> bool:
    """True when `host` (a host name without port) matches one of the `allowed` patterns."""
    for pattern in allowed:
        pattern = pattern.strip().lower()
        if pattern == "*" or pattern == host:
            return True
        if pattern.startswith("*.") and host.endswith(pattern[1:]) and len(host) > len(pattern) - 1:
            return True
    return False


class AllowedHostsMiddleware:
    """Answer 400 to any HTTP request whose `Host` header is missing or not an allowed host."""

    def __init__(self, app: ASGIApp, allowed: list[str]) -> None:
        self.app = app
        self.allowed = [a for a in (p.strip().lower() for p in allowed) if a]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"), "")
        host = host_name(header)
        if host and host_allowed(host, self.allowed):
            await self.app(scope, receive, send)
            return
        logger.warning("refused a request for host %r (allowed: %s)", header[:100], ", ".join(self.allowed))
        body = json.dumps({"detail": f"host {header[:100]!r} is not served here; allowed hosts are set by"
                                     " DATAHUNT_ALLOWED_HOSTS"}).encode()
        await send({"type": "http.response.start", "status": 400, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
