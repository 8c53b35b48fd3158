"""The shipped Alembic migrations build exactly the SQLModel tables, on SQLite and PostgreSQL, idempotently."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, text

from core.settings import get_settings
from curation.catalog import models
from curation.catalog.database import alembic_config, catalog_tables_only
from curation.catalog.store import make_engine, upgrade_database

REPO_ROOT = Path(__file__).resolve().parents[3]
TABLES = {"campaign", "subagentrun", "candidate", "verdict", "catalogentry", "auditevent", "lease", "review_session",
          "measured_value",
          "alembic_version"}


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


def test_downgrade_to_base_and_back(database_url: str) -> None:
    engine = make_engine(database_url)
    upgrade_database(engine)
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "base")
    with engine.connect() as connection:
        assert set(inspect(connection).get_table_names()) == {"alembic_version"}
    upgrade_database(engine)
    assert _current_revision(engine) == ScriptDirectory.from_config(config).get_current_head()
    engine.dispose()


def test_the_developer_ini_targets_the_settings_database() -> None:
    config = Config(str(REPO_ROOT / "alembic.ini"))
    command.upgrade(config, "head")  # env.py opens the settings' catalog: a SQLite file under DATAHUNT_HOME
    engine = make_engine(get_settings().resolved_database_url)
    assert _current_revision(engine) == ScriptDirectory.from_config(config).get_current_head()
    engine.dispose()


def test_tables_of_others_in_the_same_database_are_left_alone(database_url: str) -> None:
    engine = make_engine(database_url)
    upgrade_database(engine)
    with engine.begin() as connection:  # as the LangGraph checkpointer does beside the catalog
        connection.execute(text("CREATE TABLE checkpoints (thread_id TEXT PRIMARY KEY, checkpoint TEXT)"))
    with engine.connect() as connection:
        options = {"compare_type": True, "include_name": catalog_tables_only}
        diff = compare_metadata(MigrationContext.configure(connection, opts=options), models.SQLModel.metadata)
    upgrade_database(engine)
    with engine.connect() as connection:
        assert "checkpoints" in inspect(connection).get_table_names()
    engine.dispose()
    assert diff == []
