"""The review page in a real browser: Debian's chromium, driven by Playwright, against a live uvicorn.

The catalog is filled by a real campaign (the graph with a fake subagent), then the test clicks what a
reviewer would: enter name and token, filter by category, approve with a note, export the manifest. It checks
the page, the database and the manifest file, and saves a screenshot under tests/artifacts/.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from sqlalchemy import Engine

from core.candidates import Candidate, DatasetMetadata, Deliverable, Evidence
from core.settings import Settings, get_settings
from core.types import Category
from curation.catalog import store
from graph.campaign import run_campaign
from server.app import create_app
from server.commands.serve import BackgroundServer

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
TOKEN = "browser-token"


BROKEN: set[str] = set()  # categories whose fake subagent raises, as a broken backend would


async def fake_subagent(category: Category, *, backends: Any, llm: Any = None, **_: Any) -> Deliverable:
    if category.value in BROKEN:
        raise RuntimeError(f"{category.value}: backend timed out")
    slug = category.value.replace("_", "-")
    candidates = [
        Candidate(hub_id=f"acme/{slug}-{n}", title=f"{category.value} set {n}", categories=[category],
                  relevance=0.9 - 0.2 * n, format_guess="sharegpt",
                  metadata=DatasetMetadata(license="apache-2.0", num_rows=20_000 * n, features=["conversations"]),
                  evidence=[Evidence(backend="offline", query=f"{category.value} conversations", rank=n, score=2.0)])
        for n in (1, 2)
    ]
    return Deliverable(category=category, candidates=candidates, offline=True)


class KnowsAcme:
    name = "offline"

    async def search(self, query: str, *, limit: int = 20) -> list[Any]:
        return []

    async def lookup(self, hub_id: str) -> DatasetMetadata | None:
        return DatasetMetadata(license="apache-2.0", num_rows=20_000) if hub_id.startswith("acme/") else None


@pytest.fixture
def filled_engine(tmp_path: Path) -> Iterator[Engine]:
    engine = store.make_engine(f"sqlite:///{tmp_path / 'catalog.db'}")
    store.upgrade_database(engine)
    BROKEN.add("tool_use")
    asyncio.run(run_campaign(engine=engine, settings=get_settings(),
                             categories=[Category.MATH, Category.CODE_REVIEW, Category.TOOL_USE],
                             offline=True, subagent=fake_subagent, backends=[KnowsAcme()]))
    BROKEN.clear()
    yield engine
    engine.dispose()


def wait_for_rerun(engine: Engine, category: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with store.open_session(engine) as session:
            campaign = store.list_campaigns(session, limit=1)[0]
            runs = {r.category: r for r in store.list_runs(session, campaign_id=campaign.id)}
        if runs[category].attempt == 2 and runs[category].status == "succeeded" and campaign.status == "succeeded":
            return
        time.sleep(0.05)
    raise AssertionError(f"re-run of {category} did not finish: {runs[category]}")


@pytest.mark.skipif(shutil.which(CHROMIUM) is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_review_approve_export(filled_engine: Engine, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    settings = Settings(home=tmp_path / "home", offline=True, api_token=SecretStr(TOKEN))
    app = create_app(settings, engine=filled_engine, resume_unfinished=False,
                     campaign_overrides={"subagent": fake_subagent, "backends": [KnowsAcme()]})
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with BackgroundServer(app) as server, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            console: list[str] = []
            page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
            page.goto(server.url + "/")
            expect(page.locator("#campaign-status")).to_have_text("partial")
            expect(page.locator("table.runs tbody tr")).to_have_count(3)
            failed = page.locator('table.runs tr[data-category="tool_use"]')
            expect(failed).to_contain_text("backend timed out")

            page.fill("#reviewer", "alice")
            page.fill("#token", TOKEN)
            page.press("#token", "Enter")  # submitting the form saves it in the tab; the token never enters a URL
            expect(page.locator("#auth-state")).to_have_text("token set for this tab")
            assert "token" not in page.url and TOKEN not in page.url

            failed.locator("button.rerun").click()  # the backend is fixed: re-run only that subagent
            expect(page.locator("#flash")).to_contain_text("re-running tool_use")
            expect(failed.locator(".status")).to_have_text("succeeded", timeout=30_000)  # live, over SSE
            expect(page.locator("#campaign-status")).to_have_text("succeeded", timeout=30_000)
            wait_for_rerun(filled_engine, "tool_use")
            page.reload()
            expect(failed.locator(".status")).to_have_text("succeeded")
            expect(page.locator("button.rerun")).to_have_count(3)  # any finished subagent can run again

            page.select_option("#filters select[name=category]", "math")
            page.click("#filters button[type=submit]")
            page.wait_for_url("**category=math**")
            rows = page.locator("tr.entry")
            expect(rows).to_have_count(2)
            expect(page.locator("h3.group")).to_have_count(1)

            row = page.locator('tr.entry[data-hub-id="acme/math-1"]')
            expect(row).to_contain_text("apache-2.0")
            expect(row).to_contain_text("20,000 rows")
            expect(row).to_contain_text("math conversations")  # the evidence query
            row.locator(".note").fill("clean, permissive")
            row.locator("button.approve").click()
            expect(row.locator(".entry-status")).to_have_text("approved")
            expect(page.locator("#flash")).to_contain_text("acme/math-1: approved by alice")

            page.fill("#target-model", "Qwen/Qwen3-8B")
            page.click("#export-manifest")
            expect(page.locator("#manifest-output")).to_contain_text('"hub_id": "acme/math-1"')
            expect(page.locator("#export-path")).to_contain_text("1 sources")
            page.screenshot(path=str(ARTIFACTS / "review_approve_export.png"), full_page=True)
            shown = json.loads(page.locator("#manifest-output").inner_text())
            # The page runs under a Content-Security-Policy without inline script: nothing of it was blocked.
            assert [line for line in console if "Content Security Policy" in line] == []
            # One dataset's own page: its evidence and verdict, and a review sent from there.
            page.goto(server.url + "/")
            page.click('a.hub-id[href="datasets/acme/math-2"]')
            page.wait_for_url("**/datasets/acme/math-2")
            expect(page.locator("#verdicts")).to_contain_text("math")
            expect(page.locator("#evidence")).to_contain_text("math conversations")
            page.locator("#entry .note").fill("second copy")
            page.locator("#entry button.reject").click()
            expect(page.locator("#entry .entry-status")).to_have_text("rejected")
            expect(page.locator("#flash")).to_contain_text("acme/math-2: rejected by alice")
        finally:
            browser.close()

    with store.open_session(filled_engine) as session:
        entry = store.get_entry(session, hub_id="acme/math-1")
        assert (entry.status, entry.reviewer, entry.note) == ("approved", "alice", "clean, permissive")
        assert store.get_entry(session, hub_id="acme/math-2").status == "rejected"
    exported = sorted((settings.resolved_data_dir / "manifests").glob("manifest-*.json"))
    assert len(exported) == 1
    written = json.loads(exported[0].read_text())
    assert written == shown
    assert [s["hub_id"] for s in written["sources"]] == ["acme/math-1"]
    assert written["target"]["model"] == "Qwen/Qwen3-8B"
    assert (ARTIFACTS / "review_approve_export.png").stat().st_size > 10_000


@pytest.mark.skipif(shutil.which(CHROMIUM) is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_login_when_reads_require_the_token(filled_engine: Engine, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    settings = Settings(home=tmp_path / "home", offline=True, api_token=SecretStr(TOKEN), api_read_requires_token=True)
    app = create_app(settings, engine=filled_engine, resume_unfinished=False,
                     campaign_overrides={"subagent": fake_subagent, "backends": [KnowsAcme()]})
    with BackgroundServer(app) as server, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context()
            page = context.new_page()
            console: list[str] = []
            page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
            page.goto(server.url + "/")
            expect(page.locator("#login")).to_be_visible()
            expect(page.locator("#catalog")).to_have_count(0)
            page.fill("#login-token", "not-the-token")
            page.click("#login-submit")
            expect(page.locator("#flash")).to_contain_text("401: wrong token")

            page.fill("#login-token", TOKEN)
            page.click("#login-submit")
            expect(page.locator("#catalog")).to_be_visible()
            [cookie] = context.cookies()
            assert (cookie["name"], cookie["httpOnly"], cookie["sameSite"]) == ("datahunt_session", True, "Strict")
            assert cookie["secure"] is False  # plain HTTP on loopback; Secure over TLS
            assert page.evaluate("document.cookie") == ""  # the page's scripts cannot read it

            # The event stream is a read: EventSource carries the cookie. A re-run (a write, with the token
            # the login kept for this tab) updates the row live over it.
            page.fill("#reviewer", "alice")
            page.click("#save-auth")
            failed = page.locator('table.runs tr[data-category="tool_use"]')
            failed.locator("button.rerun").click()
            expect(failed.locator(".status")).to_have_text("succeeded", timeout=30_000)
            wait_for_rerun(filled_engine, "tool_use")

            page.click("#logout")
            expect(page.locator("#login")).to_be_visible()
            assert context.cookies() == []
            assert page.evaluate("fetch('catalog').then(r => r.status)") == 401
            assert [line for line in console if "Content Security Policy" in line] == []
        finally:
            browser.close()
