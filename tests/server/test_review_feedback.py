"""The review page answers where the reviewer acted, in a real browser (Debian's chromium through Playwright, a
live uvicorn), at a laptop's 1,024 px and a desktop's 1,920 px: a refused approval is said inside the window,
in the row that was clicked; filtered to one category, every row leads with that category's verdict
(`test_review_rerun.py`: a re-run finishes on the page).
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from review_catalog import hub_id  # pytest puts this test folder on the path
from sqlalchemy import Engine
from test_browser import CHROMIUM
from test_review_layout import HEIGHT, TOKEN, chromium, open_page, seeded_file, server_url  # noqa: F401

from curation.catalog import store

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(shutil.which(CHROMIUM) is None,
                                 reason="needs Debian's chromium (apt-get install chromium)")]

WIDTHS = [1024, 1920]
FAR_DOWN = 40  # a row well below the first screen


def sign_in(page: Any, token: str) -> None:
    """Give the page a reviewer's name and the API token, as a reviewer types them."""
    page.fill("#reviewer", "alice")
    page.fill("#token", token)
    page.click("#save-auth")


@pytest.mark.parametrize("width", WIDTHS)
def test_a_refused_approval_is_said_in_the_window_next_to_the_row(
    chromium: Any, server_url: tuple[str, Engine], width: int,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    url, engine = server_url
    with store.open_session(engine) as session:  # the verifier rejected a dataset far down the list
        entry = store.get_entry(session, hub_id=hub_id(FAR_DOWN))
        entry.verifier_decision = "reject"
        session.add(entry)
    page = open_page(chromium, url, width)
    try:
        sign_in(page, TOKEN)
        row = page.locator(f'tr.entry[data-hub-id="{hub_id(FAR_DOWN)}"]')
        row.scroll_into_view_if_needed()
        row.locator("button.approve").click()  # no override ticked
        said = row.locator(".feedback")
        expect(said).to_contain_text("409")
        expect(said).to_contain_text("override")
        expect(said).to_be_in_viewport()
        expect(said).to_have_attribute("role", "alert")  # read out at once by a screen reader
        expect(page.locator("#flash")).not_to_be_in_viewport()  # the top of the page is far above
        box, button = said.bounding_box(), row.locator("button.approve").bounding_box()
        assert box is not None and button is not None and 0 <= box["y"] - button["y"] < 120  # right under it
        expect(row.locator(".entry-status")).to_have_text("pending_review")
    finally:
        page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_filtered_to_one_category_every_row_leads_with_its_verdict(
    chromium: Any, server_url: tuple[str, Engine], width: int,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    url, _ = server_url
    page = chromium.new_page(viewport={"width": width, "height": HEIGHT})
    try:
        page.goto(url + "/?category=tool_use&size=50")
        rows = page.locator("tr.entry")
        expect(rows).to_have_count(50)
        leads = page.evaluate("""() => Array.from(document.querySelectorAll('tr.entry')).map((row) => [
            row.querySelector('td.verifier .viewed').textContent,
            (row.querySelector('td.verifier .reason-group .cats') || {textContent: ''}).textContent,
            row.querySelector('td.evidence .found-by').textContent])""")
        assert {viewed for viewed, _, _ in leads} == {"for tool_use"}
        firsts = {first for _, first, _ in leads}
        assert firsts <= {"all 5 categories", "tool_use"} and firsts, firsts  # never another category's reason
        assert {found for _, _, found in leads} == {"found by 20 queries, best rank 1"}  # 4 in each of 5 categories
        # Every row has its description, and its risks as badges beside the size.
        expect(page.locator("tr.entry .description")).to_have_count(50)
        assert page.locator("tr.entry td.state .badge.risk").count() == 0  # sized, in a known format
    finally:
        page.close()


def test_the_link_serve_prints_signs_the_page_in(chromium: Any, server_url: tuple[str, Engine]) -> None:  # noqa: F811
    """`datahunt serve` without a token prints `…/#token=…`: opened from it, the buttons work, and the token
    leaves the address bar (the fragment never reaches the server)."""
    from playwright.sync_api import expect

    url, _ = server_url
    page = chromium.new_page(viewport={"width": 1024, "height": HEIGHT})
    try:
        page.goto(f"{url}/#token={TOKEN}")
        expect(page.locator("#auth-state")).to_have_text("token set for this tab")
        assert "token" not in page.url
        page.fill("#reviewer", "alice")
        page.click("#save-auth")
        row = page.locator(f'tr.entry[data-hub-id="{hub_id(3)}"]')
        row.locator("button.approve").click()
        expect(row.locator(".entry-status")).to_have_text("approved")
        expect(row.locator(".feedback")).to_contain_text("approved by alice")
    finally:
        page.close()
