"""The run registry: every regeneration run listed by id under one folder, so `datahunt monitor RUN_ID` and
`GET /runs/{id}` find a run wherever its output folder is.

A run whose folder lives under the runs folder is listed by its folder; one elsewhere by a `<id>.path` file
there that names its folder. A run is known once its folder holds a status file (`inference.status`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TypedDict

from core.settings import Settings, get_settings
from inference.atomic_files import write_file
from inference.errors import InferenceError
from inference.status import STATUS_FILE, RowCounts, UnreadableStatusError, read_status

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
LINK_SUFFIX = ".path"


class RunListing(TypedDict, total=False):
    """One run in `list_runs`; `error` only on a run whose status file is unreadable."""

    id: str
    state: str | None
    rows: RowCounts | None
    updated_at: str | None
    error: str


class UnknownRunError(InferenceError, LookupError):
    """No run with this id is registered (or the id is malformed)."""


def runs_root(settings: Settings | None = None) -> Path:
    """Return the folder where runs are listed: `settings.runs_dir`, default `home`/runs."""
    settings = settings or get_settings()
    return (settings.runs_dir or settings.home / "runs").resolve()


def register_run(run_dir: Path) -> str:
    """List `run_dir` under the runs folder (a `<id>.path` pointer unless it lives there); return its id."""
    run_dir = Path(run_dir).resolve()
    root = runs_root()
    run_id = run_dir.name
    if run_dir.parent != root:
        root.mkdir(parents=True, exist_ok=True)
        write_file(root / f"{run_id}{LINK_SUFFIX}", str(run_dir).encode("utf-8"))
    return run_id


def resolve_run(run_id: str, settings: Settings | None = None) -> Path:
    """Return the folder of run `run_id`; raise UnknownRunError for an unknown or malformed id."""
    if not RUN_ID_PATTERN.match(run_id) or ".." in run_id:
        raise UnknownRunError(f"malformed run id {run_id!r}")
    root = runs_root(settings)
    if (root / run_id / STATUS_FILE).is_file():
        return root / run_id
    link = root / f"{run_id}{LINK_SUFFIX}"
    if link.is_file():
        try:
            target = Path(link.read_text(encoding="utf-8").strip())
        except (OSError, ValueError) as exc:  # ValueError: not UTF-8
            raise UnreadableStatusError(f"{link} is unreadable: {exc}") from None
        if (target / STATUS_FILE).is_file():
            return target
    raise UnknownRunError(f"no run {run_id!r} under {root}")


def list_runs(settings: Settings | None = None) -> list[RunListing]:
    """Return a short summary of every listed run, newest update first."""
    root = runs_root(settings)
    if not root.is_dir():
        return []
    ids = {p.name for p in root.iterdir() if p.is_dir()} | {
        p.name[: -len(LINK_SUFFIX)] for p in root.iterdir() if p.name.endswith(LINK_SUFFIX)
    }
    runs: list[RunListing] = []
    for run_id in sorted(ids):
        try:
            status = read_status(resolve_run(run_id, settings))
        except UnknownRunError:
            continue
        except UnreadableStatusError as exc:  # listed, so one damaged run does not hide the others
            runs.append({"id": run_id, "state": "unreadable", "rows": None, "updated_at": None, "error": str(exc)})
            continue
        if status is not None:
            runs.append({"id": run_id, "state": status.get("state"), "rows": status.get("rows"),
                         "updated_at": status.get("updated_at")})
    return sorted(runs, key=lambda r: r.get("updated_at") or "", reverse=True)
