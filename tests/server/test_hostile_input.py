"""Hostile input on SQLite and PostgreSQL: NUL bytes, NaN/Infinity/1e400, lone surrogates, odd export paths.

Every probe must be a 4xx with a message that says what was wrong, never a 500, and must leave the catalog
as it was. Bodies are sent as raw bytes, since a JSON library would refuse to write most of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from test_api_catalog import AUTH, make_settings, seed

from curation.catalog import store
from server.app import create_app

JSON = {**AUTH, "content-type": "application/json"}
APPROVE = "/catalog/openai/gsm8k/approve"

# (method, path, raw body or None, status, words the message must hold)
PROBES = [
    ("GET", "/catalog?q=%00", None, 422, "search text contains a NUL character"),
    ("GET", "/catalog?license=%00", None, 422, "license filter contains a NUL character"),
    ("GET", "/?q=%00", None, 422, "search text contains a NUL character"),
    ("GET", "/?license=x%00y", None, 422, "license filter contains a NUL character"),
    ("GET", "/campaigns/%00", None, 422, "campaign id contains a NUL character"),
    ("POST", "/campaigns/%00/subagents/math/rerun", None, 422, "campaign id contains a NUL character"),
    ("GET", "/catalog/a%00b/c", None, 422, "malformed Hub dataset id"),
    ("POST", APPROVE, b'{"reviewer": "ann", "note": "x\\u0000y"}', 422, "note contains a NUL character"),
    ("POST", APPROVE, b'{"reviewer": "a\\u0000b"}', 422, "reviewer contains a NUL character"),
    ("POST", APPROVE, b'{"reviewer": "\\ud800"}', 422, "reviewer: a string contains an unpaired surrogate"),
    ("POST", APPROVE, b'{"reviewer": "ann", "note": "\\udfff!"}', 422, "note: a string contains an unpaired"),
    ("POST", APPROVE, b'{"reviewer": "ann", "\\ud800": 1}', 422, "(key): a string contains an unpaired"),
    ("POST", APPROVE, b'{"reviewer": "ann", "override": NaN}', 422, "NaN is not a JSON number"),
    ("POST", APPROVE, b'{"reviewer": "ann", "override": Infinity}', 422, "Infinity is not a JSON number"),
    ("POST", APPROVE, b'{"reviewer": "\xff"}', 422, "not valid UTF-8"),
    ("POST", "/manifest/export", b'{"budget_total": 1e400}', 422, "1e400 is out of range"),
    ("POST", "/manifest/export", b'{"shares": {"math": -Infinity}}', 422, "-Infinity is not a JSON number"),
    ("POST", "/manifest/export", b'{"seed": ' + b"9" * 5000 + b"}", 422, "too many digits"),
    ("POST", "/manifest/export", b'{"path": "\\ud800.json"}', 422, "path: a string contains an unpaired"),
    ("POST", "/manifest/export", b'{"path": "afile.json/child.json"}', 409, "afile.json is a file, not a folder"),
    ("POST", "/manifest/export", b'{"path": "' + b"a" * 251 + b'.json"}', 422, "is over 255 characters"),
    ("POST", "/manifest/export", b'{"path": "../up.json"}', 422, "not first '.'"),
    ("POST", "/campaigns", b'{"categories": ["\\ud800"]}', 422, "categories.0: a string contains an unpaired"),
    ("POST", "/campaigns", b'{"offline": NaN}', 422, "NaN is not a JSON number"),
]


@pytest.fixture
def client(engine: Engine, tmp_path: Path) -> Iterator[TestClient]:
    seed(engine)
    settings = make_settings(tmp_path)
    settings.resolved_data_dir.mkdir(parents=True)
    (settings.resolved_data_dir / "afile.json").write_text("{}")
    app = create_app(settings, engine=engine, resume_unfinished=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def test_hostile_probes_are_clear_4xx_and_change_nothing(client: TestClient, engine: Engine) -> None:
    with store.open_session(engine) as session:
        before = store.entry_history(session, hub_id="openai/gsm8k")
    for method, path, body, status, words in PROBES:
        response = client.request(method, path, content=body, headers=JSON)
        assert (response.status_code, path, body) == (status, path, body)
        detail = response.json()["detail"]
        message = detail if isinstance(detail, str) else " ".join(d["msg"] for d in detail)
        assert words in message, (path, body, message)
    with store.open_session(engine) as session:
        after = store.entry_history(session, hub_id="openai/gsm8k")
        assert store.list_campaigns(session, limit=100)[0].status == "pending"  # no campaign was started
        assert len(store.list_campaigns(session, limit=100)) == 1
    assert after["entry"].status == "pending_review" and len(after["audit"]) == len(before["audit"])


def test_long_export_names_that_fit_are_written_through_the_api(client: TestClient) -> None:
    for length in (251, 255):
        name = "m" * (length - 5) + ".json"
        response = client.post("/manifest/export", json={"path": name}, headers=AUTH)
        assert response.status_code == 200, response.text
        assert Path(response.json()["path"]).name == name


def test_a_surrogate_pair_written_as_escapes_is_fine(client: TestClient) -> None:
    response = client.post(APPROVE, content=b'{"reviewer": "ann", "note": "ok \\ud83d\\ude00"}', headers=JSON)
    assert response.status_code == 200 and response.json()["note"] == "ok \U0001f600"


@pytest.mark.parametrize("path", ["/campaigns", APPROVE, "/manifest/export", "/session"])
@pytest.mark.parametrize("depth", [65, 1000, 20_000])
def test_deeply_nested_json_is_a_422_with_the_security_headers(client: TestClient, path: str, depth: int) -> None:
    body = b'{"a": ' * depth + b"1" + b"}" * depth
    response = client.post(path, content=body[:60_000] if depth == 20_000 else body, headers=JSON)
    assert response.status_code in {413, 422}, response.text
    if response.status_code == 422:
        assert "nests deeper than 64 levels" in response.json()["detail"][0]["msg"]
    assert response.headers["x-content-type-options"] == "nosniff"
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]


@pytest.mark.parametrize("body", [
    b'{"seed": false}', b'{"seed": "7"}', b'{"seed": 7.0}', b'{"budget_total": true}',
])
def test_export_fields_take_their_own_json_type_only(client: TestClient, body: bytes) -> None:
    response = client.post("/manifest/export", content=body, headers=JSON)
    assert response.status_code == 422, response.text


@pytest.mark.parametrize("body", [
    b'{"reviewer": "ann", "override": "true"}', b'{"reviewer": "ann", "override": 1}', b'{"reviewer": 7}',
])
def test_review_fields_take_their_own_json_type_only(client: TestClient, body: bytes) -> None:
    response = client.post(APPROVE, content=body, headers=JSON)
    assert response.status_code == 422, response.text


def test_campaign_fields_take_their_own_json_type_only(client: TestClient) -> None:
    for body in (b'{"offline": "true"}', b'{"offline": 1}', b'{"categories": "math"}'):
        response = client.post("/campaigns", content=body, headers=JSON)
        assert response.status_code == 422, (body, response.text)


def test_a_corrupted_sqlite_catalog_is_a_503_that_says_so(tmp_path: Path) -> None:
    path = tmp_path / "catalog.sqlite"
    engine = store.make_engine(f"sqlite:///{path}")
    store.upgrade_database(engine)
    seed(engine)
    app = create_app(make_settings(tmp_path), engine=engine, resume_unfinished=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/catalog").status_code == 200
        engine.dispose()
        path.write_bytes(b"this is not an sqlite file" * 1000)  # a damaged disk, or a file overwritten
        for url in ("/catalog", "/catalog/openai/gsm8k", "/campaigns"):
            response = client.get(url)
            assert response.status_code == 503, (url, response.text)
            assert "catalog database is unavailable" in response.json()["detail"]
            assert response.headers["x-content-type-options"] == "nosniff"
    engine.dispose()
