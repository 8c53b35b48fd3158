"""The interactive API docs (`/docs`: Swagger UI, `/redoc`: ReDoc) from files the service serves itself.

FastAPI's default pages load Swagger UI and ReDoc from a CDN, so a review server on a network without internet
showed blank docs. The assets come from the `fastapi-offline` package (its `static/` folder: Swagger UI 5 and
ReDoc, which read OpenAPI 3.1) and are mounted at `/docs-assets`; the pages are FastAPI's own HTML pointed
there. The security policy for these pages (`web_defences.DOCS_POLICY`) names no other origin.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles

ASSETS_URL = "/docs-assets"


def assets_dir() -> Path | None:
    """The folder of bundled Swagger UI / ReDoc files, or None when `fastapi-offline` is not installed."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "static"
    return folder if (folder / "swagger-ui-bundle.js").is_file() else None


def add_offline_docs(app: FastAPI, openapi_url: str = "/openapi.json") -> None:
    """Serve /docs, /redoc and their assets from this app (create the app with docs_url=None, redoc_url=None)."""
    folder = assets_dir()
    if folder is None:
        missing = PlainTextResponse("the API docs need the fastapi-offline package (pip install fastapi-offline); "
                                    f"the schema itself is at {openapi_url}", status_code=503)

        @app.get("/docs", include_in_schema=False)
        @app.get("/redoc", include_in_schema=False)
        async def no_docs() -> PlainTextResponse:
            return missing
        return
    app.mount(ASSETS_URL, StaticFiles(directory=folder), name="docs-assets")
    title = f"{app.title} API"

    @app.get("/docs", include_in_schema=False)
    async def swagger() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=openapi_url, title=title, oauth2_redirect_url="/docs/oauth2-redirect",
                                   swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
                                   swagger_favicon_url=f"{ASSETS_URL}/favicon.png")

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def oauth2_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=openapi_url, title=title, redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
                              redoc_favicon_url=f"{ASSETS_URL}/favicon.png", with_google_fonts=False)
