"""The LangGraph checkpointer on the catalog's own database: SQLite by default, PostgreSQL for a team.

A campaign's thread id is its campaign id; every superstep and every finished branch's writes land here
(the campaign runs with `durability="sync"`), which is what makes a killed campaign resumable. For
PostgreSQL the SQLAlchemy URL is turned into a libpq conninfo, keeping `options` (e.g. a `search_path`) so
the checkpoint tables live in the same schema as the catalog. The state's own types beyond plain JSON (the
`core.types` enums the state is typed with) are registered with the serializer, so loading them back is allowed
explicitly rather than warned about. `fence_writes` checks a campaign's lease before each checkpoint write.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from sqlalchemy.engine import URL, make_url

from graph.errors import GraphError

# pg_advisory_lock key serialising checkpointer table setup: two campaigns starting together on a fresh
# database would otherwise both run LangGraph's migrations and one would fail on `checkpoint_migrations`.
_SETUP_LOCK_KEY = 0x6461746168756E74  # "datahunt"


# The non-JSON types a campaign's state holds (graph/state.py), as (module, name) pairs.
STATE_TYPES = [("core.types", "Decision"), ("core.types", "RunStatus")]


def state_serializer() -> JsonPlusSerializer:
    """Return the checkpoint serializer that knows the state's enums."""
    return JsonPlusSerializer(allowed_msgpack_modules=STATE_TYPES)


def fence_writes(saver: BaseCheckpointSaver[str], check: Callable[[], Awaitable[None]]) -> None:
    """Have `saver` await `check` (the blocking check in a worker thread) before each checkpoint and each task's writes,
    so a run whose lease was taken over (`check` raises) adds nothing to the thread the new owner resumes.
    The check and the write are two transactions: the window between them is one write, after which the run
    stops at its next catalog write or lease renewal."""
    for name in ("aput", "aput_writes"):
        original = getattr(saver, name)

        def fenced(original: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            @functools.wraps(original)  # keeps the signature LangGraph inspects (`task_path`)
            async def write(*args: Any, **kwargs: Any) -> Any:
                await check()
                return await original(*args, **kwargs)

            return write

        setattr(saver, name, fenced(original))


class UnsupportedDatabaseError(GraphError, ValueError):
    """The catalog URL names a database the checkpointer cannot use."""


def postgres_conninfo(url: URL) -> str:
    """Return the libpq conninfo for a `postgresql[+driver]://` SQLAlchemy URL, query options kept."""
    from psycopg.conninfo import make_conninfo  # here, not at the top: a SQLite campaign never loads psycopg

    params: dict[str, str] = {}
    for key, value in url.query.items():
        params[key] = value if isinstance(value, str) else value[-1]
    parts: list[tuple[str, object]] = [("host", url.host), ("port", url.port), ("user", url.username),
                                       ("password", url.password), ("dbname", url.database)]
    for key, part in parts:
        if part is not None:
            params[key] = str(part)
    return make_conninfo("", **params)


async def _setup_sqlite(saver: BaseCheckpointSaver[str], attempts: int = 100) -> None:
    """Create the checkpoint tables, waiting out another process or campaign doing the same.

    The setup switches the file to WAL first; SQLite answers "database is locked" at once (no busy wait) when
    another connection is setting up at the same moment, so retry briefly instead of failing the campaign.
    """
    import sqlite3

    for attempt in range(attempts):
        try:
            await saver.setup()  # type: ignore[attr-defined]
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == attempts - 1:
                raise
            await asyncio.sleep(0.05)


@asynccontextmanager
async def open_checkpointer(database_url: str) -> AsyncIterator[BaseCheckpointSaver[str]]:
    """Yield a ready (tables created) async checkpointer on the database of `database_url`."""
    url = make_url(database_url)
    backend = url.get_backend_name()
    if backend == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        path = url.database or ":memory:"
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        async with AsyncSqliteSaver.from_conn_string(path) as saver:
            saver.serde = state_serializer()
            await _setup_sqlite(saver)
            yield saver
    elif backend == "postgresql":
        import psycopg
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        conninfo = postgres_conninfo(url)
        async with AsyncPostgresSaver.from_conn_string(conninfo, serde=state_serializer()) as saver:
            async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as lock:
                # Poll with try-lock rather than block: a session blocked inside pg_advisory_lock is a running
                # transaction, and the setup's CREATE INDEX CONCURRENTLY would wait for it forever.
                while not (await (await lock.execute("SELECT pg_try_advisory_lock(%s)", (_SETUP_LOCK_KEY,))).fetchone()
                           or (False,))[0]:
                    await asyncio.sleep(0.05)
                try:
                    await saver.setup()
                finally:
                    await lock.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK_KEY,))
            yield saver
    else:
        raise UnsupportedDatabaseError(f"no checkpointer for database {backend!r}: use sqlite or postgresql")
