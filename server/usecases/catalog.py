"""The catalog as both doors open and review it: open (migrated), review one entry or many, and the note for
a catalog that is empty.

A review adopts the mirror's licences first (`server.usecases.licenses`), so the entry a reviewer approves,
from the page or from the terminal, carries the licence the export will write. A read-only command that finds
no SQLite catalog file reads an empty one made in a temporary folder instead of creating `./.datahunt` where
it happened to run.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlmodel import Session

from core.settings import Settings
from curation.catalog import store
from curation.catalog.models import CatalogEntry
from server.usecases.licenses import adopt_in_session, mirror_license_index


def open_catalog(*, settings: Settings) -> Engine:
    """Return an engine on the configured catalog, migrated to the newest schema (created when missing)."""
    return _migrated(settings.resolved_database_url)


def _migrated(url: str) -> Engine:
    engine = store.make_engine(url)
    try:
        store.upgrade_database(engine)
    except BaseException:
        engine.dispose()
        raise
    return engine


def catalog_file_missing(*, settings: Settings) -> bool:
    """True when the catalog is a SQLite file that does not exist yet but could (nothing has been written there,
    and no file stands where its folder would be made)."""
    url = make_url(settings.resolved_database_url)
    database = url.database or ""
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:" or database.startswith("file:"):
        return False
    path = Path(database).expanduser()
    if path.exists():
        return False
    existing = next(p for p in path.parents if p.exists())  # the root exists
    return existing.is_dir()


@contextmanager
def reading_catalog(*, settings: Settings) -> Iterator[Engine]:
    """Yield an engine to read the configured catalog from, disposed of afterwards. A SQLite catalog whose file
    does not exist is read as an empty one in a temporary folder: a read never creates a catalog."""
    with tempfile.TemporaryDirectory(prefix="datahunt-empty-") as folder:
        missing = catalog_file_missing(settings=settings)
        engine = _migrated(f"sqlite:///{Path(folder) / 'catalog.db'}") if missing else open_catalog(settings=settings)
        try:
            yield engine
        finally:
            engine.dispose()


def empty_catalog_note(*, settings: Settings) -> str:
    """The note for a catalog found empty: which one was opened, and how another one is chosen."""
    missing = " (no catalog file there yet)" if catalog_file_missing(settings=settings) else ""
    return (f"the catalog {settings.catalog_label} is empty{missing}; another one is chosen with DATAHUNT_HOME or "
            "DATAHUNT_DATABASE_URL, or for good with `datahunt config set home DIR`")


@dataclass(frozen=True)
class Reviewed:
    """The entries as they stand after a review, and a warning when the mirror's licences could not be read."""

    entries: list[CatalogEntry] = field(default_factory=list)
    warning: str | None = None


def review(
    *, session: Session, settings: Settings, hub_id: str, approve: bool, reviewer: str, note: str | None = None,
    override: bool = False,
) -> Reviewed:
    """Approve or reject one entry as `reviewer` (`store.review_entry`, its errors as they are), the mirror's
    licences adopted first in the same transaction."""
    adopted = adopt_in_session(session=session, index=mirror_license_index(settings=settings))
    entry = store.review_entry(session, hub_id=hub_id, approve=approve, reviewer=reviewer, note=note, override=override)
    return Reviewed(entries=[entry], warning=adopted.warning)


def review_many(
    *, session: Session, settings: Settings, hub_ids: Sequence[str], approve: bool, reviewer: str,
    note: str | None = None, override: bool = False,
) -> Reviewed:
    """Approve or reject every entry of `hub_ids`, all or none (`store.review_entries`), the mirror's licences
    adopted first in the same transaction."""
    adopted = adopt_in_session(session=session, index=mirror_license_index(settings=settings))
    entries = store.review_entries(session, hub_ids=hub_ids, approve=approve, reviewer=reviewer, note=note,
                                   override=override)
    return Reviewed(entries=entries, warning=adopted.warning)
