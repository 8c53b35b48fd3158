"""The review page's login when reads require the token: an HttpOnly, SameSite=Strict session cookie that
authorises reads and the event stream, never writes; Secure over TLS; tampered or expired refused; logout ends
the session on the server, so a copy of the cookie is refused afterwards, on every replica (SQLite and
PostgreSQL)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine
from sqlmodel import select

from core.settings import Settings
from curation.catalog import store
from curation.catalog.models import ReviewSession, utcnow
from server.api.session_cookie import COOKIE, issue_cookie, revoke_cookie, valid_cookie
from server.app import create_app

TOKEN = "read-secret"


@pytest.fixture
def catalog(engine: Engine) -> Engine:
    """The migrated catalog (SQLite, then PostgreSQL) with one finished campaign."""
    with store.open_session(engine) as session:
        store.create_campaign(session, categories=["math"], offline=True, backends=[], campaign_id="c1")
        store.set_campaign_status(session, campaign_id="c1", status="succeeded")
    return engine


def settings_for(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home", api_token=SecretStr(TOKEN), api_read_requires_token=True)


def client_for(engine: Engine, tmp_path: Path, base_url: str = "http://testserver") -> TestClient:
    return TestClient(create_app(settings_for(tmp_path), engine=engine, resume_unfinished=False, event_poll_s=0.05),
                      base_url=base_url)


def test_login_sets_a_strict_http_only_cookie_that_opens_reads_only(catalog: Engine, tmp_path: Path) -> None:
    with client_for(catalog, tmp_path) as client:
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


def test_the_cookie_is_secure_over_tls(catalog: Engine, tmp_path: Path) -> None:
    with client_for(catalog, tmp_path, base_url="https://testserver") as client:
        cookie = client.post("/session", json={"token": TOKEN}).headers["set-cookie"]
    assert "Secure" in cookie and "HttpOnly" in cookie


def test_tampered_expired_or_foreign_cookies_are_refused(catalog: Engine, tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    good = issue_cookie(settings, catalog)
    assert valid_cookie(settings, catalog, good)
    secret, signature = good.split(".")
    elsewhere = store.make_engine(f"sqlite:///{tmp_path / 'other-catalog.db'}")
    store.upgrade_database(elsewhere)
    forged = [f"{secret}x.{signature}", f"{secret}.{'0' * 64}", "garbage", "", signature,
              issue_cookie(settings, catalog, now=utcnow() - timedelta(hours=13)),  # expired an hour ago
              issue_cookie(Settings(home=tmp_path, api_token=SecretStr("another-token")), catalog),  # other key
              issue_cookie(settings, elsewhere)]  # signed with our token, but no session here opened it
    elsewhere.dispose()
    with client_for(catalog, tmp_path) as client:
        for value in forged:
            assert not valid_cookie(settings, catalog, value)
            client.cookies.set(COOKIE, value)
            assert client.get("/catalog").status_code == 401, value
        client.cookies.set(COOKIE, good)
        assert client.get("/catalog").status_code == 200


def test_a_session_expires_on_the_server_whatever_the_browser_keeps(catalog: Engine, tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    opened = utcnow()
    cookie = issue_cookie(settings, catalog, now=opened, lifetime_s=3600)
    assert valid_cookie(settings, catalog, cookie, now=opened + timedelta(minutes=59))
    assert not valid_cookie(settings, catalog, cookie, now=opened + timedelta(minutes=61))
    assert not revoke_cookie(settings, catalog, issue_cookie(settings, catalog, now=opened - timedelta(hours=13)))


def test_a_cookie_captured_before_logout_is_refused_after_it(catalog: Engine, tmp_path: Path) -> None:
    with client_for(catalog, tmp_path) as client:
        client.post("/session", json={"token": TOKEN})
        captured = client.cookies[COOKIE]  # what an attacker copied off the machine while the user was in
        assert client.post("/session/logout").status_code == 200
    with client_for(catalog, tmp_path) as thief:
        thief.cookies.set(COOKIE, captured)
        assert thief.get("/catalog").status_code == 401
        assert thief.get("/campaigns/c1/events").status_code == 401
        page = thief.get("/")
        assert page.status_code == 401 and 'id="login"' in page.text
        assert thief.post("/session/logout").status_code == 200  # logging out twice is harmless
    assert not valid_cookie(settings_for(tmp_path), catalog, captured)


def test_replicas_on_one_catalog_agree_on_logins_and_logouts(database_url: str, catalog: Engine,
                                                              tmp_path: Path) -> None:
    other = store.make_engine(database_url)  # a second process: its own engine and pool on the same database
    try:
        with client_for(catalog, tmp_path) as first, client_for(other, tmp_path) as second:
            first.post("/session", json={"token": TOKEN})
            cookie = first.cookies[COOKIE]
            second.cookies.set(COOKIE, cookie)
            assert second.get("/catalog").status_code == 200  # logged in on one, reads on the other
            assert second.post("/session/logout").status_code == 200
            assert first.get("/catalog").status_code == 401  # logged out on the other: refused here too
            first.post("/session", json={"token": TOKEN})
            assert first.get("/catalog").status_code == 200 and first.cookies[COOKIE] != cookie
    finally:
        other.dispose()


def test_no_token_configured_means_no_login(catalog: Engine, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", api_read_requires_token=True)
    with TestClient(create_app(settings, engine=catalog, resume_unfinished=False)) as client:
        assert client.post("/session", json={"token": "anything"}).status_code == 403
        assert client.get("/catalog").status_code == 403


def test_concurrent_logins_all_open_a_session_and_prune_the_expired_ones(catalog: Engine, tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    expired = [issue_cookie(settings, catalog, now=utcnow() - timedelta(hours=13)) for _ in range(20)]
    with ThreadPoolExecutor(8) as pool:
        cookies = list(pool.map(lambda _: issue_cookie(settings, catalog), range(16)))
    assert len(set(cookies)) == 16 and all(valid_cookie(settings, catalog, c) for c in cookies)
    assert not any(valid_cookie(settings, catalog, c) for c in expired)
    with store.open_session(catalog, readonly=True) as session:
        assert len(session.exec(select(ReviewSession)).all()) == 16  # the expired rows were deleted
