"""The measured values a command reads (`curate --mix measured`, `value`'s mix counts): a value run's results
file, else the catalog's newest value of each source and category. A helper the two commands share, so neither
imports the other; bad input and a catalog that cannot be read end in one line."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from server.commands.failure import EXIT_FAILED, EXIT_USAGE, fail

if TYPE_CHECKING:
    from core.measured_value import MeasuredValue


def measured_values(path: Path | None) -> list[MeasuredValue]:
    """Measured values: a value run's file, else the catalog's newest of each source and category."""
    if path is not None:
        from training.value.results import values_of

        try:
            return values_of(path)
        except ValueError as exc:
            fail(str(exc), EXIT_USAGE)
    from sqlalchemy.exc import DatabaseError

    from core.settings import get_settings
    from curation.catalog import store

    engine = store.make_engine(get_settings().resolved_database_url)
    try:
        store.upgrade_database(engine)
        with store.open_session(engine, readonly=True) as session:
            return store.latest_values(session)
    except DatabaseError as exc:
        fail(f"cannot read the measured values from the catalog: {str(exc.orig or exc).splitlines()[0]}", EXIT_FAILED)
    finally:
        engine.dispose()
