"""Campaign routes: 202 launch, per-subagent status, SSE progress, re-run of one failed category, restart resume."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine
from sqlalchemy.pool import QueuePool

from core.candidates import Candidate, DatasetMetadata, Deliverable, Evidence, QueryRecord
from core.settings import Settings
from core.types import Category
from curation.catalog import store
from graph import campaign as campaign_graph
from server.app import create_app

TOKEN = "campaign-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FINAL = {"succeeded", "partial", "failed", "interrupted"}


class FakeSubagent:
    """Delivers two candidates per category at once; categories in `failing` raise, as a broken subagent would."""

    def __init__(self, failing: set[str] | None = None) -> None:
        self.failing = set(failing or ())
        self.calls: list[str] = []

    async def __call__(self, category: Category, *, backends: Any, llm: Any = None, **_: Any) -> Deliverable:
        self.calls.append(category.value)
        if category.value in self.failing:
            raise RuntimeError(f"{category.value} backend exploded")
        candidates = [
            Candidate(
                hub_id=f"fake-org/{category.value.replace('_', '-')}-{n}", title=f"{category.value} set {n}",
                description=f"{category.value} conversations", categories=[category],
                metadata=DatasetMetadata(license="apache-2.0", num_rows=50_000, features=["prompt", "response"]),
                evidence=[Evidence(backend="offline", query=f"{category.value} data", rank=n, score=2.0)],
                relevance=0.9 - 0.1 * n, format_guess="prompt_completion",
            )
            for n in (1, 2)
        ]
        queries = [QueryRecord(backend="offline", query=f"{category.value} data", status="ok", hits=2)]
        return Deliverable(category=category, candidates=candidates, queries=queries, offline=True,
                           notes=[f"{category.value}: searched the offline index only"])


class FakeBackend:
    """Knows every fake-org dataset (the verifier's existence check)."""

    name = "offline"

    async def search(self, query: str, *, limit: int = 20) -> list[Any]:
        return []

    async def lookup(self, hub_id: str) -> DatasetMetadata | None:
        return DatasetMetadata(license="apache-2.0", num_rows=50_000) if hub_id.startswith("fake-org/") else None


def make_app(engine: Engine, tmp_path: Path, subagent: FakeSubagent, **kwargs: Any) -> Any:
    settings = Settings(home=tmp_path / "home", offline=True, api_token=SecretStr(TOKEN))
    return create_app(settings, engine=engine, campaign_overrides={"subagent": subagent, "backends": [FakeBackend()]},
                      event_poll_s=0.1, **kwargs)



def wait_final(client: TestClient, campaign_id: str, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = client.get(f"/campaigns/{campaign_id}").json()
        if body["status"] in FINAL and not body["active"]:
            return body
        time.sleep(0.05)
    raise AssertionError(f"campaign {campaign_id} did not finish: {body}")


def events_of(client: TestClient, campaign_id: str) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    with client.stream("GET", f"/campaigns/{campaign_id}/events") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        kind = ""
        for line in stream.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((kind, json.loads(line.removeprefix("data: "))))
    return events


def test_launch_stream_and_rerun_one_failed_category(engine: Engine, tmp_path: Path) -> None:
    subagent = FakeSubagent(failing={"tool_use"})
    with TestClient(make_app(engine, tmp_path, subagent)) as client:
        started = client.post("/campaigns", json={"categories": ["math", "tool_use", "reasoning"]}, headers=AUTH)
        assert started.status_code == 202
        campaign_id = started.json()["id"]
        assert started.json()["status"] in {"pending", "running"}

        events = events_of(client, campaign_id)
        kinds = [k for k, _ in events]
        assert kinds[0] == "snapshot" and kinds[-1] == "end"
        finished = {e["category"]: e["status"] for k, e in events if k == "run_finished"}
        assert finished == {"math": "succeeded", "reasoning": "succeeded", "tool_use": "failed"}

        body = wait_final(client, campaign_id)
        assert body["status"] == "partial"
        assert body["counts"] == {"succeeded": 2, "failed": 1}
        runs = {r["category"]: r for r in body["runs"]}
        assert "exploded" in runs["tool_use"]["error"]
        before = {c: (r["id"], r["attempt"]) for c, r in runs.items() if c != "tool_use"}
        assert client.get("/campaigns").json()[0]["id"] == campaign_id

        subagent.failing.clear()  # the backend is fixed: re-run only that category
        rerun = client.post(f"/campaigns/{campaign_id}/subagents/tool_use/rerun", headers=AUTH)
        assert rerun.status_code == 202 and rerun.json()["category"] == "tool_use"
        body = wait_final(client, campaign_id)
        runs = {r["category"]: r for r in body["runs"]}
        assert runs["tool_use"]["status"] == "succeeded" and runs["tool_use"]["attempt"] == 2
        assert runs["tool_use"]["notes"] == ["tool_use: searched the offline index only"]
        assert {c: (r["id"], r["attempt"]) for c, r in runs.items() if c != "tool_use"} == before
        assert subagent.calls.count("math") == 1 and subagent.calls.count("tool_use") == 2
        assert client.get("/catalog", params={"category": "tool_use"}).json()["total"] == 2


def test_unknown_campaign_is_404_and_unknown_category_422(engine: Engine, tmp_path: Path) -> None:
    with TestClient(make_app(engine, tmp_path, FakeSubagent())) as client:
        assert client.get("/campaigns/nope").status_code == 404
        assert client.get("/campaigns/nope/events").status_code == 404
        assert client.post("/campaigns/nope/subagents/math/rerun", headers=AUTH).status_code == 404
        campaign_id = client.post("/campaigns", json={"categories": ["math"]}, headers=AUTH).json()["id"]
        wait_final(client, campaign_id)
        unknown = client.post(f"/campaigns/{campaign_id}/subagents/cooking/rerun", headers=AUTH)
        assert unknown.status_code == 422 and "unknown category 'cooking'" in unknown.json()["detail"]
        close = client.post(f"/campaigns/{campaign_id}/subagents/maths/rerun", headers=AUTH)
        assert close.status_code == 422 and "(did you mean `math`?)" in close.json()["detail"]
        absent = client.post(f"/campaigns/{campaign_id}/subagents/reasoning/rerun", headers=AUTH)
        assert absent.status_code == 404 and "has no category 'reasoning'" in absent.json()["detail"]
        bad = client.post("/campaigns", json={"categories": ["cooking"]}, headers=AUTH)
        assert bad.status_code == 422
        near = client.post("/campaigns", json={"categories": ["maths"]}, headers=AUTH).json()["detail"][0]
        assert near["msg"].endswith("(did you mean `math`?)") and near["loc"] == ["body", "categories", 0]
        query = client.get("/catalog", params={"category": "tool-uses"}).json()["detail"][0]
        assert query["msg"].endswith("(did you mean `tool_use`?)")
        assert client.post("/campaigns", json={"categorie": ["math"]}, headers=AUTH).status_code == 422
        empty = client.post("/campaigns", json={"categories": []}, headers=AUTH)  # not "all ten" by accident
        assert empty.status_code == 422 and empty.json()["detail"][0]["loc"] == ["body", "categories"]
        for loose in ("yes", 1, "true"):
            assert client.post("/campaigns", json={"categories": ["math"], "offline": loose},
                               headers=AUTH).status_code == 422, loose
        assert client.post("/campaigns", json={}).status_code == 401


def test_restart_resumes_an_unfinished_campaign(engine: Engine, tmp_path: Path) -> None:
    # A previous server created the campaign and died before running it: the row says running, no checkpoint.
    with store.open_session(engine) as session:
        campaign = store.create_campaign(session, categories=["math", "reasoning"], offline=True, backends=["offline"])
        store.set_campaign_status(session, campaign_id=campaign.id, status="running")
    subagent = FakeSubagent()
    with TestClient(make_app(engine, tmp_path, subagent)) as client:
        body = wait_final(client, campaign.id)
    assert body["status"] == "succeeded"
    assert sorted(subagent.calls) == ["math", "reasoning"]
    with TestClient(make_app(engine, tmp_path, FakeSubagent(), resume_unfinished=True)) as client:
        assert client.get(f"/campaigns/{campaign.id}").json()["status"] == "succeeded"  # nothing left to resume


def test_a_campaign_that_cannot_resume_is_marked_interrupted(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with store.open_session(engine) as session:
        campaign = store.create_campaign(session, categories=["math"], offline=True, backends=["offline"])
        store.set_campaign_status(session, campaign_id=campaign.id, status="running")

    async def unreadable_checkpoint(**_: Any) -> str:
        raise RuntimeError("checkpoint unreadable")

    monkeypatch.setattr(campaign_graph, "resume_campaign", unreadable_checkpoint)
    subagent = FakeSubagent()
    with TestClient(make_app(engine, tmp_path, subagent)) as client:
        body = wait_final(client, campaign.id)
        assert body["status"] == "interrupted" and "checkpoint unreadable" in body["error"]
        monkeypatch.undo()  # the fault is gone: the category re-runs on request
        assert client.post(f"/campaigns/{campaign.id}/subagents/math/rerun", headers=AUTH).status_code == 202
        body = wait_final(client, campaign.id)
    assert {r["category"]: r["status"] for r in body["runs"]} == {"math": "succeeded"}
    assert subagent.calls == ["math"]


def test_a_rerun_posted_as_soon_as_the_status_reads_succeeded_is_accepted(engine: Engine, tmp_path: Path) -> None:
    # A client (or the review page's Re-run button) acts on the status it reads: once it says succeeded, the
    # campaign's lease and this server's task are no reason to refuse, however soon the re-run follows.
    with TestClient(make_app(engine, tmp_path, FakeSubagent())) as client:
        campaign_id = client.post("/campaigns", json={"categories": ["math"]}, headers=AUTH).json()["id"]
        for attempt in range(1, 21):
            deadline = time.monotonic() + 60
            while True:
                body = client.get(f"/campaigns/{campaign_id}").json()
                run = body["runs"][0] if body["runs"] else {}
                if body["status"] == "succeeded" and run.get("attempt") == attempt:
                    break
                assert time.monotonic() < deadline, body
                time.sleep(0.01)
            rerun = client.post(f"/campaigns/{campaign_id}/subagents/math/rerun", headers=AUTH)
            assert rerun.status_code == 202, (attempt, rerun.json())
        wait_final(client, campaign_id)


class CatalogReadingSubagent(FakeSubagent):
    """Reads the catalog first, slowly, in the graph's thread pool (as its blocking catalog calls run there)."""

    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self.engine = engine
        self.reading = threading.Event()
        self.read = threading.Event()

    async def __call__(self, category: Category, *, backends: Any, llm: Any = None, **kw: Any) -> Deliverable:
        await asyncio.to_thread(self._read)
        return await super().__call__(category, backends=backends, llm=llm, **kw)

    def _read(self) -> None:
        with store.open_session(self.engine, readonly=True) as session:
            self.reading.set()
            time.sleep(1.0)
            store.list_campaigns(session, limit=1)
        self.read.set()


def test_shutdown_returns_once_a_cancelled_campaigns_catalog_calls_are_done(engine: Engine, tmp_path: Path) -> None:
    # Shutdown cancels a running campaign; a blocking catalog call of its graph goes on in the thread pool with a
    # pooled connection. Were shutdown to return before it ends, the engine disposed then would lose that
    # connection to the garbage collector, unclosed.
    subagent = CatalogReadingSubagent(engine)
    with TestClient(make_app(engine, tmp_path, subagent)) as client:
        assert client.post("/campaigns", json={"categories": ["math"]}, headers=AUTH).status_code == 202
        assert subagent.reading.wait(timeout=30)
    assert subagent.read.is_set()
    pool = engine.pool
    assert isinstance(pool, QueuePool) and pool.checkedout() == 0


def test_shutdown_waits_for_a_blocking_catalog_call_of_a_cancelled_campaign(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A campaign is a task on the server's loop; its graph's catalog calls run in worker threads through the
    # manager's port. Shutdown cancels the task mid-call: it returns only once that call is done, before the
    # loop (and its executor) ends, so the engine disposed next loses no pooled connection.
    from server.api.campaign_tasks import CampaignManager

    real_start_run = store.start_run
    calling, called = threading.Event(), threading.Event()

    def slow_start_run(session: Any, **kwargs: Any) -> Any:
        calling.set()
        time.sleep(1.0)
        try:
            return real_start_run(session, **kwargs)
        finally:
            called.set()

    monkeypatch.setattr(store, "start_run", slow_start_run)
    settings = Settings(home=tmp_path / "home", offline=True, api_token=SecretStr(TOKEN))

    async def scenario() -> None:
        manager = CampaignManager(engine, settings, overrides={"subagent": FakeSubagent(), "backends": [FakeBackend()]})
        await manager.launch(categories=[Category.MATH], offline=True)
        assert await asyncio.to_thread(calling.wait, 30)
        await manager.shutdown()
        assert called.is_set()
        pool = engine.pool
        assert not isinstance(pool, QueuePool) or pool.checkedout() == 0

    asyncio.run(scenario())
