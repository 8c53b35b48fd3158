"""The service's last tracebacks and bare 500s (issue #44, item 6), each through the real app: a full data disk
and a link loop on `POST /manifest/export`, a status file nested hundreds of levels on `GET /runs`, a mirror
file that is a link to itself on the preview, and the security headers on an error nobody expected."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from core.settings import Settings
from curation.catalog import store
from server.api.preview import mirrored_ids, sample_preview
from server.app import create_app

AUTH = {"Authorization": "Bearer tok"}
HEADERS = ("x-content-type-options", "x-frame-options", "referrer-policy", "content-security-policy")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home", api_token=SecretStr("tok"))


@pytest.fixture
def client(settings: Settings, tmp_path: Path) -> Iterator[TestClient]:
    engine = store.make_engine(f"sqlite:///{tmp_path / 'catalog.db'}")
    store.upgrade_database(engine)
    app = create_app(settings, engine=engine, resume_unfinished=False)

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("a bug nobody expected")

    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client
    engine.dispose()


def _has_headers(response: object) -> bool:
    return all(name in response.headers for name in HEADERS)  # type: ignore[attr-defined]


def test_an_unexpected_500_carries_the_security_headers(client: TestClient) -> None:
    response = client.get("/boom")
    assert response.status_code == 500 and _has_headers(response)


def test_a_full_data_disk_on_export_is_a_507_and_leaves_no_file(client: TestClient, settings: Settings,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    response = client.post("/manifest/export", json={"path": "m.json"}, headers=AUTH)
    assert response.status_code == 507 and "No space left on device" in response.json()["detail"]
    assert _has_headers(response)
    assert [p.name for p in settings.resolved_data_dir.iterdir()] == []


@pytest.mark.parametrize("path", ["loop.json", "folder/m.json"])
def test_a_link_loop_on_export_is_a_409(client: TestClient, settings: Settings, path: str) -> None:
    data = settings.resolved_data_dir
    data.mkdir(parents=True, exist_ok=True)
    (data / "loop.json").symlink_to("loop.json")
    (data / "folder").symlink_to("folder")
    response = client.post("/manifest/export", json={"path": path}, headers=AUTH)
    assert response.status_code == 409 and "cannot be resolved" in response.json()["detail"], response.text


@pytest.mark.parametrize("levels", [256, 600, 990])
def test_a_status_file_nested_hundreds_of_levels_is_listed_as_unreadable(client: TestClient, settings: Settings,
                                                                          levels: int) -> None:
    run = settings.home / "runs" / "deep"
    run.mkdir(parents=True)
    (run / "status.json").write_text('{"rows": ' + "[" * levels + "]" * levels + "}")
    listed = client.get("/runs", headers=AUTH)
    assert listed.status_code == 200, listed.text
    assert listed.json()[0]["state"] == "unreadable" and "nests too deep" in listed.json()[0]["error"]
    one = client.get("/runs/deep", headers=AUTH)  # named as damaged, the service's way for its own files
    assert "nests too deep" in one.json()["detail"] and _has_headers(one)


def test_a_mirror_file_linked_to_itself_gives_no_preview_and_no_error(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "self.jsonl").symlink_to("self.jsonl")
    (mirror / "MIRROR.json").write_text(json.dumps([{"id": "org/set", "files": ["self.jsonl"]}]))
    preview = sample_preview("org/set", mirror)
    assert preview["available"] is False and preview["rows"] == []
    looped = tmp_path / "looped"
    looped.symlink_to("looped")
    assert sample_preview("org/set", looped)["available"] is False and mirrored_ids(looped) == set()
