"""A re-run finishes on the review page without a reload, in a real browser (Debian's chromium through
Playwright, a live uvicorn) at 1,024 and 1,920 px: the subagent's row shows the new attempt, its counts and its
status, its Re-run button is enabled again, and the row says the re-run ended.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy import Engine
from test_browser import (  # pytest puts this test folder on the path
    BROKEN,
    CHROMIUM,
    CHROMIUM_ARGS,
    KnowsAcme,
    fake_subagent,
    filled_engine,  # noqa: F401
    wait_for_rerun,
)
from test_review_feedback import WIDTHS, sign_in
from test_review_layout import HEIGHT

from core.settings import Settings
from server.app import create_app
from server.commands.serve import BackgroundServer

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(shutil.which(CHROMIUM) is None,
                                 reason="needs Debian's chromium (apt-get install chromium)")]


@pytest.mark.parametrize("width", WIDTHS)
def test_a_rerun_finishes_on_the_page_without_a_reload(filled_engine: Engine, tmp_path: Path, width: int) -> None:  # noqa: F811
    from playwright.sync_api import expect, sync_playwright

    settings = Settings(home=tmp_path / "home", offline=True, api_token=SecretStr("tok"))
    app = create_app(settings, engine=filled_engine, resume_unfinished=False,
                     campaign_overrides={"subagent": fake_subagent, "backends": [KnowsAcme()]})
    BROKEN.clear()  # the broken backend is fixed: a re-run of tool_use now finds its datasets
    with BackgroundServer(app) as server, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": HEIGHT})
            page.goto(server.url + "/")
            sign_in(page, "tok")
            row = page.locator('table.runs tr[data-category="tool_use"]')
            expect(row.locator(".status")).to_have_text("failed")
            expect(row.locator(".attempt")).to_have_text("1")
            expect(row.locator(".found")).to_have_text("0")
            button = row.locator("button.rerun")
            button.click()
            expect(row.locator(".attempt")).to_have_text("2", timeout=30_000)
            expect(row.locator(".status")).to_have_text("succeeded", timeout=30_000)
            expect(row.locator(".found")).to_have_text("2")
            expect(row.locator(".accepted")).to_have_text("2")
            expect(button).to_be_enabled(timeout=30_000)
            expect(row.locator(".feedback")).to_contain_text("re-run finished (succeeded, attempt 2, 2 found)")
            expect(page.locator("#campaign-status")).to_have_text("succeeded")
            wait_for_rerun(filled_engine, "tool_use")
        finally:
            browser.close()


