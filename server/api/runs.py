"""Regeneration run routes: the list of runs and one run's live status (the file `datahunt monitor` reads).

Runs are found under `settings.runs_dir` (default `home`/runs), where `datahunt regen` lists every run folder
it writes. Run ids are folder names; anything that is not a plain name (slashes, `..`) is refused with 404.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, status

from inference.run_registry import UnknownRunError, list_runs, resolve_run
from inference.status import UnreadableStatusError, read_status
from server.api.deps import SettingsDep, require_read_token

router = APIRouter(prefix="/runs", tags=["runs"], dependencies=[Depends(require_read_token)])

@router.get("")
def get_runs(settings: SettingsDep) -> list[dict[str, Any]]:
    """Every listed run: id, state, row counts, last update (newest first)."""
    return [dict(run) for run in list_runs(settings)]

@router.get("/{run_id}")
def get_run(run_id: str, settings: SettingsDep) -> dict[str, Any]:
    """The run's status: rows done/failed/pending, tokens, tok/s, ETA range, per-endpoint load."""
    try:
        run_status = read_status(resolve_run(run_id, settings))
    except UnknownRunError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    except UnreadableStatusError as exc:  # the server's own file is damaged: say so, do not pretend it is absent
        raise HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR, str(exc)) from None
    if run_status is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"run {run_id!r} has no status yet")
    return dict(run_status)
