"""The review page's filters and campaign picker, the mirror badge, and one dataset's own page (SQLite)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from review_catalog import hub_id, seed_large
from sqlalchemy import Engine
from test_api_catalog import AUTH, make_settings, seed  # pytest puts this test folder on the path

from curation.catalog import store
from server.app import create_app

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = store.make_engine(f"sqlite:///{tmp_path / 'catalog.db'}")
    store.upgrade_database(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def client(engine: Engine, tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(make_settings(tmp_path, mirror=MIRROR), engine=engine, resume_unfinished=False)
    with TestClient(app) as client:
        yield client


def test_an_unknown_category_filter_is_an_error_not_everything(engine: Engine, client: TestClient) -> None:
    seed(engine)
    page = client.get("/", params={"category": "maths"})
    assert page.status_code == 400
    assert "unknown category &#39;maths&#39; (did you mean `math`?)" in page.text
    assert 'class="entry"' not in page.text and "No entries match" not in page.text
    assert client.get("/", params={"status": "aproved"}).status_code == 400
    math = client.get("/", params={"category": "math"})
    assert math.status_code == 200 and math.text.count('<tr class="entry"') == 1


def test_the_mirror_badge_and_the_detail_link(engine: Engine, client: TestClient) -> None:
    seed(engine)
    page = client.get("/").text
    gsm8k = page[page.index('data-hub-id="openai/gsm8k"'):]
    gsm8k = gsm8k[: gsm8k.index("</tr>")]
    assert 'href="datasets/openai/gsm8k"' in gsm8k and "in the local mirror" in gsm8k
    tiny = page[page.index('data-hub-id="acme/tiny-chat"'):]
    assert "in the local mirror" not in tiny[: tiny.index("</tr>")]


def test_any_finished_subagent_can_be_rerun_and_any_campaign_shown(engine: Engine, client: TestClient) -> None:
    older = seed(engine)
    with store.open_session(engine) as session:
        newer = store.create_campaign(session, categories=["math"], offline=True, backends=["offline"]).id
        store.start_run(session, campaign_id=newer, category="math")  # still running: its re-run button is disabled
    latest = client.get("/").text
    assert f'<code id="campaign-id">{newer}</code>' in latest
    assert latest.count('class="rerun"') == 1 and latest.count("disabled>Re-run") == 1
    assert f'<option value="{older}"' in latest
    picked = client.get("/", params={"campaign": older}).text
    assert f'<code id="campaign-id">{older}</code>' in picked
    assert picked.count('class="rerun"') == 4 and "disabled>Re-run" not in picked  # each finished: each re-runs
    assert client.get("/", params={"campaign": "nope"}).status_code == 404


def test_a_dataset_page_shows_verdicts_evidence_preview_and_audit(engine: Engine, client: TestClient) -> None:
    seed(engine)
    client.post("/catalog/acme/restricted-reviews/reject", headers=AUTH, json={"reviewer": "ana", "note": "no"})
    response = client.get("/datasets/acme/restricted-reviews")
    assert response.status_code == 200
    page = response.text
    verdicts = page[page.index('id="verdicts"'):page.index('id="evidence"')]
    assert "code_review" in verdicts and "license_restricted: license &#39;other&#39; forbids derivatives" in verdicts
    evidence = page[page.index('id="evidence"'):page.index('id="preview"')]
    assert "“code_review dataset”" in evidence and "3.50" in evidence
    audit = page[page.index('id="audit"'):]
    assert re.search(r"<td>rejected</td><td>pending_review</td>\s*<td>rejected</td><td>ana</td><td>no</td>", audit)
    assert "no preview available offline" in page and "override verifier" in page
    mirrored = client.get("/datasets/openai/gsm8k").text
    preview = mirrored[mirrored.index('id="preview"'):mirrored.index('id="audit"')]
    assert "<th>question</th>" in preview and "<th>answer</th>" in preview and "{&#34;" not in preview
    assert "in the local mirror" in mirrored
    assert client.get("/datasets/acme/unknown").status_code == 404
    assert client.get("/datasets/not-an-id").status_code == 422


def test_the_review_page_names_off_topic_categories_apart(engine: Engine, client: TestClient) -> None:
    """A chat set that a bug-fixing query returned is rejected there as off-topic; the review page lists its real
    categories, best first, and names the off-topic one apart."""
    seed(engine)
    off_topic = [{"code": "off_topic", "detail": "relevance 0.00 below 0.25", "blocking": True}]
    with store.open_session(engine) as session:
        campaign = store.create_campaign(session, categories=["bug_fixing", "general_chat"], offline=True,
                                         backends=["offline"])
        for category, relevance, decision, reasons in (("bug_fixing", 0.0, "reject", off_topic),
                                                        ("general_chat", 0.95, "accept", [])):
            run = store.start_run(session, campaign_id=campaign.id, category=category)
            candidate = store.add_candidate(session, campaign_id=campaign.id, run_id=run.id, category=category,
                                            candidate={"hub_id": "acme/chat-logs", "relevance": relevance})
            store.add_verdict(session, campaign_id=campaign.id, decision=decision, reasons=reasons,
                              candidate_id=candidate.id)
            store.upsert_entry(session, candidate=candidate, decision=decision, reasons=reasons)
    page = client.get("/", params={"campaign": campaign.id}).text
    row = page[page.index('data-hub-id="acme/chat-logs"'):]
    row = row[: row.index("</tr>")]
    assert 'general_chat <span class="off-topic">(off-topic for bug_fixing)</span>' in row


def test_licences_from_the_mirror_index_and_their_risk_are_shown(engine: Engine, client: TestClient) -> None:
    seed(engine)
    with store.open_session(engine) as session:
        changed = store.adopt_licenses(session, {"acme/tiny-chat": "CC BY-NC 4.0", "openai/gsm8k": "Apache-2.0"},
                                       source="mirror index")
    assert [e.hub_id for e in changed] == ["acme/tiny-chat"]  # gsm8k keeps the licence its metadata stated
    page = client.get("/").text

    def row(hub_id: str) -> str:
        text = page[page.index(f'data-hub-id="{hub_id}"'):]
        return text[: text.index("</tr>")]

    assert "CC BY-NC 4.0" in row("acme/tiny-chat") and "non-commercial</span>" in row("acme/tiny-chat")
    assert "from the mirror index" in row("acme/tiny-chat")
    assert "mit" in row("openai/gsm8k") and "license-risk" not in row("openai/gsm8k")
    assert "restricted</span>" in row("acme/restricted-reviews")
    detail = client.get("/datasets/acme/tiny-chat").text
    assert "CC BY-NC 4.0" in detail and "non-commercial</span>" in detail and "(from the mirror index)" in detail
    history = client.get("/catalog/acme/tiny-chat").json()
    assert any(a["action"] == "license_set" for a in history["audit"])


def _row(page: str, hub_id: str) -> str:
    text = page[page.index(f'<tr class="entry" data-hub-id="{hub_id}"'):]
    return text[: text.index("</tr>")]


def test_each_reason_shows_once_under_the_categories_that_gave_it(engine: Engine, client: TestClient) -> None:
    """Five categories each gave the same two reasons, twice: the row says each once, labelled "all 5
    categories"; a reason only one category gave is labelled with that category."""
    seed_large(engine, count=12)
    row = _row(client.get("/").text, hub_id(1))
    assert row.count("license_unknown: no license stated") == 1 and row.count("size_unknown:") == 1
    assert row.count("all 5 categories") == 1
    for category in ("math", "general_chat", "tool_use", "bug_fixing"):  # dataset 1 is on topic for code_review
        assert f'<span class="cats">{category}</span>' in row and f"relevance to {category} is low" in row
    assert "relevance to code_review" not in row
    assert '<b class="verdict verdict-accept">accept</b> <span class="viewed">for math</span>' in row  # its best
    assert "· 7 reasons" in row  # 3 shared by all, 4 of one category each
    # The viewed category's reasons lead; the other categories' off-topic flags come after them.
    assert row.index("all 5 categories") < row.index("relevance to tool_use is low")


def test_pages_have_a_size_and_say_what_they_show(engine: Engine, client: TestClient) -> None:
    seed_large(engine, count=23)
    second = client.get("/", params={"size": 10, "page": 2}).text
    assert second.count('<tr class="entry"') == 10 and "(23 matching; 11–20 shown)" in second
    assert f'data-hub-id="{hub_id(10)}"' in second and f'data-hub-id="{hub_id(9)}"' not in second
    assert 'href="?status=&amp;category=&amp;license=&amp;q=&amp;size=10&amp;page=3" rel="next"' in second
    assert 'rel="prev"' in second and "page 2 of 3" in second
    assert client.get("/", params={"size": 10, "page": 3}).text.count('<tr class="entry"') == 3
    assert client.get("/").text.count('<tr class="entry"') == 23  # the default page holds them all
    assert client.get("/", params={"size": 0}).status_code == 422
    assert client.get("/", params={"size": 501}).status_code == 422
    counts = second[second.index('id="counts"'):second.index("</p>", second.index('id="counts"'))]
    assert '<b>23</b> pending review' in counts and "<b>0</b> approved" in counts


def test_a_dataset_page_shows_the_latest_verdicts_and_keeps_history_apart(engine: Engine, client: TestClient) -> None:
    seed_large(engine, count=3)
    page = client.get(f"/datasets/{hub_id(1)}").text
    verdicts = page[page.index('id="verdicts"'):page.index('id="verdict-history"')]
    history = page[page.index('id="verdict-history"'):page.index('id="evidence"')]
    assert verdicts.count("<tr><td>") == 5 and verdicts.count("<code>c-latest</code>") == 5
    assert "c-older" not in verdicts
    assert "History: 5 earlier verdicts (campaign c-older)" in history and history.count("<code>c-older</code>") == 5
    # A verdict that said the same thing twice says it once.
    assert verdicts.count("license_unknown: no license stated") == 5
    evidence = page[page.index('id="evidence"'):page.index('id="evidence-history"')]
    assert "(20 search hits of the latest finds)" in evidence and "c-older" not in evidence
    assert "History: 20 search hits of earlier finds" in page
