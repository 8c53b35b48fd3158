"""Opening the catalog: URL checks, clear errors for a database that is not there, aware UTC timestamps."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from importlib import resources
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import StatementError

from core.settings import get_settings
from curation.catalog import store
from curation.catalog.models import AuditEvent


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("not a url", "not a database URL"),
        ("mysql://user@host/db", "unsupported database 'mysql'"),
        ("postgresql+nosuchdriver://user@host/db", "cannot use"),
    ],
)
def test_bad_urls_are_refused_clearly(url: str, message: str) -> None:
    with pytest.raises(store.DatabaseError, match=message):
        store.make_engine(url)


def test_unreachable_server_is_a_database_error() -> None:
    engine = store.make_engine("postgresql+psycopg://postgres@127.0.0.1:1/test?connect_timeout=2")
    with pytest.raises(store.DatabaseError, match="cannot open the catalog"):
        store.upgrade_database(engine)
    engine.dispose()


def test_default_url_is_a_file_under_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DATAHUNT_HOME", str(tmp_path / "deep" / "home"))
    get_settings.cache_clear()
    engine = store.make_engine(get_settings().resolved_database_url)
    store.upgrade_database(engine)
    engine.dispose()
    assert (tmp_path / "deep" / "home" / "catalog.db").is_file()


def test_timestamps_come_back_aware_utc(engine: Engine) -> None:
    plus_two = timezone(timedelta(hours=2))
    written = datetime(2026, 1, 2, 12, 0, tzinfo=plus_two)
    with store.open_session(engine) as session:
        session.add(AuditEvent(entity="entry", entity_id="org/x", action="test", at=written))
    with store.open_session(engine, readonly=True) as session:
        event = session.get(AuditEvent, 1)
    assert event is not None
    assert event.at == written and event.at.utcoffset() == timedelta(0) and event.at.hour == 10


def test_naive_timestamps_are_refused(engine: Engine) -> None:
    with pytest.raises(StatementError, match="naive datetime"), store.open_session(engine) as session:
        session.add(AuditEvent(entity="entry", entity_id="org/x", action="test", at=datetime(2026, 1, 2)))
        session.flush()


def test_foreign_keys_are_enforced(engine: Engine) -> None:
    from sqlalchemy.exc import IntegrityError

    with pytest.raises(IntegrityError), store.open_session(engine) as session:
        session.execute(
            text(
                "INSERT INTO subagentrun (campaign_id, category, attempt, status, queries, results_per_backend, "
                "candidates_found, candidates_accepted, reasons) "
                "VALUES ('ghost', 'math', 1, 'running', '[]', '{}', 0, 0, '[]')"
            )
        )


def test_migrations_ship_as_package_data() -> None:
    folder = resources.files("curation.catalog") / "migrations"
    names = {p.name for p in folder.iterdir()}
    assert {"env.py", "script.py.mako", "versions"} <= names
    assert any(p.name.startswith("0001_") for p in (folder / "versions").iterdir())


def test_a_catalog_folder_that_cannot_be_made_is_a_database_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("in the way")
    with pytest.raises(store.DatabaseError, match="cannot create the catalog's folder"):
        store.make_engine(f"sqlite:///{tmp_path / 'file' / 'sub' / 'catalog.db'}")
