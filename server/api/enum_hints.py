"""Validation errors that say what was meant: a 422 for a value outside an enum (a category, a status) names
the closest allowed value, as the CLI and the review page do (`unknown category 'maths' (did you mean
`math`?)`). The body keeps FastAPI's shape (`{"detail": [{"type", "loc", "msg", "input", "ctx"}, …]}`): only
the message of an `enum` error gains the hint.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from fastapi import Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.status import HTTP_422_UNPROCESSABLE_CONTENT


def with_hint(error: dict[str, Any]) -> dict[str, Any]:
    """Return `error` with " (did you mean `x`?)" added to its message when it is an enum error whose input is
    close to one allowed value."""
    if error.get("type") != "enum" or not isinstance(error.get("input"), str):
        return error
    allowed = re.findall(r"'([^']*)'", str((error.get("ctx") or {}).get("expected", "")))
    typed = error["input"].strip().lower().replace("-", "_")
    close = difflib.get_close_matches(typed, allowed, n=1, cutoff=0.6)
    if not close:
        return error
    return {**error, "msg": f"{error['msg']} (did you mean `{close[0]}`?)"}


async def validation_error_with_hints(_request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 for a request that does not validate, its enum errors naming the closest allowed value."""
    assert isinstance(exc, RequestValidationError)
    errors = [with_hint(dict(e)) for e in exc.errors()]
    return JSONResponse(status_code=HTTP_422_UNPROCESSABLE_CONTENT, content={"detail": jsonable_encoder(errors)})
