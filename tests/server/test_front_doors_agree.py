"""Both front doors do one operation the same way (`server.usecases`): the same approvals, made and exported
through the CLI in one catalog and through the API in a copy of it, give byte-equal manifests (the creation
time aside), with the mirror's licences adopted at the review in both; and a campaign the API runs adopts them
afterwards as `datahunt campaign run` does.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine
from typer.testing import CliRunner

from core.candidates import Candidate, DatasetMetadata, Deliverable, Evidence
from core.settings import Settings, get_settings
from core.types import Category
from curation.catalog import store
from server.app import create_app
from server.cli import app

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"
APPROVED = ("tatsu-lab/alpaca", "sahil2801/CodeAlpaca-20k")
AUTH = {"Authorization": "Bearer tok"}


def seed(engine: Engine) -> None:
    """Three entries found with no licence stated (as offline searches find them), two of them in the mirror."""
    with store.open_session(engine) as session:
        campaign = store.create_campaign(session, categories=["code_explanation"], offline=True, backends=["offline"])
        run = store.start_run(session, campaign_id=campaign.id, category="code_explanation")
        for hub_id in (*APPROVED, "acme/not-mirrored"):
            candidate = store.add_candidate(session, campaign_id=campaign.id, run_id=run.id,
                                            category="code_explanation",
                                            candidate={"hub_id": hub_id, "categories": ["code_explanation"],
                                                       "relevance": 0.8, "metadata": {"sha": "0123abcd"}})
            store.upsert_entry(session, candidate=candidate, decision="accept", reasons=[
                {"code": "license_unknown", "detail": "license unknown: check the dataset card", "blocking": False}])


@pytest.fixture
def two_catalogs(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    first = tmp_path / "cli" / "catalog.db"
    first.parent.mkdir()
    engine = store.make_engine(f"sqlite:///{first}")
    store.upgrade_database(engine)
    seed(engine)
    engine.dispose()
    second = tmp_path / "api" / "catalog.db"
    second.parent.mkdir()
    shutil.copyfile(first, second)
    yield first, second


def without_time(text: str) -> str:
    return re.sub(r'"created_at": "[^"]+"', '"created_at": "…"', text)


def test_the_same_approvals_exported_by_the_cli_and_the_api_are_byte_equal(
    two_catalogs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
) -> None:
    cli_db, api_db = two_catalogs
    monkeypatch.setenv("DATAHUNT_HOME", str(cli_db.parent))
    monkeypatch.setenv("DATAHUNT_MIRROR", str(MIRROR))
    get_settings.cache_clear()
    runner = CliRunner()
    for hub_id in APPROVED:
        done = runner.invoke(app, ["catalog", "approve", hub_id, "--reviewer", "alice", "--note", "ok"])
        assert done.exit_code == 0, done.output
    done = runner.invoke(app, ["manifest", "export", "--out", "m.json", "--target", "acme/target", "--json"])
    assert done.exit_code == 0, done.output
    cli_file = Path(json.loads(done.stdout)["path"])
    said = runner.invoke(app, ["manifest", "export", "--out", "said.json"])  # eval sets counted as curate counts
    assert "eval sets (kept out of training, decontaminated against): 0 named; curate adds the mirror's " in said.stdout

    settings = Settings(home=api_db.parent, mirror=MIRROR, api_token=SecretStr("tok"))
    engine = store.make_engine(settings.resolved_database_url)
    with TestClient(create_app(settings, engine=engine, resume_unfinished=False)) as client:
        for hub_id in APPROVED:
            answer = client.post(f"/catalog/{hub_id}/approve", json={"reviewer": "alice", "note": "ok"}, headers=AUTH)
            assert answer.status_code == 200, answer.text
            assert answer.json()["license"] == "CC BY-NC 4.0 (DATA_LICENSE)" or hub_id != "tatsu-lab/alpaca"
        exported = client.post("/manifest/export", json={"path": "m.json", "target_model": "acme/target"}, headers=AUTH)
        assert exported.status_code == 200, exported.text
    api_file = Path(exported.json()["path"])
    engine.dispose()

    assert cli_file != api_file
    cli_text, api_text = cli_file.read_text(), api_file.read_text()
    assert without_time(cli_text) == without_time(api_text)
    licenses = {s["hub_id"]: s["license"] for s in json.loads(api_text)["sources"]}
    assert licenses["tatsu-lab/alpaca"] == "CC BY-NC 4.0 (DATA_LICENSE)" and all(licenses.values()), licenses

    # The entries themselves carry the licence in both catalogs, and one story: no `license_unknown` beside it.
    for path in (cli_db, api_db):
        engine = store.make_engine(f"sqlite:///{path}")
        with store.open_session(engine) as session:
            entry = store.get_entry(session, hub_id="tatsu-lab/alpaca")
            actions = [a.action for a in store.entry_history(session, hub_id="tatsu-lab/alpaca")["audit"]]
        engine.dispose()
        assert entry.license == "CC BY-NC 4.0 (DATA_LICENSE)"
        assert [r["code"] for r in entry.reasons] == ["license_non_commercial"], entry.reasons
        assert "mirror index" in entry.reasons[0]["detail"]
        assert actions.count("license_set") == 1 and actions[-1] == "approved", actions


async def fake_subagent(category: Category, *, backends: Any, llm: Any = None, **_: Any) -> Deliverable:
    candidates = [Candidate(hub_id=hub_id, title=hub_id, categories=[category], relevance=0.9, format_guess="alpaca",
                            metadata=DatasetMetadata(num_rows=20_000, features=["instruction", "output"]),
                            evidence=[Evidence(backend="offline", query="code", rank=1, score=2.0)])
                  for hub_id in APPROVED]
    return Deliverable(category=category, candidates=candidates, offline=True)


class Nothing:
    name = "offline"

    async def search(self, query: str, *, limit: int = 20) -> list[Any]:
        return []

    async def lookup(self, hub_id: str) -> DatasetMetadata | None:
        return None


def test_a_campaign_the_api_runs_adopts_the_mirror_licences_afterwards(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", mirror=MIRROR, api_token=SecretStr("tok"), offline=True)
    engine = store.make_engine(settings.resolved_database_url)
    store.upgrade_database(engine)
    app_ = create_app(settings, engine=engine, resume_unfinished=False,
                      campaign_overrides={"subagent": fake_subagent, "backends": [Nothing()]})
    with TestClient(app_) as client:
        started = client.post("/campaigns", json={"categories": ["code_explanation"]}, headers=AUTH)
        assert started.status_code == 202, started.text
        campaign_id = started.json()["id"]
        deadline = time.monotonic() + 60
        while client.get(f"/campaigns/{campaign_id}").json()["active"] or \
                client.get(f"/campaigns/{campaign_id}").json()["status"] in ("pending", "running"):
            assert time.monotonic() < deadline, "the campaign did not finish"
            asyncio.run(asyncio.sleep(0.05))
        shown = client.get("/catalog/tatsu-lab/alpaca").json()["entry"]
    engine.dispose()
    assert shown["license"] == "CC BY-NC 4.0 (DATA_LICENSE)"
    assert "license_unknown" not in [r["code"] for r in shown["reasons"]]
