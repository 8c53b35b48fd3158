"""Browser defences of the service: security headers on every answer, the allowed-hosts check, the start-up
warning without an API token, and a review page that needs no inline script."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine

from core.settings import Settings
from server.api.web_defences import host_allowed, host_name
from server.app import create_app

TOKEN = "tok"


@pytest.fixture
def client(engine: Engine, tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(home=tmp_path / "home", api_token=SecretStr(TOKEN),
                        allowed_hosts="testserver,review.team.example,*.lab.example,[::1]")
    with TestClient(create_app(settings, engine=engine, resume_unfinished=False)) as client:
        yield client


def test_every_answer_carries_the_security_headers(client: TestClient) -> None:
    answers = [client.get("/"), client.get("/catalog"), client.get("/static/review.js"), client.get("/nope"),
               client.get("/campaigns/unknown"), client.post("/campaigns", json={}),  # 401 without a token
               client.post("/manifest/export", content=b"x" * 70_000, headers={"Authorization": f"Bearer {TOKEN}"}),
               client.get("/", headers={"Host": "evil.example"})]
    assert [a.status_code for a in answers] == [200, 200, 200, 404, 404, 401, 413, 400]
    for answer in answers:
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["referrer-policy"] == "no-referrer"
        policy = answer.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "script-src 'self';" in policy
        assert "unsafe-inline" not in policy


def test_the_api_docs_load_nothing_from_the_internet(client: TestClient) -> None:
    """/docs and /redoc used to load Swagger UI and ReDoc from a CDN (blank pages offline): every asset they
    name is served by the service itself, and their policy names no other origin."""
    for page in ("/docs", "/redoc"):
        answer = client.get(page)
        assert answer.status_code == 200, page
        policy = answer.headers["content-security-policy"]
        assert "https:" not in policy and "frame-ancestors 'none'" in policy, page
        assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", answer.text)
        assert assets and not [a for a in assets if "//" in a], (page, assets)
        for asset in assets:
            loaded = client.get(asset)
            assert loaded.status_code == 200 and len(loaded.content) > 1000, asset
    assert "SwaggerUIBundle" in client.get("/docs-assets/swagger-ui-bundle.js").text


def test_the_review_page_has_no_inline_script_or_handlers(client: TestClient) -> None:
    html = client.get("/").text
    scripts = re.findall(r"<script\b[^>]*>", html)
    assert scripts and all("src=" in tag for tag in scripts)
    assert re.findall(r"<script\b[^>]*>(?!\s*</script>)", html) == []  # nothing between <script …> and </script>
    assert re.findall(r"\son[a-z]+\s*=", html) == []  # no onclick=, onsubmit=, …
    assert re.findall(r"\sstyle\s*=", html) == []


def test_requests_for_other_hosts_are_refused(client: TestClient) -> None:
    for host in ("evil.example", "evil.example:80", "review.team.example.evil.example", "lab.example", "", "[::2]:80"):
        answer = client.get("/catalog", headers={"Host": host})
        assert answer.status_code == 400, host
        assert "not served here" in answer.json()["detail"]
    for host in ("review.team.example", "REVIEW.team.example:8000", "a.lab.example", "b.c.lab.example:1", "[::1]:8000"):
        assert client.get("/catalog", headers={"Host": host}).status_code == 200, host


def test_default_hosts_are_the_loopback_names(tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATAHUNT_ALLOWED_HOSTS")
    settings = Settings(home=tmp_path / "home")
    assert settings.allowed_host_list == ["localhost", "127.0.0.1", "[::1]"]
    with TestClient(create_app(settings, engine=engine, resume_unfinished=False),
                    base_url="http://127.0.0.1:8000") as client:
        assert client.get("/catalog").status_code == 200
        assert client.get("/catalog", headers={"Host": "localhost:8000"}).status_code == 200
        assert client.get("/catalog", headers={"Host": "attacker.example"}).status_code == 400


def test_host_parsing() -> None:
    assert host_name("Example.org:8000") == "example.org" and host_name("[::1]:80") == "[::1]"
    assert host_name("[::1]") == "[::1]" and host_name("10.0.0.5") == "10.0.0.5"
    assert host_allowed("x.example.org", ["*.example.org"]) and not host_allowed("example.org", ["*.example.org"])
    assert not host_allowed("badexample.org", ["*.example.org"]) and host_allowed("anything", ["*"])


def test_start_up_warns_without_an_api_token(engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="server.app")
    with TestClient(create_app(Settings(home=tmp_path / "home"), engine=engine, resume_unfinished=False)):
        pass
    warnings = [r.getMessage() for r in caplog.records if r.name == "server.app"]
    assert any("DATAHUNT_API_TOKEN is not set" in w and "reads are open" in w for w in warnings)
    caplog.clear()
    with TestClient(create_app(Settings(home=tmp_path / "home", api_token=SecretStr(TOKEN)), engine=engine,
                               resume_unfinished=False)):
        pass
    assert not [r for r in caplog.records if r.name == "server.app" and "API_TOKEN" in r.getMessage()]
