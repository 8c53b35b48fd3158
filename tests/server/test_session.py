"""The review page's login when reads require the token: an HttpOnly, SameSite=Strict session cookie that
authorises reads and the event stream, never writes; Secure over TLS; logout; tampered or expired refused."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine

from core.settings import Settings
from curation.catalog import store
from server.api.session_cookie import COOKIE, issue_cookie, valid_cookie
from server.app import create_app

TOKEN = "read-secret"


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    engine = store.make_engine(f"sqlite:///{tmp_path / 'catalog.db'}")
    store.upgrade_database(engine)
    with store.open_session(engine) as session:
        store.create_campaign(session, categories=["math"], offline=True, backends=[], campaign_id="c1")
        store.set_campaign_status(session, campaign_id="c1", status="succeeded")
    yield engine
    engine.dispose()


def settings_for(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home", api_token=SecretStr(TOKEN), api_read_requires_token=True)


def client_for(engine: Engine, tmp_path: Path, base_url: str = "http://testserver") -> TestClient:
    return TestClient(create_app(settings_for(tmp_path), engine=engine, resume_unfinished=False, event_poll_s=0.05),
                      base_url=base_url)


def test_login_sets_a_strict_http_only_cookie_that_opens_reads_only(sqlite_engine: Engine, tmp_path: Path) -> None:
    with client_for(sqlite_engine, tmp_path) as client:
        page = client.get("/")
        assert page.status_code == 401 and 'id="login"' in page.text and 'id="catalog"' not in page.text
        assert client.get("/catalog").status_code == 401
        assert client.post("/session", json={"token": "nope"}).status_code == 401
        assert COOKIE not in client.cookies
        login = client.post("/session", json={"token": TOKEN})
        assert login.status_code == 200
        cookie = login.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert "Path=/" in cookie and "Secure" not in cookie  # plain HTTP here
        assert client.get("/").status_code == 200 and 'id="catalog"' in client.get("/").text
        assert client.get("/catalog").status_code == 200
        assert client.get("/campaigns/c1").json()["status"] == "succeeded"
        with client.stream("GET", "/campaigns/c1/events") as events:  # EventSource sends the cookie, no header
            assert events.status_code == 200
            assert "event: end" in "".join(events.iter_text())
        # Writes still need the bearer token: the cookie alone is refused.
        assert client.post("/catalog/openai/gsm8k/approve", json={"reviewer": "a"}).status_code == 401
        assert client.post("/manifest/export", json={}).status_code == 401
        out = client.post("/session/logout")
        assert out.status_code == 200 and COOKIE not in client.cookies
        assert client.get("/catalog").status_code == 401 and client.get("/").status_code == 401


def test_the_cookie_is_secure_over_tls(sqlite_engine: Engine, tmp_path: Path) -> None:
    with client_for(sqlite_engine, tmp_path, base_url="https://testserver") as client:
        cookie = client.post("/session", json={"token": TOKEN}).headers["set-cookie"]
    assert "Secure" in cookie and "HttpOnly" in cookie


def test_tampered_expired_or_foreign_cookies_are_refused(sqlite_engine: Engine, tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    good = issue_cookie(settings)
    assert valid_cookie(settings, good)
    expiry, nonce, signature = good.split(".")
    forged = [f"{int(expiry) + 9999}.{nonce}.{signature}", f"{expiry}.{nonce}.{'0' * 64}", "garbage", "",
              issue_cookie(settings, now=time.time() - 13 * 3600),  # expired an hour ago
              issue_cookie(Settings(home=tmp_path, api_token=SecretStr("another-token")))]  # other key
    with client_for(sqlite_engine, tmp_path) as client:
        for value in forged:
            assert not valid_cookie(settings, value)
            client.cookies.set(COOKIE, value)
            assert client.get("/catalog").status_code == 401, value
        client.cookies.set(COOKIE, good)
        assert client.get("/catalog").status_code == 200


def test_no_token_configured_means_no_login(sqlite_engine: Engine, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", api_read_requires_token=True)
    with TestClient(create_app(settings, engine=sqlite_engine, resume_unfinished=False)) as client:
        assert client.post("/session", json={"token": "anything"}).status_code == 403
        assert client.get("/catalog").status_code == 403
