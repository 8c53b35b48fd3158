"""Catalog routes on SQLite and PostgreSQL: filters, detail with evidence and preview, reviews, auth, bad input."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine
from sqlmodel import select

from core.settings import Settings
from curation.catalog import store
from curation.catalog.models import AuditEvent
from server.app import create_app
from server.commands.serve import BackgroundServer

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

# (hub_id, category, relevance, license, rows, decision, reasons)
ENTRIES = [
    ("openai/gsm8k", "math", 0.9, "mit", 7473, "accept", []),
    ("bigcode/commitpackft", "commit_messages", 0.8, "mit", 700000, "accept", []),
    ("acme/restricted-reviews", "code_review", 0.7, "other", 5000, "reject",
     [{"code": "license_restricted", "detail": "license 'other' forbids derivatives", "blocking": True}]),
    ("acme/tiny-chat", "general_chat", 0.3, None, None, "accept",
     [{"code": "license_unknown", "detail": "no license stated", "blocking": False}]),
]


def seed(engine: Engine) -> str:
    """Fill the catalog through the store as a campaign would: runs, candidates with evidence, verdicts, entries."""
    with store.open_session(engine) as session:
        campaign = store.create_campaign(session, categories=sorted({e[1] for e in ENTRIES}), offline=True,
                                         backends=["offline"])
        runs = {cat: store.start_run(session, campaign_id=campaign.id, category=cat).id for cat in campaign.categories}
        for hub_id, category, relevance, license_, rows, decision, reasons in ENTRIES:
            candidate = store.add_candidate(session, campaign_id=campaign.id, run_id=runs[category], category=category,
                                            candidate={
                "hub_id": hub_id, "title": f"{hub_id} title", "description": f"about {category}",
                "categories": [category], "relevance": relevance, "format_guess": "qa",
                "metadata": {"license": license_, "num_rows": rows, "sha": "abc123"},
                "evidence": [{"backend": "offline", "query": f"{category} dataset", "rank": 1, "score": 3.5}],
            })
            store.add_verdict(session, campaign_id=campaign.id, decision=decision, reasons=reasons,
                              candidate_id=candidate.id)
            store.upsert_entry(session, candidate=candidate, decision=decision, reasons=reasons)
        for run_id in runs.values():
            store.finish_run(session, run_id=run_id, status="succeeded", planner="deterministic", queries=[],
                             results_per_backend={"offline": 1}, candidates_found=1, candidates_accepted=1,
                             error=None, reasons=[])
        return campaign.id


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = store.make_engine(database_url)
    store.upgrade_database(engine)
    seed(engine)
    yield engine
    engine.dispose()


def make_settings(tmp_path: Path, **changes: object) -> Settings:
    base = {"home": tmp_path / "home", "offline": True, "api_token": SecretStr(TOKEN)}
    return Settings(**{**base, **changes})


@pytest.fixture
def client(engine: Engine, tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(make_settings(tmp_path), engine=engine, resume_unfinished=False)
    with TestClient(app) as client:
        yield client


def test_list_filters_and_pages(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/catalog", "/catalog/{owner}/{name}", "/campaigns", "/manifest/export", "/runs"} <= set(paths)
    everything = client.get("/catalog").json()
    assert everything["total"] == 4
    assert [e["hub_id"] for e in everything["items"]][0] == "openai/gsm8k"  # best relevance first
    assert client.get("/catalog", params={"category": "math"}).json()["total"] == 1
    assert [e["hub_id"] for e in client.get("/catalog", params={"license": "MIT"}).json()["items"]] == [
        "openai/gsm8k", "bigcode/commitpackft"]
    assert client.get("/catalog", params={"q": "commitpack"}).json()["items"][0]["hub_id"] == "bigcode/commitpackft"
    page = client.get("/catalog", params={"limit": 2, "offset": 2}).json()
    assert page["total"] == 4 and len(page["items"]) == 2 and page["offset"] == 2
    assert client.get("/catalog", params={"status": "approved"}).json()["total"] == 0
    assert client.get("/catalog", params={"status": "maybe"}).status_code == 422
    assert client.get("/catalog", params={"category": "cooking"}).status_code == 422


def test_detail_has_evidence_history_and_preview(client: TestClient) -> None:
    detail = client.get("/catalog/acme/restricted-reviews").json()
    assert detail["entry"]["verifier_decision"] == "reject"
    assert detail["candidates"][0]["evidence"][0]["query"] == "code_review dataset"
    assert detail["verdicts"][0]["reasons"][0]["code"] == "license_restricted"
    assert detail["audit"][0]["action"] == "created"
    assert detail["preview"]["available"] is False and "offline" in detail["preview"]["message"]


def test_preview_from_a_local_mirror(engine: Engine, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    (mirror / "openai" / "gsm8k").mkdir(parents=True)
    rows = [{"question": f"q{i}", "answer": f"a{i}"} for i in range(9)]
    (mirror / "openai" / "gsm8k" / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (mirror / "MIRROR.json").write_text(json.dumps([{"id": "openai/gsm8k", "config": "main",
                                                     "files": ["openai/gsm8k/train.jsonl"]}]))
    app = create_app(make_settings(tmp_path, mirror=mirror), engine=engine, resume_unfinished=False)
    with TestClient(app) as client:
        preview = client.get("/catalog/openai/gsm8k").json()["preview"]
    assert preview["available"] is True and preview["config"] == "main"
    assert preview["rows"][:2] == rows[:2] and len(preview["rows"]) == 5


def test_approve_reject_are_audited_and_idempotent(client: TestClient, engine: Engine) -> None:
    body = {"reviewer": "alice", "note": "clean math"}
    first = client.post("/catalog/openai/gsm8k/approve", json=body, headers=AUTH)
    again = client.post("/catalog/openai/gsm8k/approve", json=body, headers=AUTH)
    assert first.status_code == again.status_code == 200
    assert first.json()["status"] == again.json()["status"] == "approved"
    assert again.json()["version"] == first.json()["version"]  # the repeat changed nothing
    rejected = client.post("/catalog/openai/gsm8k/reject", json={"reviewer": "bob", "note": "dupe"}, headers=AUTH)
    assert rejected.json()["status"] == "rejected" and rejected.json()["reviewer"] == "bob"
    audit = client.get("/catalog/openai/gsm8k").json()["audit"]
    assert [(a["action"], a["actor"]) for a in audit] == [
        ("created", "system"), ("approved", "alice"), ("approved", "alice"), ("rejected", "bob")]


def test_verifier_rejected_needs_override(client: TestClient) -> None:
    refused = client.post("/catalog/acme/restricted-reviews/approve", json={"reviewer": "alice"}, headers=AUTH)
    assert refused.status_code == 409
    assert "override" in refused.json()["detail"] and "license_restricted" in refused.json()["detail"]
    assert client.get("/catalog/acme/restricted-reviews").json()["entry"]["status"] == "pending_review"
    forced = client.post("/catalog/acme/restricted-reviews/approve",
                         json={"reviewer": "alice", "note": "licence cleared with legal", "override": True},
                         headers=AUTH)
    assert forced.status_code == 200 and forced.json()["status"] == "approved"


def test_mutations_need_the_token(engine: Engine, tmp_path: Path, client: TestClient) -> None:
    body = {"reviewer": "alice"}
    assert client.post("/catalog/openai/gsm8k/approve", json=body).status_code == 401
    wrong = client.post("/catalog/openai/gsm8k/approve", json=body, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["detail"] == "wrong token"
    assert client.get("/catalog").status_code == 200  # reads are open by default
    unset = create_app(make_settings(tmp_path, api_token=None), engine=engine, resume_unfinished=False)
    with TestClient(unset) as other:
        refused = other.post("/catalog/openai/gsm8k/approve", json=body, headers=AUTH)
        assert refused.status_code == 403 and "DATAHUNT_API_TOKEN" in refused.json()["detail"]
        assert other.post("/manifest/export", json={}, headers=AUTH).status_code == 403
    closed = create_app(make_settings(tmp_path, api_read_requires_token=True), engine=engine, resume_unfinished=False)
    with TestClient(closed) as other:
        assert other.get("/catalog").status_code == 401
        assert other.get("/catalog", headers=AUTH).status_code == 200


def test_bad_input_gets_a_message(client: TestClient) -> None:
    malformed = client.post("/catalog/not--valid/x/approve", json={"reviewer": "a"}, headers=AUTH)
    assert malformed.status_code == 422 and "malformed Hub dataset id" in malformed.json()["detail"]
    assert client.get("/catalog/owner/na..me").status_code == 422
    missing = client.get("/catalog/nobody/nothing")
    assert missing.status_code == 404 and "nobody/nothing" in missing.json()["detail"]
    bad_json = client.post("/catalog/openai/gsm8k/approve", content=b"{reviewer:", headers={
        **AUTH, "Content-Type": "application/json"})
    assert bad_json.status_code == 422 and bad_json.json()["detail"][0]["type"] == "json_invalid"
    assert client.post("/catalog/openai/gsm8k/approve", json={"reviewer": "  "}, headers=AUTH).status_code == 422
    typo = client.post("/catalog/openai/gsm8k/approve", json={"reviewer": "a", "overide": True}, headers=AUTH)
    assert typo.status_code == 422 and "overide" in json.dumps(typo.json())
    huge = client.post("/catalog/openai/gsm8k/approve", content=b"x" * 70_000, headers={
        **AUTH, "Content-Type": "application/json"})
    assert huge.status_code == 413 and "too large" in huge.json()["detail"]
    chunked = client.post("/catalog/openai/gsm8k/approve", content=iter([b"x" * 40_000] * 2), headers={
        **AUTH, "Content-Type": "application/json"})
    assert chunked.status_code == 413
    assert client.get("/catalog/openai/gsm8k").json()["entry"]["status"] == "pending_review"


def test_concurrent_approvals_leave_one_audit_row_each(engine: Engine, tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path), engine=engine, resume_unfinished=False)
    statuses: list[int] = []
    with BackgroundServer(app) as server:
        barrier = threading.Barrier(8)

        def approve(i: int) -> None:
            with httpx.Client(base_url=server.url, timeout=30) as http:
                barrier.wait()
                response = http.post("/catalog/openai/gsm8k/approve", json={"reviewer": f"r{i}"}, headers=AUTH)
                statuses.append(response.status_code)

        threads = [threading.Thread(target=approve, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert statuses == [200] * 8
    with store.open_session(engine) as session:
        entry = store.get_entry(session, hub_id="openai/gsm8k")
        rows = session.exec(select(AuditEvent).where(AuditEvent.entity_id == "openai/gsm8k",
                                                     AuditEvent.action == "approved")).all()
    assert len(rows) == 8
    assert sum(bool(r.detail.get("changed")) for r in rows) == 1  # exactly one call moved the state
    assert entry.status == "approved" and entry.reviewer in {f"r{i}" for i in range(8)}
    assert entry.version == 2  # created at 1, one real change


def test_review_page_renders_filters_groups_and_override(client: TestClient) -> None:
    page = client.get("/", params={"category": "math", "status": "", "license": "", "q": ""})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'data-hub-id="openai/gsm8k"' in page.text and "bigcode/commitpackft" not in page.text
    everything = client.get("/").text
    for group in ("math", "commit_messages", "code_review", "general_chat"):
        assert f'<h3 class="group">{group} ' in everything
    assert everything.count('class="override-box"') == 1  # only the verifier-rejected entry asks for override
    assert "license_restricted" in everything and "7,473 rows" in everything
    assert client.get("/static/review.js").status_code == 200


def _gzip_truncated() -> bytes:
    import gzip

    return gzip.compress(b'{"question": "q"}\n' * 500)[:40]


@pytest.mark.parametrize("index", [
    b"[" * 100_000,
    json.dumps([{"id": "openai/gsm8k", "files": 5}]).encode(),
    json.dumps([{"id": "openai/gsm8k", "files": {"a": 1}}]).encode(),
    json.dumps([{"id": ["openai/gsm8k"], "files": []},
                {"id": "openai/gsm8k", "files": [["x"], "a\x00b.jsonl"]}]).encode(),
])
def test_a_hostile_mirror_index_gives_no_preview_and_no_error(engine: Engine, tmp_path: Path, index: bytes) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "MIRROR.json").write_bytes(index)
    app = create_app(make_settings(tmp_path, mirror=mirror), engine=engine, resume_unfinished=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        seed(engine)
        detail = client.get("/catalog/openai/gsm8k")
        assert detail.status_code == 200, detail.text
        assert detail.json()["preview"]["available"] is False
        assert client.get("/datasets/openai/gsm8k").status_code == 200
        assert client.get("/").status_code == 200


def test_hostile_mirror_files_are_skipped_for_the_next_readable_one(engine: Engine, tmp_path: Path) -> None:
    folder = tmp_path / "mirror" / "openai" / "gsm8k"
    folder.mkdir(parents=True)
    bad = {
        "deep.json": b"[" * 100_000 + b"]" * 100_000,
        "deep.jsonl": b'{"a": ' * 5_000 + b"1" + b"}" * 5_000 + b"\n",
        "cut.jsonl.gz": _gzip_truncated(),
        "garbage.jsonl.gz": b"\x1f\x8b\x08\x00" + b"\x00" * 6 + b"not deflate data at all",
    }
    for name, data in bad.items():
        (folder / name).write_bytes(data)
    (folder / "good.jsonl").write_text(json.dumps({"question": "q1", "answer": "a1"}) + "\n")
    files = [f"openai/gsm8k/{name}" for name in [*bad, "good.jsonl"]]
    (tmp_path / "mirror" / "MIRROR.json").write_text(json.dumps([{"id": "openai/gsm8k", "files": files}]))
    app = create_app(make_settings(tmp_path, mirror=tmp_path / "mirror"), engine=engine, resume_unfinished=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        seed(engine)
        detail = client.get("/catalog/openai/gsm8k")
        assert detail.status_code == 200, detail.text
        preview = detail.json()["preview"]
        assert preview["available"] is True and preview["source"] == "mirror:openai/gsm8k/good.jsonl"
        assert client.get("/datasets/openai/gsm8k").status_code == 200
