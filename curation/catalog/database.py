"""Opening the catalog database: engines for SQLite and PostgreSQL, Alembic upgrades, transactional sessions.

SQLite is the default (a file under `DATAHUNT_HOME`), PostgreSQL is chosen by URL. On SQLite every connection
runs in WAL mode with foreign keys on and a busy timeout, and transactions are begun by us (`BEGIN`, or
`BEGIN IMMEDIATE` when a writer asks for it) so savepoints and write locks behave as on a server database.
Migrations ship as package data and Alembic is configured in code, so an installed datahunt can upgrade.
`fenced` ties an engine's sessions to a lease generation (see `leases`). `run_transaction` runs a unit of work
again when PostgreSQL aborted it as a deadlock victim or a serialization failure: those transactions were
rolled back whole, so running them again is safe. `is_outage` tells the
database itself failing (down, dropped, full, damaged) apart from a statement it refused, for callers that
answer the one with a 503 or one line and leave the other a bug.
"""

from __future__ import annotations

import logging
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError
from sqlalchemy.exc import DatabaseError as SADatabaseError
from sqlmodel import Session, SQLModel

from curation.catalog import models  # noqa: F401  (importing it registers the catalog's tables)
from curation.catalog.errors import ConcurrentUpdateError, DatabaseError
from curation.catalog.leases import Fence, check_fence
from curation.catalog.storable import guard_session

logger = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_BEGIN_OPTION = "datahunt_sqlite_begin"  # execution option: "IMMEDIATE" takes the write lock at BEGIN
FENCE_OPTION = "datahunt_lease_fence"  # engine option: the `Fence` every session's commit is checked against
_PG_MIGRATION_LOCK = 0x64617461  # advisory lock key: one migrating process at a time
# SQLSTATEs of a transaction PostgreSQL rolled back to break a conflict: deadlock_detected, serialization_failure.
RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})
TRANSACTION_ATTEMPTS = 6
_RETRY_BASE_DELAY_S = 0.02

T = TypeVar("T")


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # Take transaction control away from the sqlite3 module: it would otherwise begin lazily and break savepoints.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _sqlite_on_begin(connection: Connection) -> None:
    mode = connection.get_execution_options().get(SQLITE_BEGIN_OPTION, "DEFERRED")
    connection.exec_driver_sql(f"BEGIN {mode}")


def make_engine(url: str, *, pre_ping: bool = True) -> Engine:
    """Return an engine for `url` (the caller's `Settings.resolved_database_url`); creates a SQLite file's folder.
    `pre_ping=False` skips PostgreSQL's liveness probe at each checkout (a caller that retries on failure)."""
    raw = url
    try:
        parsed = make_url(raw)
    except ArgumentError:
        raise DatabaseError(f"not a database URL: {raw!r}") from None
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise DatabaseError(f"unsupported database {backend!r}: use sqlite:///PATH or postgresql+psycopg://…")
    try:
        if backend == "postgresql":
            return create_engine(parsed, pool_pre_ping=pre_ping)
        database = parsed.database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            folder = Path(database).expanduser().parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # unwritable or impossible (DATAHUNT_HOME under /proc, a file in the way)
                raise DatabaseError(f"cannot create the catalog's folder {folder}: {exc.strerror or exc}") from None
        engine = create_engine(
            parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False}
        )
    except (NoSuchModuleError, ImportError) as exc:
        raise DatabaseError(
            f"cannot use {parsed.render_as_string()}: {exc}; use sqlite:///PATH or postgresql+psycopg://…"
        ) from None
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def compact_database(engine: Engine) -> bool:
    """Give a SQLite catalog's free pages back to the file system (VACUUM, then truncate the WAL); return
    whether it ran. A PostgreSQL server's autovacuum reuses freed space itself, so nothing is done there.
    VACUUM waits for other connections' writes (busy timeout) and rewrites the file: a maintenance step."""
    if engine.dialect.name != "sqlite":
        return False
    with engine.connect() as connection:
        raw: Any = connection.connection.dbapi_connection  # outside any transaction: VACUUM refuses one
        raw.execute("VACUUM")
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return True


def catalog_tables_only(name: str | None, type_: str, parent_names: Any) -> bool:
    """Alembic `include_name` hook: look only at the catalog's tables, never at others in the same database
    (the LangGraph checkpointer keeps its tables beside ours), so autogenerate never proposes dropping them."""
    if type_ == "table":
        return name in SQLModel.metadata.tables
    return True


def alembic_config() -> Config:
    """Return an Alembic config pointing at the shipped migrations (no alembic.ini needed)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def upgrade_database(engine: Engine) -> None:
    """Bring the catalog schema to the newest migration; a no-op when it is already there."""
    config = alembic_config()
    try:
        with engine.connect() as connection:
            if connection.dialect.name == "sqlite":
                connection = connection.execution_options(**{SQLITE_BEGIN_OPTION: "IMMEDIATE"})
            with connection.begin():
                if connection.dialect.name == "postgresql":
                    # Several API replicas may start together: one migrates, the others then find nothing to do.
                    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
    except OperationalError as exc:
        first_line = str(exc.orig or exc).strip().splitlines()[0] if str(exc.orig or exc).strip() else "no detail"
        raise DatabaseError(f"cannot open the catalog at {engine.url.render_as_string()}: {first_line}") from exc
    logger.debug("catalog schema at head on %s", engine.url.render_as_string())


@contextmanager
def open_session(engine: Engine, *, readonly: bool = False) -> Iterator[Session]:
    """Yield a session that commits when the block ends and rolls back when it raises.

    On SQLite a session takes the database's single write lock when its transaction begins (`BEGIN
    IMMEDIATE`), so a read-then-write transaction never fails half-way because another writer committed in
    between; short sessions queue on the busy timeout instead. `readonly=True` skips the lock (plain `BEGIN`).
    Objects stay readable after the commit (`expire_on_commit=False`), so callers can print what they got.
    A flush that would send text the database cannot take (a NUL, a lone surrogate) raises InvalidValueError.
    On an engine from `fenced`, a writing session's commit is refused (LeaseFencedError, all rolled back) once
    its lease generation is no longer the lease's.
    """
    fence: Fence | None = engine.get_execution_options().get(FENCE_OPTION)
    with guard_session(Session(engine, expire_on_commit=False)) as session:
        if engine.dialect.name == "sqlite" and not readonly:
            session.connection(execution_options={SQLITE_BEGIN_OPTION: "IMMEDIATE"})
        try:
            yield session
            if fence is not None and not readonly:
                check_fence(session, fence)
            session.commit()
        except BaseException:
            session.rollback()
            raise


def fenced(engine: Engine, fence: Fence) -> Engine:
    """Return `engine` (the same pool) with every writing `open_session` on it fenced by `fence`."""
    return engine.execution_options(**{FENCE_OPTION: fence})


def is_retryable(exc: BaseException) -> bool:
    """True when `exc` is a deadlock or serialization failure: the database rolled the whole transaction back."""
    if not isinstance(exc, DBAPIError):
        return False
    return getattr(exc.orig, "sqlstate", None) in RETRYABLE_SQLSTATES


def is_outage(exc: BaseException) -> bool:
    """True when `exc` is the database failing rather than refusing one of our statements: the server down or
    refusing connections, the database dropped, a full disk, a damaged SQLite file. Besides SQLAlchemy's
    `OperationalError` (or a bare `DatabaseError`: "file is not a database") this takes the drivers' own errors,
    which the LangGraph checkpointer raises unwrapped. A constraint or bad SQL is not an outage."""
    import psycopg

    if isinstance(exc, OperationalError | sqlite3.OperationalError | psycopg.OperationalError):
        return True
    return type(exc) in (SADatabaseError, sqlite3.DatabaseError)


def outage_reason(exc: BaseException) -> str:
    """Return the first line of what the database driver said about `exc` (at most 200 characters)."""
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines()
    return (lines[0] if lines else type(cause).__name__)[:200]


def run_transaction(
    engine: Engine, work: Callable[[Session], T], *, what: str = "transaction", attempts: int = TRANSACTION_ATTEMPTS
) -> T:
    """Run `work(session)` in one transaction and return its result, again (up to `attempts` times, with a
    short jittered backoff) when the database aborted it as a deadlock victim or a serialization failure.

    `work` must only touch the database through its session, so a rolled-back try leaves nothing behind.
    When every attempt is aborted, raise ConcurrentUpdateError.
    """
    for attempt in range(1, attempts + 1):
        try:
            with open_session(engine) as session:
                return work(session)
        except DBAPIError as exc:
            if not is_retryable(exc):
                raise
            detail = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__
            if attempt == attempts:
                raise ConcurrentUpdateError(
                    f"{what} was aborted {attempts} times by concurrent writers ({detail}); retry it") from exc
            logger.warning("%s aborted by a concurrent writer (%s), attempt %d of %d; retrying",
                           what, detail, attempt, attempts)
            time.sleep(random.uniform(0.5, 1.0) * _RETRY_BASE_DELAY_S * 2**attempt)
    raise AssertionError("unreachable")  # the loop returns or raises
