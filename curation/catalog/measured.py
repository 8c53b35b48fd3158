"""Measured values in the catalog: written by a value run, read beside each entry and by `curate --mix measured`.

A value is a `core.measured_value.MeasuredValue`; the catalog keeps one row per (kind, subject, op, run), so a
run written again replaces its own rows and another run's stay. What an entry shows is the newest value of its
own source and, where there is one, of each of its categories.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlmodel import Session, col, select

from core.measured_value import MeasuredValue, ValueEstimate
from curation.catalog.models import MeasuredValueRecord, utcnow


def record_values(session: Session, *, values: Sequence[MeasuredValue]) -> int:
    """Write the values (replacing a run's earlier rows of the same unit); return how many were written."""
    for value in values:
        found = session.exec(select(MeasuredValueRecord).where(
            MeasuredValueRecord.kind == value.kind, MeasuredValueRecord.subject == value.name,
            MeasuredValueRecord.op == value.op, MeasuredValueRecord.run == value.run)).first()
        row = found or MeasuredValueRecord(kind=value.kind, subject=value.name, op=value.op, run=value.run,
                                           budget=value.budget, rows_swapped=0, seeds=1, noise_dof=0, per_10k=0,
                                           delta=0)
        row.budget, row.rows_swapped, row.seeds, row.noise_dof = (value.budget, value.rows_swapped, value.seeds,
                                                                  value.noise_dof)
        row.per_10k, row.low, row.high, row.delta = (value.mean.per_10k, value.mean.low, value.mean.high,
                                                     value.mean.delta)
        row.per_set = {name: est.model_dump(mode="json") for name, est in value.per_set.items()}
        row.measured_at = utcnow()
        session.add(row)
    session.flush()
    return len(values)


def as_value(row: MeasuredValueRecord) -> MeasuredValue:
    """The catalog row as the contract's model."""
    return MeasuredValue(
        kind="category" if row.kind == "category" else "source", name=row.subject,
        op="add" if row.op == "add" else "remove", budget=row.budget, rows_swapped=row.rows_swapped,
        seeds=row.seeds, noise_dof=row.noise_dof,
        mean=ValueEstimate(delta=row.delta, per_10k=row.per_10k, low=row.low, high=row.high),
        per_set={name: ValueEstimate.model_validate(est) for name, est in row.per_set.items()}, run=row.run)


def latest_values(session: Session, *, kind: str | None = None, subjects: Sequence[str] | None = None
                  ) -> list[MeasuredValue]:
    """The newest value of each (kind, subject), optionally of one kind or of the subjects given."""
    stmt = select(MeasuredValueRecord)
    if kind is not None:
        stmt = stmt.where(MeasuredValueRecord.kind == kind)
    if subjects is not None:
        stmt = stmt.where(col(MeasuredValueRecord.subject).in_(list(subjects)))
    newest: dict[tuple[str, str], MeasuredValueRecord] = {}
    for row in session.exec(stmt.order_by(col(MeasuredValueRecord.measured_at), col(MeasuredValueRecord.id))):
        newest[(row.kind, row.subject)] = row  # later rows win
    return [as_value(r) for _, r in sorted(newest.items())]


def entry_values(session: Session, *, hub_ids: Sequence[str], categories: dict[str, list[str]]
                 ) -> dict[str, list[MeasuredValue]]:
    """Hub id -> the newest value of its source, then of each of its categories (`categories`: Hub id -> its
    categories), for the entries of one page."""
    wanted = sorted({*hub_ids, *(c for cats in categories.values() for c in cats)})
    by_key = {(v.kind, v.name): v for v in latest_values(session, subjects=wanted)}
    out: dict[str, list[MeasuredValue]] = {}
    for hub_id in hub_ids:
        found = [by_key[("source", hub_id)]] if ("source", hub_id) in by_key else []
        found += [by_key[("category", c)] for c in categories.get(hub_id, []) if ("category", c) in by_key]
        out[hub_id] = found
    return out
