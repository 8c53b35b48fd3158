"""Manifest routes: show the manifest of the approved set, or export it as a file inside the data directory.

Both call `server.usecases.manifest`, as `datahunt manifest export` does, so the two doors write the same file.
The export answers with the path written and the manifest itself; a path outside the data directory is a 422,
one the directory's contents refuse (a file in the way, a link loop) a 409, and a data directory that refuses
the write (full: 507) a 5xx with the reason, never a bare 500.
"""

from __future__ import annotations

import errno
import logging
from typing import Annotated

from fastapi import APIRouter, Body, Depends, HTTPException, Query, status
from pydantic import StringConstraints

from curation.manifest import Manifest
from server.api.deps import EngineDep, SettingsDep, require_read_token, require_token
from server.api.schemas import SHARE_PATTERN, ManifestExported, ManifestOptions
from server.manifest_builder import ExportPathConflictError, ExportPathError, parse_shares
from server.usecases.manifest import approved_manifest, export_approved_manifest

logger = logging.getLogger(__name__)
router = APIRouter(prefix="/manifest", tags=["manifest"])


@router.get("", dependencies=[Depends(require_read_token)])
def get_manifest(
    engine: EngineDep,
    settings: SettingsDep,
    target_model: Annotated[str | None, Query(max_length=256)] = None,
    tokenizer: Annotated[str | None, Query(max_length=256)] = None,
    budget_total: Annotated[int | None, Query(gt=0, le=10**12)] = None,
    share: Annotated[
        list[Annotated[str, StringConstraints(pattern=SHARE_PATTERN)]],
        Query(max_length=10, description="category=fraction, repeatable; the fractions sum to at most 1"),
    ] = [],  # noqa: B006
) -> Manifest:
    """Return the manifest of the currently approved set (nothing is written)."""
    try:
        built = approved_manifest(engine=engine, settings=settings, target_model=target_model, tokenizer=tokenizer,
                                 budget_total=budget_total, shares=parse_shares(share))
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None
    if built.warning:
        logger.warning("%s", built.warning)
    return built.manifest


@router.post("/export", dependencies=[Depends(require_token)])
def export_manifest(
    engine: EngineDep, settings: SettingsDep, options: Annotated[ManifestOptions | None, Body()] = None
) -> ManifestExported:
    """Write the approved set's manifest under the data directory and return the path and the manifest (the
    mirror's licences adopted onto the entries first, as `datahunt manifest export` does)."""
    options = options or ManifestOptions()
    try:
        exported = export_approved_manifest(engine=engine, settings=settings, path=options.path,
                                   target_model=options.target_model, tokenizer=options.tokenizer,
                                   budget_total=options.budget_total, shares=options.shares, seed=options.seed)
    except ExportPathConflictError as exc:  # well-formed, but what is in the data directory refuses it
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    except (ExportPathError, ValueError) as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None
    except OSError as exc:  # the data directory refused the write itself: full, over quota, read-only
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
        raise HTTPException(status.HTTP_507_INSUFFICIENT_STORAGE if full else status.HTTP_503_SERVICE_UNAVAILABLE,
                            f"the manifest could not be written in the data directory: {exc.strerror or exc}") from None
    if exported.warning:
        logger.warning("%s", exported.warning)
    return ManifestExported(path=str(exported.path), manifest=exported.manifest)
