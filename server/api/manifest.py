"""Manifest routes: show the manifest of the approved set, or export it as a file inside the data directory.

Both build it with `server.manifest_builder`, as `datahunt manifest export` does. The export answers with the
path written and the manifest itself; a path outside the data directory is a 422, one the directory's contents
refuse (a file in the way, a link loop) a 409, and a data directory that refuses the write (full: 507) a 5xx
with the reason, never a bare 500.
"""

from __future__ import annotations

import errno
from typing import Annotated

from fastapi import APIRouter, Body, Depends, HTTPException, Query, status
from pydantic import StringConstraints
from sqlalchemy import Engine

from curation.catalog import store
from curation.manifest import Manifest, TargetModel
from server.api.deps import EngineDep, SettingsDep, require_read_token, require_token
from server.api.schemas import SHARE_PATTERN, ManifestExported, ManifestOptions
from server.manifest_builder import (
    ExportPathConflictError,
    ExportPathError,
    build_manifest,
    make_budget,
    parse_shares,
    resolve_export_path,
    write_manifest,
)

router = APIRouter(prefix="/manifest", tags=["manifest"])


def _manifest(engine: Engine, options: ManifestOptions) -> Manifest:
    try:
        budget = make_budget(options.budget_total, options.shares, options.seed)
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None
    target = TargetModel(model=options.target_model, tokenizer=options.tokenizer) if options.target_model else None
    with store.open_session(engine) as session:
        approved = store.approved_entries(session)
        benchmarks = store.benchmark_entries(session)
    return build_manifest(approved, budget=budget, target=target, eval_entries=benchmarks)


@router.get("", dependencies=[Depends(require_read_token)])
def get_manifest(
    engine: EngineDep,
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
        shares = parse_shares(share)
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None
    options = ManifestOptions(target_model=target_model, tokenizer=tokenizer, budget_total=budget_total, shares=shares)
    return _manifest(engine, options)


@router.post("/export", dependencies=[Depends(require_token)])
def export_manifest(
    engine: EngineDep, settings: SettingsDep, options: Annotated[ManifestOptions | None, Body()] = None
) -> ManifestExported:
    """Write the approved set's manifest under the data directory and return the path and the manifest."""
    options = options or ManifestOptions()
    try:
        path = resolve_export_path(settings.resolved_data_dir, options.path)
        manifest = _manifest(engine, options)
        write_manifest(manifest, path, data_dir=settings.resolved_data_dir)
    except ExportPathConflictError as exc:  # well-formed, but what is in the data directory refuses it
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    except ExportPathError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None
    except OSError as exc:  # the data directory refused the write itself: full, over quota, read-only
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
        raise HTTPException(status.HTTP_507_INSUFFICIENT_STORAGE if full else status.HTTP_503_SERVICE_UNAVAILABLE,
                            f"the manifest could not be written in the data directory: {exc.strerror or exc}") from None
    return ManifestExported(path=str(path), manifest=manifest)
