"""Alembic environment of the catalog: runs migrations on the connection the store passes in.

`upgrade_database` (curation/catalog/store.py) builds the Alembic `Config` in code and puts an open connection
in `config.attributes["connection"]`, so no `alembic.ini` and no URL in a file are needed. Run from the
command line (`alembic upgrade head` with the repo's alembic.ini), it connects to the settings' catalog URL.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection
from sqlmodel import SQLModel

from curation.catalog import models  # noqa: F401  (importing it registers the catalog's tables)
from curation.catalog.database import catalog_tables_only

target_metadata = SQLModel.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
        compare_type=True,
        include_name=catalog_tables_only,  # the checkpointer's tables share the database
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    # Run by `alembic upgrade head`, Alembic's own entry point: there is no caller to hand settings in.
    from core.settings import get_settings
    from curation.catalog.store import make_engine

    engine = make_engine(get_settings().resolved_database_url)
    with engine.connect() as connection:
        _run(connection)
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("the catalog migrations run online only: upgrade_database() or `alembic upgrade head`")
_run_online()
