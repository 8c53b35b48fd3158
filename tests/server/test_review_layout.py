"""The review page at scale in a real browser (Debian's chromium through Playwright, a live uvicorn), at a
laptop's 1,024 px and a desktop's 1,920 px: 120 datasets, each found by five categories in two campaigns.

Every row's Approve and Reject buttons lie inside the window and the bulk bar stays in view while the list
scrolls; a page of 100 entries stays a bounded height; ticking rows and pressing "Approve selected" approves
them in one call and the counts change without a reload; the screens match the references in tests/data/
(`screens.py` says how they compare and how to refresh them).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from review_catalog import hub_id, seed_large  # pytest puts this test folder on the path
from screens import assert_matches
from sqlalchemy import Engine
from sqlmodel import select
from test_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS

from core.settings import Settings
from curation.catalog import store
from curation.catalog.models import AuditEvent
from server.app import create_app
from server.commands.serve import BackgroundServer

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(shutil.which(CHROMIUM) is None,
                                 reason="needs Debian's chromium (apt-get install chromium)")]

TOKEN = "layout-token"
WIDTHS = [1024, 1920]
HEIGHT = 900
# A page of 100 entries was 50,000-69,000 px tall before rows were bounded; now about 90 px a row.
MAX_PAGE_HEIGHT = {1024: 14_000, 1920: 12_000}
REFERENCES = Path(__file__).resolve().parent.parent / "data" / "review_screens"


@pytest.fixture(scope="module")
def seeded_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One seeded SQLite catalog, copied for each test (seeding 120 datasets twice over takes seconds)."""
    path = tmp_path_factory.mktemp("layout") / "catalog.db"
    engine = store.make_engine(f"sqlite:///{path}")
    store.upgrade_database(engine)
    seed_large(engine)
    engine.dispose()
    return path


@pytest.fixture
def server_url(seeded_file: Path, tmp_path: Path) -> Iterator[tuple[str, Engine]]:
    copy = tmp_path / "catalog.db"
    shutil.copyfile(seeded_file, copy)
    engine = store.make_engine(f"sqlite:///{copy}")
    settings = Settings(home=tmp_path / "home", offline=True, api_token=SecretStr(TOKEN))
    app = create_app(settings, engine=engine, resume_unfinished=False)
    with BackgroundServer(app) as server:
        yield server.url, engine
    engine.dispose()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def open_page(chromium: Any, url: str, width: int) -> Any:
    page = chromium.new_page(viewport={"width": width, "height": HEIGHT})
    page.goto(url + "/?size=100")
    page.evaluate("document.fonts.ready")
    return page


# Each review button's box in the page's layout, whether scrolled into view or not.
BUTTON_BOXES = """() => Array.from(document.querySelectorAll('tr.entry button.approve, tr.entry button.reject'))
  .map((b) => { const r = b.getBoundingClientRect(); return [r.left, r.right, r.width]; })"""


@pytest.mark.parametrize("width", WIDTHS)
def test_review_controls_stay_in_the_window(chromium: Any, server_url: tuple[str, Engine], width: int) -> None:
    from playwright.sync_api import expect

    page = open_page(chromium, server_url[0], width)
    try:
        expect(page.locator("tr.entry")).to_have_count(100)
        boxes = page.evaluate(BUTTON_BOXES)
        assert len(boxes) == 200
        outside = [box for box in boxes if box[0] < 0 or box[1] > width or box[2] < 30]
        assert outside == [], f"{len(outside)} review buttons reach outside the {width} px window: {outside[:3]}"
        assert page.evaluate("document.documentElement.scrollWidth") <= width  # no sideways scrolling
        height = page.evaluate("document.documentElement.scrollHeight")
        assert height < MAX_PAGE_HEIGHT[width], f"a page of 100 entries is {height} px tall at {width} px"
        first = page.locator("tr.entry").first
        expect(first.locator("button.approve")).to_be_in_viewport()
        expect(first.locator(".note")).to_be_in_viewport()
        # Far down the list the bulk bar is still in view, and a row's controls are visible where it is.
        last = page.locator("tr.entry").nth(95)
        last.scroll_into_view_if_needed()
        expect(last.locator("button.approve")).to_be_in_viewport()
        expect(page.locator("#bulk-approve")).to_be_in_viewport()
        expect(page.locator("#counts")).to_be_in_viewport()
        # Clamped reasons open in place and close again.
        row = page.locator(f'tr.entry[data-hub-id="{hub_id(7)}"]')
        more = row.locator("button.more")
        expect(more).to_be_visible()
        closed = row.bounding_box()["height"]
        assert closed < 130
        more.click()
        expect(more).to_have_text("show less")
        assert row.bounding_box()["height"] > closed
        expect(row.locator("li", has_text="relevance to tool_use is low")).to_be_visible()
        more.click()
        assert row.bounding_box()["height"] == closed
    finally:
        page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_a_dataset_page_fits_the_window(chromium: Any, server_url: tuple[str, Engine], width: int) -> None:
    from playwright.sync_api import expect

    page = chromium.new_page(viewport={"width": width, "height": HEIGHT})
    try:
        page.goto(f"{server_url[0]}/datasets/{hub_id(1)}")
        expect(page.locator("#verdicts tbody tr").first).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth") <= width  # long reasons wrap
        expect(page.locator("#entry button.approve")).to_be_in_viewport()
        history = page.locator("#verdict-history")
        expect(history.locator("table")).to_be_hidden()  # earlier campaigns folded away
        history.locator("summary").click()
        expect(history.locator("table")).to_be_visible()
    finally:
        page.close()


def test_bulk_approve_changes_the_counts_without_a_reload(chromium: Any, server_url: tuple[str, Engine]) -> None:
    from playwright.sync_api import expect

    url, engine = server_url
    page = open_page(chromium, url, 1024)
    try:
        page.fill("#reviewer", "alice")
        page.fill("#token", TOKEN)
        page.click("#save-auth")
        approved = page.locator('#counts [data-status="approved"] b')
        pending = page.locator('#counts [data-status="pending_review"] b')
        expect(approved).to_have_text("0")
        expect(pending).to_have_text("120")
        expect(page.locator("#bulk-approve")).to_be_disabled()
        picked = [hub_id(n) for n in (2, 3, 5)]
        for hub in picked:
            page.locator(f'input.pick[data-hub-id="{hub}"]').check()
        expect(page.locator("#picked")).to_have_text("3 selected")
        page.fill("#bulk-note", "checked by hand")
        page.click("#bulk-approve")
        expect(approved).to_have_text("3")
        expect(pending).to_have_text("117")
        expect(page.locator("#flash")).to_contain_text("3 entries approved by alice")
        for hub in picked:
            expect(page.locator(f'tr.entry[data-hub-id="{hub}"] .entry-status')).to_have_text("approved")
        expect(page.locator("#picked")).to_have_text("0 selected")

        # The verifier rejected dataset 0: with it among the ticked rows and no override, nothing changes.
        for hub in (hub_id(0), hub_id(4)):
            page.locator(f'input.pick[data-hub-id="{hub}"]').check()
        page.click("#bulk-approve")
        expect(page.locator("#flash")).to_contain_text("needs override")
        expect(approved).to_have_text("3")
        page.check("#bulk-override")
        page.click("#bulk-approve")
        expect(approved).to_have_text("5")

        # One row's own buttons update the counts too.
        row = page.locator(f'tr.entry[data-hub-id="{hub_id(9)}"]')
        row.locator("button.reject").click()
        expect(page.locator('#counts [data-status="rejected"] b')).to_have_text("1")
        expect(pending).to_have_text("114")
        page.reload()
        expect(approved).to_have_text("5")
    finally:
        page.close()
    with store.open_session(engine) as session:
        rows = session.exec(select(AuditEvent).where(AuditEvent.action == "approved")).all()
    assert sorted(r.entity_id for r in rows) == sorted([*picked, hub_id(0), hub_id(4)])
    assert {r.actor for r in rows} == {"alice"}


@pytest.mark.parametrize("width", WIDTHS)
def test_the_review_screens_match_the_references(chromium: Any, server_url: tuple[str, Engine], width: int) -> None:
    page = open_page(chromium, server_url[0], width)
    try:
        top = page.evaluate("document.querySelector('#catalog').getBoundingClientRect().top + window.scrollY")
        png = page.screenshot(clip={"x": 0, "y": top, "width": width, "height": 800}, full_page=True,
                              animations="disabled", caret="hide")
    finally:
        page.close()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"review_{width}.png").write_bytes(png)
    assert_matches(png, REFERENCES / f"review_{width}.png", ARTIFACTS)
