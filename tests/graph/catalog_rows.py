"""The catalog's rows as plain data, for telling whether two catalogs hold the same thing.

Clock times are dropped (every run has its own), and run ids are replaced by `category#attempt`: branches
open their runs concurrently, so which category gets which id is a race. Audit rows are sorted for the same
reason. Everything else (candidate, verdict and entry ids included) must match exactly.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine
from sqlmodel import SQLModel, col, select

from curation.catalog import store
from curation.catalog.models import AuditEvent, Campaign, CandidateRecord, CatalogEntry, SubagentRun, Verdict

CLOCK_FIELDS = {"created_at", "updated_at", "started_at", "finished_at", "elapsed_s", "at"}
TABLES: tuple[type[SQLModel], ...] = (Campaign, SubagentRun, CandidateRecord, Verdict, CatalogEntry, AuditEvent)


def catalog_rows(engine: Engine) -> dict[str, list[Any]]:
    """Return every table's rows (leases aside) as JSON-like data, clock times dropped and run ids named."""
    with store.open_session(engine, readonly=True) as session:
        runs = {r.id: f"{r.category}#{r.attempt}" for r in session.exec(select(SubagentRun))}
        tables: dict[str, list[Any]] = {}
        for model in TABLES:
            rows = [_plain(row.model_dump(), runs) for row in session.exec(select(model).order_by(col(model.id)))]  # type: ignore[attr-defined]
            if model is SubagentRun:
                rows = sorted(({**r, "id": runs[r["id"]]} for r in rows), key=lambda r: str(r["id"]))
            if model is AuditEvent:
                rows = sorted((_named_audit(r, runs) for r in rows), key=repr)
            tables[model.__tablename__] = rows  # type: ignore[index]
    return tables


def _plain(value: Any, runs: dict[int | None, str]) -> Any:
    if isinstance(value, dict):
        out = {k: _plain(v, runs) for k, v in value.items() if k not in CLOCK_FIELDS}
        if out.get("run_id") is not None:
            out["run_id"] = runs[out["run_id"]]
        return out
    if isinstance(value, list):
        return [_plain(v, runs) for v in value]
    return value


def _named_audit(row: dict[str, Any], runs: dict[int | None, str]) -> dict[str, Any]:
    row = {k: v for k, v in row.items() if k != "id"}
    if row["entity"] == "run":
        row["entity_id"] = runs[int(row["entity_id"])]
    return row
