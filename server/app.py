"""The FastAPI application factory of the review service: API routers, review page, static files, lifespan.

`create_app()` builds a fresh app and creates nothing at import time. Its lifespan opens the catalog engine
(unless one is given), runs the Alembic upgrade and the checkpointer's table setup once, and resumes the
campaigns a previous process left unfinished (their LangGraph checkpoints live on the same database). Catalog
errors map to HTTP answers with a message: unknown ids 404, refused reviews 409, bad values 422, an
unreachable database 503. Request bodies over `MAX_BODY_BYTES` get a 413 (`server.api.body_limit`); JSON
bodies with NaN, Infinity, an overflowing number or an unpaired surrogate a 422 (`server.api.strict_json`).
Every answer carries the browser security headers, and a request for a host not in `DATAHUNT_ALLOWED_HOSTS`
gets a 400 (`server.api.web_defences`). Starting without an API token logs a warning. Every route is built
when the app is made, not on its first request (`_build_routes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from fastapi.staticfiles import StaticFiles
from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc
from starlette.types import ASGIApp

from core.settings import Settings, get_settings
from curation.catalog import store
from graph.checkpoint import open_checkpointer
from server.api import campaigns, catalog, dataset_page, manifest, pages, runs, session
from server.api.body_limit import BodyLimitMiddleware
from server.api.campaign_tasks import CampaignManager
from server.api.enum_hints import validation_error_with_hints
from server.api.offline_docs import add_offline_docs
from server.api.openapi_doc import honest_openapi
from server.api.strict_json import StrictJsonMiddleware
from server.api.web_defences import AllowedHostsMiddleware, SecurityHeadersMiddleware

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
STATIC_DIR = Path(__file__).resolve().parent / "static"
# One app at a time builds its routes (see `_build_routes`).
_ROUTE_BUILD_LOCK = threading.Lock()

_ERROR_STATUS: list[tuple[type[Exception], int]] = [
    (store.CampaignNotFoundError, status.HTTP_404_NOT_FOUND),
    (store.RunNotFoundError, status.HTTP_404_NOT_FOUND),
    (store.EntryNotFoundError, status.HTTP_404_NOT_FOUND),
    (store.OverrideRequiredError, status.HTTP_409_CONFLICT),
    (store.ConcurrentUpdateError, status.HTTP_409_CONFLICT),
    (store.DatabaseError, status.HTTP_503_SERVICE_UNAVAILABLE),
]


def _catalog_error_status(exc: Exception) -> int:
    for cls, code in _ERROR_STATUS:
        if isinstance(exc, cls):
            return code
    return status.HTTP_422_UNPROCESSABLE_CONTENT  # InvalidValueError and any other refused value


async def _catalog_error(_request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc) or type(exc).__name__}, status_code=_catalog_error_status(exc))


async def _database_error(request: Request, exc: Exception) -> JSONResponse:
    # The database itself failed (full disk, a damaged SQLite file, the server gone): a 503 that says so, not a
    # 500 with a traceback. A refused statement (a constraint, a bad query) is our bug and stays a 500.
    if not isinstance(exc, sa_exc.OperationalError) and type(exc) is not sa_exc.DatabaseError:
        raise exc
    cause = str(getattr(exc, "orig", None) or exc).splitlines()[0][:200]
    logger.error("catalog database error on %s %s: %s", request.method, request.url.path, cause)
    return JSONResponse({"detail": f"the catalog database is unavailable: {cause}"},
                        status_code=status.HTTP_503_SERVICE_UNAVAILABLE, headers={"Retry-After": "30"})


class _App(FastAPI):
    """The service's FastAPI app, with the security headers outside everything, Starlette's error middleware
    included: `add_middleware` places a middleware inside that one, so an unexpected 500 went out without them."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeadersMiddleware(super().build_middleware_stack())  # outermost: 500s and refusals too


def create_app(
    settings: Settings | None = None,
    *,
    engine: Engine | None = None,
    campaign_overrides: dict[str, Any] | None = None,
    resume_unfinished: bool = True,
    sweep_abandoned: bool | None = None,
    event_poll_s: float = 1.0,
) -> FastAPI:
    """Return a new review-service app.

    `engine` defaults to one on the settings' catalog URL; `campaign_overrides` (`subagent`, `backends`) pass
    through to the graph; `resume_unfinished=False` leaves unfinished campaigns alone at start-up (for extra
    replicas on a shared database). `sweep_abandoned` (default: as `resume_unfinished`) takes over, every lease
    period, the unfinished campaigns whose holder stopped renewing; `datahunt serve` always sweeps, so a replica
    started with `--no-resume` still takes over a dead one's work.
    """
    settings = settings or get_settings()
    sweep = resume_unfinished if sweep_abandoned is None else sweep_abandoned
    app = _App(
        title="datahunt",
        summary="Launch discovery campaigns, review and approve datasets, export the manifest.",
        version="0.1.0",
        lifespan=_lifespan(settings, engine, campaign_overrides, resume_unfinished=resume_unfinished, sweep=sweep),
        docs_url=None,  # served from local files below: no CDN
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.event_poll_s = event_poll_s
    app.add_middleware(StrictJsonMiddleware)  # inside the body limit: buffers at most MAX_BODY_BYTES
    app.add_middleware(BodyLimitMiddleware, max_bytes=MAX_BODY_BYTES)
    app.add_middleware(AllowedHostsMiddleware, allowed=settings.allowed_host_list)
    app.add_exception_handler(store.CatalogError, _catalog_error)
    app.add_exception_handler(sa_exc.DatabaseError, _database_error)
    app.add_exception_handler(RequestValidationError, validation_error_with_hints)
    app.include_router(campaigns.router)
    app.include_router(catalog.router)
    app.include_router(manifest.router)
    app.include_router(runs.router)  # regeneration runs, owned by the inference stage
    app.include_router(session.router)
    app.include_router(pages.router)
    app.include_router(dataset_page.router)
    app.openapi = lambda: honest_openapi(app, settings)  # type: ignore[method-assign]
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    add_offline_docs(app)
    _build_routes(app)
    return app


def _build_routes(app: FastAPI) -> None:
    """Build every route of `app` now, in the thread that makes it, instead of on its first request.

    FastAPI builds the routes of an included router (each parameter's and response's pydantic TypeAdapter) when
    the first request reaches it. It builds each parameter's under `warnings.catch_warnings()` to hide the
    `UnsupportedFieldAttributeWarning` that pydantic gives for the alias FastAPI sets on every parameter, and
    `catch_warnings` swaps the process-wide filter list, so it is not thread-safe: two apps of one process (two
    replicas side by side, an app embedded in another program) answering their first requests on two threads at
    once restore each other's filters mid-build. The warning then escapes (an exception under `-W error`), or
    the "ignore" is left on for the rest of the process. Built here, no request builds a schema, and apps made
    on several threads at once take turns.
    """
    with _ROUTE_BUILD_LOCK:
        for _ in iter_route_contexts(app.router.routes):
            pass


def _lifespan(settings: Settings, engine: Engine | None, campaign_overrides: dict[str, Any] | None, *,
              resume_unfinished: bool, sweep: bool) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: open the catalog (unless `engine` is given), migrate it, set up the checkpoint
    tables, start the campaign manager (resuming and sweeping as asked), and close them all at shutdown."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own_engine = engine is None
        if settings.api_token is None or not settings.api_token.get_secret_value():
            logger.warning("DATAHUNT_API_TOKEN is not set: approvals, exports and campaign launches are refused"
                           "%s", "; reads are open to anyone who can reach this server"
                           if not settings.api_read_requires_token else "")
        app.state.engine = engine or store.make_engine(settings.resolved_database_url)
        await asyncio.to_thread(store.upgrade_database, app.state.engine)
        # Create the checkpoint tables once, before campaigns run side by side (concurrent first-time setups
        # of the PostgreSQL checkpointer race on its migrations table).
        async with open_checkpointer(app.state.engine.url.render_as_string(hide_password=False)):
            pass
        app.state.campaigns = CampaignManager(app.state.engine, settings, overrides=campaign_overrides)
        sweeper = None
        if resume_unfinished:
            resumed = await app.state.campaigns.resume_unfinished()
            if resumed:
                logger.info("resuming %d unfinished campaign(s): %s", len(resumed), ", ".join(resumed))
        if sweep:
            # Another replica that dies leaves its campaigns behind: take them over once their leases expire.
            sweeper = asyncio.create_task(app.state.campaigns.sweep(settings.lease_ttl_s), name="campaign-sweep")
        try:
            yield
        finally:
            if sweeper is not None:
                sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweeper
            await app.state.campaigns.shutdown()
            if own_engine:
                app.state.engine.dispose()

    return lifespan
