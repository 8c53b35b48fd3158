"""The shipped Alembic migrations build exactly the SQLModel tables, on SQLite and PostgreSQL, idempotently."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect

from curation.catalog import models
from curation.catalog.database import alembic_config
from curation.catalog.store import make_engine, upgrade_database

TABLES = {"campaign", "subagentrun", "candidate", "verdict", "catalogentry", "auditevent", "alembic_version"}


def _current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def test_upgrade_gives_exactly_the_model_metadata(database_url: str) -> None:
    engine = make_engine(database_url)
    upgrade_database(engine)
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        diff = compare_metadata(context, models.SQLModel.metadata)
        tables = set(inspect(connection).get_table_names())
    engine.dispose()
    assert diff == []
    assert tables == TABLES


def test_upgrade_twice_is_a_no_op(database_url: str) -> None:
    engine = make_engine(database_url)
    upgrade_database(engine)
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    first = _current_revision(engine)
    upgrade_database(engine)
    assert _current_revision(engine) == first == head
    with engine.connect() as connection:
        assert set(inspect(connection).get_table_names()) == TABLES
    engine.dispose()


def test_sqlite_connections_use_wal_and_foreign_keys(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "folder" / "catalog.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade_database(engine)
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 1000
    engine.dispose()
    assert path.exists()
