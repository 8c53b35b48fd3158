"""A catalog database that fails under a running service: a 503 with the browser security headers and a one-line
reason, never a 500 with a traceback, and answers again once the database is back.

PostgreSQL goes away for real: the server stops answering (a relay in front of it is cut, so open connections
drop and new ones are refused), its backends are terminated, or the database is dropped. SQLite fills up for
real: `PRAGMA max_page_count` caps the file, and SQLite refuses the write with SQLITE_FULL ("database or disk
is full"), exactly as on a full disk. Reads of a full SQLite catalog still work.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event
from test_api_catalog import AUTH, TOKEN, make_settings, seed

from curation.catalog import store
from server.app import create_app

PG_ADMIN_CONNINFO = "host=127.0.0.1 port=5432 user=postgres dbname=test"
READS = ("/catalog", "/catalog/openai/gsm8k", "/campaigns", "/manifest", "/")
APPROVE = "/catalog/openai/gsm8k/approve"


class Relay:
    """A TCP relay to the PostgreSQL server that the test can cut (the server gone: open connections drop, new
    ones are refused) and restore on the same port (the server back)."""

    def __init__(self, target: tuple[str, int] = ("127.0.0.1", 5432)) -> None:
        self.target = target
        self.port = 0
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.listener: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # cut
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        assert self.listener is not None
        self.listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept(); close alone would not
        self.listener.close()
        with self.lock:
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self.sockets.clear()


@pytest.fixture
def relay() -> Iterator[Relay]:
    relay = Relay()
    yield relay
    relay.cut()


def assert_unavailable(response: Any, cause: str) -> None:
    """A 503 naming the cause in one line, with Retry-After and the browser security headers."""
    assert response.status_code == 503, response.text
    detail = response.json()["detail"]
    assert detail.startswith("the catalog database is unavailable: ") and cause in detail, detail
    assert "\n" not in detail and "Traceback" not in response.text
    assert response.headers["retry-after"] == "30"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]


@pytest.mark.postgres
def test_a_postgres_server_that_goes_away_is_a_503_until_it_is_back(pg_schema: str, tmp_path: Path,
                                                                     relay: Relay) -> None:
    engine = store.make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{relay.port}/test"
                               f"?options=-csearch_path%3D{pg_schema}&connect_timeout=5")
    store.upgrade_database(engine)
    seed(engine)
    app = create_app(make_settings(tmp_path, api_read_requires_token=True), engine=engine, resume_unfinished=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.post("/session", json={"token": TOKEN}).status_code == 200
        assert client.get("/catalog").status_code == 200
        relay.cut()  # the server is gone: pooled connections drop, new ones are refused
        for url in READS:
            assert_unavailable(client.get(url), "Connection refused")  # the session check needs the database too
        assert_unavailable(client.post(APPROVE, json={"reviewer": "ann"}, headers=AUTH), "Connection refused")
        assert_unavailable(client.post("/session", json={"token": TOKEN}), "Connection refused")
        relay.restore()  # back on the same address: the pool reconnects, nothing to restart
        assert client.get("/catalog").status_code == 200
        assert client.post(APPROVE, json={"reviewer": "ann"}, headers=AUTH).json()["status"] == "approved"
    engine.dispose()


@pytest.fixture
def pg_database() -> Iterator[str]:
    """A database of its own on the PostgreSQL server, which the test may drop."""
    name = f"dh_gone_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_CONNINFO, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect(PG_ADMIN_CONNINFO, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.postgres
def test_terminated_backends_reconnect_and_a_dropped_database_is_a_503(pg_database: str, tmp_path: Path) -> None:
    engine = store.make_engine(f"postgresql+psycopg://postgres@127.0.0.1:5432/{pg_database}")
    store.upgrade_database(engine)
    seed(engine)
    with TestClient(create_app(make_settings(tmp_path), engine=engine, resume_unfinished=False),
                    raise_server_exceptions=False) as client:
        assert client.get("/catalog").status_code == 200
        with psycopg.connect(PG_ADMIN_CONNINFO, autocommit=True) as admin:  # an administrator's restart, a failover
            killed = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s",
                                   (pg_database,)).fetchone()
        assert killed is not None and killed[0] >= 1
        assert client.get("/catalog").json()["total"] == 4  # the pool noticed and reconnected
        with psycopg.connect(PG_ADMIN_CONNINFO, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{pg_database}" WITH (FORCE)')
        for url in READS:
            assert_unavailable(client.get(url), f'database "{pg_database}" does not exist')
        assert_unavailable(client.post(APPROVE, json={"reviewer": "ann"}, headers=AUTH), "does not exist")
    engine.dispose()


def cap_pages(engine: Engine, pages: int) -> None:
    """Cap every connection of `engine` at `pages` pages of the file: SQLite's own limit, hit as a full disk."""

    @event.listens_for(engine, "connect")
    def _cap(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")


def test_a_full_sqlite_disk_is_a_503_for_writes_while_reads_go_on(tmp_path: Path) -> None:
    path = tmp_path / "catalog.db"
    setup = store.make_engine(f"sqlite:///{path}")
    store.upgrade_database(setup)
    seed(setup)
    store.compact_database(setup)  # no free page left inside the file
    with setup.connect() as connection:
        pages = connection.exec_driver_sql("PRAGMA page_count").scalar()
    setup.dispose()
    engine = store.make_engine(f"sqlite:///{path}")
    cap_pages(engine, int(pages or 0))  # and none to be added: the disk is full
    app = create_app(make_settings(tmp_path, api_read_requires_token=True), engine=engine, resume_unfinished=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        review = {"reviewer": "ann", "note": "n" * 4000}  # a note that needs a new page
        assert_unavailable(client.post(APPROVE, json=review, headers=AUTH), "database or disk is full")
        assert client.get("/catalog/openai/gsm8k", headers=AUTH).json()["entry"]["status"] == "pending_review"
        assert client.get("/catalog", headers=AUTH).json()["total"] == 4
    engine.dispose()
    free = store.make_engine(f"sqlite:///{path}")  # room again
    with TestClient(create_app(make_settings(tmp_path), engine=free, resume_unfinished=False)) as client:
        assert client.post(APPROVE, json=review, headers=AUTH).json()["status"] == "approved"
    free.dispose()
