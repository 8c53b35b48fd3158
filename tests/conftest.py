"""Shared fixtures: isolated settings, and a real catalog database on SQLite and on PostgreSQL.

PostgreSQL runs on 127.0.0.1:5432 (trust auth, database `test`); every test gets its own schema, dropped
afterwards, so runs never collide. Tests that use `database_url` run once per backend.

`make test` spreads the files over one worker per core (pytest-xdist, a file stays on one worker so its module
fixtures are built once); the longest files are handed out first so that they do not run alone at the end.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from core.settings import get_settings

PG_ADMIN_CONNINFO = "host=127.0.0.1 port=5432 user=postgres dbname=test"
PG_URL_TEMPLATE = "postgresql+psycopg://postgres@127.0.0.1:5432/test?options=-csearch_path%3D{schema}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put first the files with a test allowed longer than the suite's timeout (minutes each), then the files
    with tests marked `slow`, then the rest; each file keeps its own order, and the run keeps every test."""
    default_timeout = float(config.getini("timeout") or 0)

    def rank(item: pytest.Item) -> int:
        if any(float(mark.args[0]) > default_timeout for mark in item.iter_markers("timeout") if mark.args):
            return 0
        return 1 if item.get_closest_marker("slow") else 2

    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    order: dict[str, int] = {}  # a file's place in the collection
    file_rank: dict[str, int] = {}  # the lowest rank of its tests
    for item in items:
        order.setdefault(file_of(item), len(order))
        file_rank[file_of(item)] = min(file_rank.get(file_of(item), 2), rank(item))
    items.sort(key=lambda item: (file_rank[file_of(item)], order[file_of(item)]))


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Point DATAHUNT_HOME at a temp folder, force offline, and drop any DATAHUNT_* from the outer env."""
    import os

    for key in list(os.environ):
        if key.startswith("DATAHUNT_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("DATAHUNT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DATAHUNT_OFFLINE", "1")
    monkeypatch.setenv("DATAHUNT_CONFIG", str(tmp_path / "no-datahunt-config.toml"))  # never the user's own file
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # The Host fastapi's TestClient sends, beside the loopback names the service allows by default.
    monkeypatch.setenv("DATAHUNT_ALLOWED_HOSTS", "testserver,localhost,127.0.0.1,[::1]")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """Create a fresh schema in the machine's PostgreSQL and drop it after the test."""
    import psycopg

    schema = f"dh_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_CONNINFO, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema
    finally:
        with psycopg.connect(PG_ADMIN_CONNINFO, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A real, empty catalog database URL: a SQLite file, then a private PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'catalog.db'}"
    schema = request.getfixturevalue("pg_schema")
    return PG_URL_TEMPLATE.format(schema=schema)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """A migrated, empty catalog on SQLite, then on PostgreSQL."""
    from curation.catalog import store

    engine = store.make_engine(database_url)
    store.upgrade_database(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def pg_engine(pg_schema: str) -> Iterator[Engine]:
    """A migrated, empty catalog on PostgreSQL only: for row locks and deadlocks, which SQLite does not have."""
    from curation.catalog import store

    engine = store.make_engine(PG_URL_TEMPLATE.format(schema=pg_schema))
    store.upgrade_database(engine)
    yield engine
    engine.dispose()
