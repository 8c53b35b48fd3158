"""The endpoint pool: several inference servers, least-outstanding-requests balancing, eject and re-admit.

Each endpoint takes at most `concurrency` requests at once. `acquire()` hands out the healthy endpoint with
the fewest requests in flight and waits while all are full. A connection failure ejects an endpoint at
once; timeouts and 5xx eject it after `eject_after` in a row. A background task re-probes ejected endpoints
(`GET /health`, else `/v1/models`) and re-admits them when they answer, so a server that dies mid-run and
comes back takes its share again. A pool with no healthy endpoint for `dead_after_s` raises AllEndpointsDown.
The pool asks a health check of its caller (`probe_all(check)`: the backend's `healthy`, whose HTTP session
runs `probe`); a backend with no endpoint (in process) is never probed: the runner knows it has none.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

import aiohttp

from inference.errors import InferenceError

logger = logging.getLogger(__name__)

HEALTH_PATHS = ("/health", "/v1/models")

HealthCheck = Callable[[str], Awaitable[bool]]  # an endpoint URL in, whether it answers out


class AllEndpointsDown(InferenceError, RuntimeError):
    """No endpoint has answered for longer than the pool's patience."""


class EndpointSnapshot(TypedDict):
    """One endpoint's line of the status file."""

    url: str
    healthy: bool
    in_flight: int
    limit: int
    ok: int
    errors: int
    ejections: int
    tokens: int
    last_error: str | None


@dataclass
class Endpoint:
    """One server and its live counters (what the status file shows per endpoint)."""

    url: str
    limit: int
    in_flight: int = 0
    ok: int = 0
    errors: int = 0
    healthy: bool = True
    consecutive_failures: int = 0
    last_error: str | None = None
    ejections: int = 0
    tokens: int = 0

    def snapshot(self) -> EndpointSnapshot:
        """Return the counters as a JSON-ready dict."""
        return {
            "url": self.url,
            "healthy": self.healthy,
            "in_flight": self.in_flight,
            "limit": self.limit,
            "ok": self.ok,
            "errors": self.errors,
            "ejections": self.ejections,
            "tokens": self.tokens,
            "last_error": self.last_error,
        }


async def probe(client: aiohttp.ClientSession, url: str, *, timeout_s: float = 5.0) -> bool:
    """Return True when the server at `url` answers its health check (or lists its models) with 200."""
    base = url.rstrip("/")
    base = base[: -len("/v1")] if base.endswith("/v1") else base
    for path in HEALTH_PATHS:
        try:
            async with client.get(base + path, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
                status = response.status
                await response.read()
        except (aiohttp.ClientError, TimeoutError):
            return False
        if status == 200:
            return True
        if status != 404:
            return False
    return False


@dataclass
class EndpointPool:
    """Least-outstanding-requests pool over `endpoints`, with health ejection and periodic re-probe."""

    endpoints: list[Endpoint]
    eject_after: int = 3
    reprobe_interval_s: float = 2.0
    dead_after_s: float = 600.0
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _down_since: float | None = None

    @classmethod
    def from_urls(cls, urls: list[str], concurrency: int, **kwargs: Any) -> EndpointPool:
        """Return a pool with one endpoint per URL, each taking `concurrency` requests at once."""
        return cls([Endpoint(url=u.rstrip("/"), limit=concurrency) for u in urls], **kwargs)

    async def probe_all(self, check: HealthCheck) -> None:
        """Probe every endpoint now with `check`; mark the dead ones unhealthy (the re-probe loop re-admits them)."""
        results = await asyncio.gather(*(check(e.url) for e in self.endpoints))
        for endpoint, alive in zip(self.endpoints, results, strict=True):
            if not alive:
                logger.warning("endpoint %s does not answer its health check; ejected until it does", endpoint.url)
                self._eject(endpoint, "health check failed")
        async with self._changed:
            self._changed.notify_all()

    def _eject(self, endpoint: Endpoint, reason: str) -> None:
        if endpoint.healthy:
            endpoint.healthy = False
            endpoint.ejections += 1
        endpoint.last_error = reason

    def _pick(self) -> Endpoint | None:
        candidates = [e for e in self.endpoints if e.healthy and e.in_flight < e.limit]
        return min(candidates, key=lambda e: e.in_flight / e.limit) if candidates else None

    async def acquire(self) -> Endpoint:
        """Return the healthy endpoint with the fewest requests in flight, waiting while all are busy or down."""
        async with self._changed:
            while True:
                endpoint = self._pick()
                if endpoint is not None:
                    endpoint.in_flight += 1
                    self._down_since = None
                    return endpoint
                if not any(e.healthy for e in self.endpoints):
                    now = time.monotonic()
                    self._down_since = self._down_since or now
                    if now - self._down_since > self.dead_after_s:
                        raise AllEndpointsDown(
                            f"no endpoint answered for {self.dead_after_s:.0f}s: "
                            + "; ".join(f"{e.url}: {e.last_error}" for e in self.endpoints)
                        )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout=self.reprobe_interval_s)

    async def release(
        self, endpoint: Endpoint, *, error: str | None = None, fault: str = "none", tokens: int = 0
    ) -> None:
        """Return `endpoint` to the pool and count the outcome.

        `fault` is "none" (success, or a row error the server is not to blame for), "soft" (timeout, 429,
        5xx: eject after `eject_after` in a row) or "hard" (connection refused or dropped: eject now).
        """
        async with self._changed:
            endpoint.in_flight -= 1
            if error is None:
                endpoint.ok += 1
                endpoint.tokens += tokens
                endpoint.consecutive_failures = 0
            else:
                endpoint.errors += 1
                endpoint.last_error = error
                if fault != "none":
                    endpoint.consecutive_failures += 1
                if fault == "hard" or endpoint.consecutive_failures >= self.eject_after:
                    self._eject(endpoint, error)
            self._changed.notify_all()

    async def reprobe_forever(self, check: HealthCheck) -> None:
        """Re-probe ejected endpoints with `check` every `reprobe_interval_s` and re-admit those that answer."""
        while True:
            await asyncio.sleep(self.reprobe_interval_s)
            for endpoint in [e for e in self.endpoints if not e.healthy]:
                if await check(endpoint.url):
                    logger.warning("endpoint %s answers again; re-admitted", endpoint.url)
                    async with self._changed:
                        endpoint.healthy = True
                        endpoint.consecutive_failures = 0
                        self._changed.notify_all()

    def snapshot(self) -> list[EndpointSnapshot]:
        """Return every endpoint's counters."""
        return [e.snapshot() for e in self.endpoints]
