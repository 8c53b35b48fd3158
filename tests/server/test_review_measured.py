"""A measured value (`datahunt value`) beside the licence and the size: in `GET /catalog`, in one entry's detail,
and on the review page in a real browser (Debian's chromium through Playwright, a live uvicorn)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine
from test_api_catalog import AUTH, make_settings, seed  # pytest puts this test folder on the path
from test_browser import CHROMIUM, CHROMIUM_ARGS

from core.measured_value import MeasuredValue, ValueEstimate
from core.settings import Settings
from curation.catalog import store
from server.app import create_app
from server.commands.serve import BackgroundServer

TOKEN = "measured-token"


def _value(name: str, per_10k: float, *, kind: str = "source", run: str = "value run abc (runs/v)",
           low: float | None = None, high: float | None = None) -> MeasuredValue:
    return MeasuredValue.model_validate({
        "kind": kind, "name": name, "op": "remove", "budget": 16_000, "rows_swapped": 1_600, "seeds": 1,
        "noise_dof": 1, "mean": {"delta": per_10k / 10, "per_10k": per_10k, "low": low, "high": high},
        "per_set": {"humaneval": {"delta": 0.006, "per_10k": 0.06, "low": 0.01, "high": 0.11},
                    "alpaca": ValueEstimate(delta=0.0, per_10k=0.0).model_dump()}, "run": run})


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = store.make_engine(f"sqlite:///{tmp_path / 'catalog.db'}")
    store.upgrade_database(engine)
    seed(engine)
    with store.open_session(engine) as session:
        store.record_values(session, values=[_value("openai/gsm8k", 0.02, run="value run old (runs/old)")])
        store.record_values(session, values=[_value("openai/gsm8k", 0.03), _value("math", -0.2, kind="category",
                                                                                   low=-0.3, high=-0.1)])
    yield engine
    engine.dispose()


def test_get_catalog_lists_the_newest_values_of_the_source_and_its_categories(engine: Engine, tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path), engine=engine, resume_unfinished=False)
    with TestClient(app) as client:
        items = {e["hub_id"]: e for e in client.get("/catalog", headers=AUTH).json()["items"]}
        detail = client.get("/catalog/openai/gsm8k", headers=AUTH).json()["entry"]
    measured = items["openai/gsm8k"]["measured"]
    assert [(m["kind"], m["name"], m["run"]) for m in measured] == [
        ("source", "openai/gsm8k", "value run abc (runs/v)"), ("category", "math", "value run abc (runs/v)")]
    assert measured[0]["text"] == "measured +0.06 AL per 10K rows on humaneval (95%: +0.01 to +0.11; mean +0.03)"
    assert detail["measured"] == measured
    assert items["acme/tiny-chat"]["measured"] == []  # general_chat: never measured


def test_a_value_run_written_again_replaces_its_own_rows(engine: Engine) -> None:
    with store.open_session(engine) as session:
        store.record_values(session, values=[_value("openai/gsm8k", 0.05)])
        values = store.latest_values(session, kind="source")
    assert [(v.name, v.mean.per_10k) for v in values] == [("openai/gsm8k", 0.05)]


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.mark.browser
@pytest.mark.skipif(shutil.which(CHROMIUM) is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_the_review_page_shows_the_measured_value_beside_the_licence_and_size(chromium: Any, engine: Engine,
                                                                             tmp_path: Path) -> None:
    from playwright.sync_api import expect

    settings = Settings(home=tmp_path / "home", offline=True, api_token=SecretStr(TOKEN))
    with BackgroundServer(create_app(settings, engine=engine, resume_unfinished=False)) as server:
        page = chromium.new_page(viewport={"width": 1024, "height": 900})
        try:
            page.goto(server.url + "/")
            row = page.locator('tr.entry[data-hub-id="openai/gsm8k"]')
            state = row.locator("td.state")
            expect(state.locator(".license")).to_contain_text("mit")
            expect(state.locator(".size")).to_contain_text("7,473 rows")
            badges = state.locator(".measured")
            expect(badges).to_have_count(2)
            expect(badges.first).to_have_text("measured +0.06 AL per 10K rows on humaneval (95%: +0.01 to +0.11; "
                                              "mean +0.03)")
            expect(badges.first).to_have_class("measured measured-up")
            expect(badges.first).to_be_visible()
            assert "value run abc" in (badges.first.get_attribute("title") or "")
            expect(badges.nth(1)).to_contain_text("category math: measured")
            # Below the size, inside the row's state cell, and the page still fits the laptop's width.
            size_box, badge_box = state.locator(".size").bounding_box(), badges.first.bounding_box()
            cell_box = state.bounding_box()
            assert badge_box["y"] >= size_box["y"] + size_box["height"] - 1
            assert cell_box["x"] <= badge_box["x"]
            assert badge_box["x"] + badge_box["width"] <= cell_box["x"] + cell_box["width"] + 1
            assert page.evaluate("document.documentElement.scrollWidth") <= 1024
            expect(page.locator('tr.entry[data-hub-id="acme/tiny-chat"] .measured')).to_have_count(0)
        finally:
            page.close()
