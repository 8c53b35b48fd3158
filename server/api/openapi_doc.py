"""The OpenAPI document as the service really behaves: which routes need the token, and every error it answers.

FastAPI derives the document from the routes, which leaves out what the app does around them: reads are
open unless `DATAHUNT_API_READ_REQUIRES_TOKEN` is set (yet every route names the bearer scheme, because the
dependency that checks it is the same), the auth, lookup, conflict, size, host and database answers come
from dependencies, middleware and exception handlers, and a 422 carries either FastAPI's list of validation
errors or one sentence from the route. `honest_openapi` fixes those parts of the generated document once per
app: security only where a token is required, each operation's real error statuses with one `Error` schema.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from core.settings import Settings

ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "required": ["detail"],
    "properties": {
        "detail": {
            "anyOf": [
                {"type": "string", "description": "What was wrong, in one sentence."},
                {"type": "array", "items": {"$ref": "#/components/schemas/ValidationError"}},
            ]
        }
    },
}
_ERROR_REF = {"$ref": "#/components/schemas/Error"}
_REASONS = {
    "400": "The Host header is not an allowed host, or the body could not be read.",
    "401": "The bearer token is missing or wrong.",
    "403": "Mutations are disabled: the server has no DATAHUNT_API_TOKEN.",
    "404": "No campaign, category, run or entry with that id (for a bulk review: with an id of the body).",
    "409": "Refused in the current state: an override is needed, the campaign is busy, or the path is taken.",
    "413": "The request body is over the size limit.",
    "422": "A parameter or the body is not valid: FastAPI's error list, or one sentence.",
    "503": "The catalog database is unavailable.",
}
_CONFLICTS = ("/approve", "/reject", "/rerun", "/manifest/export")
_NAMES_IN_BODY = {"/catalog/approve", "/catalog/reject"}  # bulk reviews: a 404 names the unknown ids of the body


def _statuses(path: str, method: str, *, token: bool, body: bool) -> list[str]:
    codes = ["400", "422", "503"]
    if token:
        codes += ["401", "403"]
    if "{" in path or path in _NAMES_IN_BODY:
        codes.append("404")
    if method == "post" and path.endswith(_CONFLICTS):
        codes.append("409")
    if body:
        codes.append("413")
    return sorted(codes)


def honest_openapi(app: FastAPI, settings: Settings) -> dict[str, Any]:
    """Return (and cache on the app) the OpenAPI document with true security and error responses."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
    schema.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            # Every route that checks the token names the bearer scheme; reads check it only when configured.
            secured = "security" in operation and (method != "get" or settings.api_read_requires_token)
            if not secured:
                operation.pop("security", None)
            responses = operation.setdefault("responses", {})
            for code in _statuses(path, method, token=secured, body="requestBody" in operation):
                responses[code] = {"description": _REASONS[code],
                                   "content": {"application/json": {"schema": _ERROR_REF}}}
    app.openapi_schema = schema
    return schema
