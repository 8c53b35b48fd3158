"""Bulk review and the live counts on SQLite and PostgreSQL: one call decides many entries, all or none, one audit
row each, with the validation of a single review; `GET /catalog/counts` says where the catalog stands."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlmodel import select
from test_api_catalog import AUTH, make_settings, seed  # pytest puts this test folder on the path

from curation.catalog import store
from curation.catalog.models import AuditEvent
from server.app import create_app
from server.commands.serve import BackgroundServer

REVIEWS = ("approved", "rejected")


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = store.make_engine(database_url)
    store.upgrade_database(engine)
    seed(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def client(engine: Engine, tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(make_settings(tmp_path), engine=engine, resume_unfinished=False)
    with TestClient(app) as client:
        yield client


def review_rows(engine: Engine) -> list[tuple[str, str, str | None]]:
    with store.open_session(engine) as session:
        rows = session.exec(select(AuditEvent).where(AuditEvent.entity == "entry",
                                                     AuditEvent.action.in_(REVIEWS))  # type: ignore[attr-defined]
                            .order_by(AuditEvent.id)).all()  # type: ignore[arg-type]
        return [(r.entity_id, r.action, r.actor) for r in rows]


def test_counts_say_where_the_catalog_stands(client: TestClient) -> None:
    counts = client.get("/catalog/counts").json()
    assert counts == {"total": 4, "by_status": {"pending_review": 4, "approved": 0, "rejected": 0}}
    client.post("/catalog/openai/gsm8k/reject", json={"reviewer": "ana"}, headers=AUTH)
    assert client.get("/catalog/counts").json()["by_status"] == {"pending_review": 3, "approved": 0, "rejected": 1}


def test_bulk_approve_decides_each_entry_with_one_audit_row(client: TestClient, engine: Engine) -> None:
    ids = ["openai/gsm8k", "bigcode/commitpackft", "openai/gsm8k"]  # a repeated id counts once
    answer = client.post("/catalog/approve", json={"hub_ids": ids, "reviewer": "alice", "note": "clean"}, headers=AUTH)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [(e["hub_id"], e["status"], e["reviewer"], e["note"]) for e in body["entries"]] == [
        ("bigcode/commitpackft", "approved", "alice", "clean"), ("openai/gsm8k", "approved", "alice", "clean")]
    assert body["counts"] == {"total": 4, "by_status": {"pending_review": 2, "approved": 2, "rejected": 0}}
    assert body["counts"] == client.get("/catalog/counts").json()
    assert review_rows(engine) == [("bigcode/commitpackft", "approved", "alice"), ("openai/gsm8k", "approved", "alice")]
    rejected = client.post("/catalog/reject", json={"hub_ids": ["openai/gsm8k", "acme/tiny-chat"], "reviewer": "bob"},
                           headers=AUTH).json()
    assert [(e["hub_id"], e["status"]) for e in rejected["entries"]] == [
        ("acme/tiny-chat", "rejected"), ("openai/gsm8k", "rejected")]
    assert rejected["counts"]["by_status"] == {"pending_review": 1, "approved": 1, "rejected": 2}
    assert len(review_rows(engine)) == 4


def test_bulk_is_all_or_none_with_the_single_review_rules(client: TestClient, engine: Engine) -> None:
    mixed = ["openai/gsm8k", "acme/restricted-reviews"]  # the verifier rejected the second
    refused = client.post("/catalog/approve", json={"hub_ids": mixed, "reviewer": "alice"}, headers=AUTH)
    assert refused.status_code == 409
    assert "acme/restricted-reviews" in refused.json()["detail"] and "override" in refused.json()["detail"]
    unknown = client.post("/catalog/approve", json={"hub_ids": ["openai/gsm8k", "nobody/nothing"], "reviewer": "a"},
                          headers=AUTH)
    assert unknown.status_code == 404 and "'nobody/nothing'" in unknown.json()["detail"]
    assert client.get("/catalog/counts").json()["by_status"]["pending_review"] == 4  # nothing changed
    assert review_rows(engine) == []
    forced = client.post("/catalog/approve", json={"hub_ids": mixed, "reviewer": "alice", "override": True},
                         headers=AUTH)
    assert forced.status_code == 200 and {e["status"] for e in forced.json()["entries"]} == {"approved"}
    # Rejecting needs no override, as for one entry.
    assert client.post("/catalog/reject", json={"hub_ids": mixed, "reviewer": "b"}, headers=AUTH).status_code == 200


def test_bulk_input_is_checked_like_a_single_review(client: TestClient) -> None:
    def post(body: object, headers: dict[str, str] = AUTH) -> httpx.Response:
        return client.post("/catalog/approve", json=body, headers=headers)

    assert post({"hub_ids": ["openai/gsm8k"], "reviewer": "a"}, headers={}).status_code == 401
    malformed = post({"hub_ids": ["openai/gsm8k", "not--valid/x"], "reviewer": "a"})
    assert malformed.status_code == 422 and "malformed Hub dataset id 'not--valid/x'" in malformed.json()["detail"]
    assert post({"hub_ids": [" openai/gsm8k"], "reviewer": "a"}).status_code == 422
    assert post({"hub_ids": [], "reviewer": "a"}).status_code == 422
    assert post({"hub_ids": ["openai/gsm8k"] * 501, "reviewer": "a"}).status_code == 422
    assert post({"hub_ids": ["openai/gsm8k"], "reviewer": "  "}).status_code == 422
    assert post({"hub_ids": ["openai/gsm8k"], "reviewer": "a", "overide": True}).status_code == 422
    assert client.get("/catalog/counts").json()["by_status"]["pending_review"] == 4


def test_concurrent_bulk_reviews_in_opposite_orders_both_finish(engine: Engine, tmp_path: Path) -> None:
    """Each bulk review locks its rows in Hub-id order, whatever order the request gave: two reviews of the same
    entries listed in opposite orders queue instead of deadlocking, and every call leaves its audit rows."""
    ids = ["openai/gsm8k", "bigcode/commitpackft", "acme/tiny-chat"]
    app = create_app(make_settings(tmp_path), engine=engine, resume_unfinished=False)
    statuses: list[int] = []
    with BackgroundServer(app) as server:
        barrier = threading.Barrier(6)

        def review(i: int) -> None:
            order = ids if i % 2 else ids[::-1]
            with httpx.Client(base_url=server.url, timeout=60) as http:
                barrier.wait()
                path = "/catalog/approve" if i % 3 else "/catalog/reject"
                statuses.append(http.post(path, json={"hub_ids": order, "reviewer": f"r{i}"}, headers=AUTH).status_code)

        threads = [threading.Thread(target=review, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert statuses == [200] * 6
    rows = review_rows(engine)
    assert len(rows) == 18 and {r[0] for r in rows} == set(ids)
