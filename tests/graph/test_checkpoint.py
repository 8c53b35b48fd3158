"""The checkpointer opens on the catalog's own database, PostgreSQL schemas included."""

from __future__ import annotations

import asyncio

import pytest
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy.engine import make_url

from graph.checkpoint import UnsupportedDatabaseError, open_checkpointer, postgres_conninfo


def test_postgres_url_becomes_a_conninfo_that_keeps_the_search_path() -> None:
    url = make_url("postgresql+psycopg://dh:s%40cret@db.internal:6543/catalog?options=-csearch_path%3Dteam_a")
    assert conninfo_to_dict(postgres_conninfo(url)) == {
        "host": "db.internal", "port": "6543", "user": "dh", "password": "s@cret", "dbname": "catalog",
        "options": "-csearch_path=team_a",
    }


def test_checkpointer_opens_and_creates_its_tables(database_url: str) -> None:
    async def roundtrip() -> list[object]:
        async with open_checkpointer(database_url) as saver:
            return [c async for c in saver.alist({"configurable": {"thread_id": "nothing-yet"}})]

    assert asyncio.run(roundtrip()) == []


def test_unknown_database_is_refused_clearly() -> None:
    async def open_mysql() -> None:
        async with open_checkpointer("mysql://u@h/db"):
            pass

    with pytest.raises(UnsupportedDatabaseError, match="no checkpointer for database 'mysql'"):
        asyncio.run(open_mysql())


def test_two_campaigns_set_up_a_fresh_database_at_once(database_url: str) -> None:
    async def open_and_list() -> int:
        async with open_checkpointer(database_url) as saver:
            return len([c async for c in saver.alist({"configurable": {"thread_id": "none"}})])

    async def both() -> list[int]:
        return list(await asyncio.gather(*(open_and_list() for _ in range(4))))

    assert asyncio.run(both()) == [0, 0, 0, 0]
