"""`GET /runs` and `GET /runs/{id}` on a small app holding only the runs router."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from core.settings import get_settings
from inference.run_registry import register_run
from inference.status import STATUS_FILE, write_json_atomic
from inference.status_tracker import StatusTracker
from server.api import runs


@pytest.fixture
def client() -> TestClient:
    app = FastAPI()
    app.state.settings = get_settings()
    app.include_router(runs.router)
    return TestClient(app)


def _make_run(folder: Path, done: int) -> None:
    folder.mkdir(parents=True)
    tracker = StatusTracker(total=10, info={"run_id": folder.name})
    for _ in range(done):
        tracker.row_done(100)
    write_json_atomic(folder / STATUS_FILE, tracker.snapshot())


def test_lists_runs_inside_and_outside_the_runs_folder(client: TestClient, tmp_path: Path) -> None:
    _make_run(get_settings().home / "runs" / "inside", done=2)
    outside = tmp_path / "elsewhere" / "outside"
    _make_run(outside, done=5)
    assert register_run(outside) == "outside"
    listed = client.get("/runs")
    assert listed.status_code == 200
    assert {r["id"]: r["rows"]["done"] for r in listed.json()} == {"inside": 2, "outside": 5}
    one = client.get("/runs/outside")
    assert one.status_code == 200
    body = one.json()
    assert body["rows"] == {**body["rows"], "total": 10, "done": 5, "pending": 5}
    assert "eta" in body and "endpoints" in body


def test_unknown_and_traversing_ids_are_404(client: TestClient) -> None:
    assert client.get("/runs").json() == []
    missing = client.get("/runs/nope")
    assert missing.status_code == 404 and "no run 'nope'" in missing.json()["detail"]
    for bad in ("..", "%2e%2e", "a..b", ".hidden"):
        response = client.get(f"/runs/{bad}")
        assert response.status_code == 404, bad
    assert client.get("/runs/..%2F..%2Fetc").status_code == 404


@pytest.mark.parametrize("damage", [b"\xff{", b"[1, 2]", b'{"rows": '])
def test_a_damaged_status_file_is_named_and_hides_no_other_run(client: TestClient, damage: bytes) -> None:
    root = get_settings().home / "runs"
    _make_run(root / "good", done=3)
    (root / "bad").mkdir(parents=True)
    (root / "bad" / STATUS_FILE).write_bytes(damage)
    listed = {r["id"]: r for r in client.get("/runs").json()}
    assert listed["good"]["rows"]["done"] == 3
    assert listed["bad"]["state"] == "unreadable" and "status.json" in listed["bad"]["error"]
    one = client.get("/runs/bad")
    assert one.status_code == 500 and "status.json" in one.json()["detail"]


@pytest.mark.parametrize("damage", [b'{"updated_at": 5}', b'{"rows": 1, "updated_at": ["x"]}', b"[" * 100_000])
def test_a_status_file_of_the_wrong_shape_is_listed_as_unreadable(client: TestClient, damage: bytes) -> None:
    root = get_settings().home / "runs"
    _make_run(root / "good", done=3)
    (root / "bad").mkdir(parents=True)
    (root / "bad" / STATUS_FILE).write_bytes(damage)
    listed = client.get("/runs")
    assert listed.status_code == 200
    runs_by_id = {r["id"]: r for r in listed.json()}
    assert runs_by_id["good"]["rows"]["done"] == 3
    assert runs_by_id["bad"]["state"] == "unreadable" and "status.json" in runs_by_id["bad"]["error"]


def test_a_damaged_link_file_is_listed_as_unreadable(client: TestClient) -> None:
    root = get_settings().home / "runs"
    _make_run(root / "good", done=3)
    (root / "elsewhere.path").write_bytes(b"\xff\xfe not a path")
    listed = client.get("/runs")
    assert listed.status_code == 200
    runs_by_id = {r["id"]: r for r in listed.json()}
    assert runs_by_id["good"]["rows"]["done"] == 3
    assert runs_by_id["elsewhere"]["state"] == "unreadable" and "elsewhere.path" in runs_by_id["elsewhere"]["error"]
    assert client.get("/runs/elsewhere").status_code == 500
