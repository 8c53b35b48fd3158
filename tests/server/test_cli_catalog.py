"""`datahunt catalog …` through typer's CliRunner on a real SQLite catalog in DATAHUNT_HOME."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import Engine
from typer.testing import CliRunner

from core.settings import get_settings
from curation.catalog import store
from server.cli import app

runner = CliRunner()
GATED = {"code": "gated", "detail": "manual approval on the Hub", "blocking": True}
FLAG = {"code": "license_unknown", "detail": "no license in the card", "blocking": False}


def _seed(
    engine: Engine,
    hub_id: str,
    category: str,
    relevance: float,
    decision: str = "accept",
    reasons: list[dict[str, Any]] | None = None,
    **fields: Any,
) -> None:
    with store.open_session(engine) as session:
        campaign = store.create_campaign(session, categories=[category], offline=True, backends=["offline"])
        run = store.start_run(session, campaign_id=campaign.id, category=category)
        assert run.id is not None
        record = store.add_candidate(
            session,
            campaign_id=campaign.id,
            run_id=run.id,
            category=category,
            candidate={
                "hub_id": hub_id,
                "relevance": relevance,
                "evidence": [{"backend": "offline", "query": "q", "rank": 1, "score": 1.0}],
                **fields,
            },
        )
        store.add_verdict(
            session, campaign_id=campaign.id, decision=decision, reasons=reasons or [], candidate_id=record.id
        )
        store.upsert_entry(session, candidate=record, decision=decision, reasons=reasons or [])


@pytest.fixture
def catalog() -> None:
    engine = store.make_engine(get_settings().resolved_database_url)  # a SQLite file under DATAHUNT_HOME
    store.upgrade_database(engine)
    _seed(engine, "org/proofs", "math", 0.4, title="Proofs", metadata={"license": "mit"})
    _seed(engine, "org/gsm", "math", 0.9, title="Grade school math", reasons=[FLAG])
    _seed(engine, "org/gsm", "reasoning", 0.6)
    _seed(engine, "org/gated", "math", 0.7, decision="reject", reasons=[GATED])
    _seed(engine, "org/chat", "general_chat", 0.95)
    engine.dispose()


def _invoke(*args: str) -> Any:
    return runner.invoke(app, ["catalog", *args])


def test_list_json_is_the_category_best_first(catalog: None) -> None:
    result = _invoke("list", "--category", "math", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["hub_id"] for r in rows] == ["org/gsm", "org/gated", "org/proofs"]
    assert [r["score"] for r in rows] == [0.9, 0.7, 0.4]
    first = rows[0]
    assert {"hub_id", "status", "categories", "score", "reasons"} <= set(first)
    assert first["categories"] == ["math", "reasoning"] and first["status"] == "pending_review"
    assert first["reasons"] == [{**FLAG, "category": "math"}]
    assert rows[1]["verifier_decision"] == "reject"


def test_list_filters_limit_and_table(catalog: None) -> None:
    limited = json.loads(_invoke("list", "-c", "math", "--limit", "1", "--json").stdout)
    assert [r["hub_id"] for r in limited] == ["org/gsm"]
    everything = json.loads(_invoke("list", "--json").stdout)
    assert [r["hub_id"] for r in everything] == ["org/chat", "org/gsm", "org/gated", "org/proofs"]
    assert json.loads(_invoke("list", "--status", "approved", "--json").stdout) == []
    table = _invoke("list", "--category", "math")
    assert table.exit_code == 0
    assert "org/gsm" in table.stdout and "org/chat" not in table.stdout and "1–3 of 3" in table.stdout


def test_list_reads_whole_on_a_narrow_terminal_and_as_a_table_on_a_wide_one(catalog: None) -> None:
    engine = store.make_engine(get_settings().resolved_database_url)
    flag = {"code": "license_unknown", "detail": "license unknown", "blocking": False}
    for category in ("code_review", "bug_fixing", "commit_messages"):  # one entry, the same flag three times
        _seed(engine, "org/git-diff_to_commit_message_pairs_large", category, 0.99,
              reasons=[flag])
    engine.dispose()
    narrow = runner.invoke(app, ["catalog", "list"], env={"COLUMNS": "80"}).stdout
    lines = narrow.splitlines()
    assert "  1 org/git-diff_to_commit_message_pairs_large  0.99" in lines  # the id whole, on its own line
    assert "    reasons: license_unknown (flag)" in lines  # each code once, not once per category
    assert all(len(line) <= 80 for line in lines) and "…" not in narrow
    wide = runner.invoke(app, ["catalog", "list"], env={"COLUMNS": "200"}).stdout
    row = next(line for line in wide.splitlines() if "org/git-diff_to_commit_message_pairs_large" in line)
    assert row.split()[:5] == ["1", "org/git-diff_to_commit_message_pairs_large", "0.99", "pending_review", "accept"]
    gsm = runner.invoke(app, ["catalog", "list", "-c", "reasoning"], env={"COLUMNS": "80"}).stdout
    assert "org/gsm" in gsm and "reasons:" not in gsm  # gsm's flag is math's, not reasoning's


def test_list_names_categories_best_first_and_off_topic_ones_apart(catalog: None) -> None:
    """A chat set that a bug-fixing query happened to return is rejected there as off-topic: the list says it is
    chat data first, and names the off-topic category apart instead of listing it as one of its categories."""
    engine = store.make_engine(get_settings().resolved_database_url)
    off_topic = {"code": "off_topic", "detail": "relevance 0.00 below 0.25", "blocking": True}
    _seed(engine, "org/chat-logs", "bug_fixing", 0.0, decision="reject", reasons=[off_topic])
    _seed(engine, "org/chat-logs", "tool_use", 0.3)
    _seed(engine, "org/chat-logs", "general_chat", 0.95)
    engine.dispose()
    for columns in ("80", "200"):
        out = runner.invoke(app, ["catalog", "list", "-q", "chat-logs"], env={"COLUMNS": columns}).stdout
        assert "general_chat, tool_use (off-topic for bug_fixing)" in out, out
    assert "categories: math, reasoning" in runner.invoke(app, ["catalog", "list", "-q", "gsm"],
                                                          env={"COLUMNS": "80"}).stdout


def test_show_text_and_json(catalog: None) -> None:
    text = _invoke("show", "org/gsm")
    assert text.exit_code == 0, text.output
    assert "org/gsm" in text.stdout and "math 0.90" in text.stdout and "reasoning 0.60" in text.stdout
    detail = json.loads(_invoke("show", "org/gsm", "--json").stdout)
    assert set(detail) == {"entry", "candidates", "verdicts", "audit"}
    assert len(detail["candidates"]) == 2 and detail["audit"][0]["action"] == "created"


def test_approve_reject_and_override(catalog: None) -> None:
    approved = _invoke("approve", "org/gsm", "--note", "clean", "--reviewer", "ana", "--json")
    assert approved.exit_code == 0, approved.output
    assert json.loads(approved.stdout)["status"] == "approved"
    rejected = _invoke("reject", "org/proofs", "--note", "too small", "--reviewer", "ana")
    assert rejected.exit_code == 0 and "rejected" in rejected.stdout
    refused = _invoke("approve", "org/gated", "--reviewer", "ana")
    assert refused.exit_code == 1
    assert "override" in refused.stderr and "Traceback" not in refused.output
    forced = _invoke("approve", "org/gated", "--reviewer", "ana", "--override", "--json")
    assert forced.exit_code == 0 and json.loads(forced.stdout)["status"] == "approved"
    approved_ids = [r["hub_id"] for r in json.loads(_invoke("list", "--status", "approved", "--json").stdout)]
    assert approved_ids == ["org/gsm", "org/gated"]
    summary = json.loads(_invoke("summary", "--json").stdout)
    assert summary["by_status"] == {"pending_review": 1, "approved": 2, "rejected": 1}
    table = runner.invoke(app, ["catalog", "summary"], env={"COLUMNS": "80"}).stdout
    assert "catalog: 4 entries · 1 pending_review · 2 approved · 1 rejected" in table and "{" not in table
    assert "all entries" in table and any(line.split()[:1] == ["math"] for line in table.splitlines())
    headers = [line.split() for line in table.splitlines() if line.strip().startswith("category")]
    assert headers == [["category", "total", "pending", "approved", "rejected"],
                       ["category", "accepted", "unverified", "flagged", "eval", "rejected"]]  # whole at 80 columns
    assert "…" not in table
    audit = json.loads(_invoke("show", "org/proofs", "--json").stdout)["audit"]
    assert (audit[-1]["action"], audit[-1]["actor"], audit[-1]["note"]) == ("rejected", "ana", "too small")


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("show", "org/missing"), 1, "no catalog entry for 'org/missing'"),
        (("approve", "org/missing", "--note", "x"), 1, "no catalog entry"),
        (("show", "not a hub id"), 2, "malformed Hub dataset id"),
        (("reject", "owner/name/extra"), 2, "malformed Hub dataset id"),
        (("list", "--category", "poetry"), 2, "unknown category 'poetry'"),
        (("list", "--status", "maybe"), 2, "unknown status 'maybe'"),
        (("summary", "--campaign", "nope"), 1, "no campaign 'nope'"),
    ],
)
def test_bad_input_is_one_clean_line(catalog: None, args: tuple[str, ...], code: int, message: str) -> None:
    result = _invoke(*args)
    assert result.exit_code == code
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert (
        "Traceback" not in result.output
        and result.exception is None
        or isinstance(result.exception, SystemExit)
    )


def test_empty_catalog_lists_nothing() -> None:
    result = _invoke("list", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == []


@pytest.mark.parametrize("command", [["catalog", "list"], ["campaign", "list"]])
def test_a_damaged_sqlite_catalog_is_one_line_not_a_traceback(tmp_path, monkeypatch, command) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "catalog.db"
    path.write_bytes(b"this is not an sqlite file" * 1000)
    monkeypatch.setenv("DATAHUNT_DATABASE_URL", f"sqlite:///{path}")
    get_settings.cache_clear()
    result = runner.invoke(app, command)
    get_settings.cache_clear()
    assert result.exit_code == 1
    assert "cannot use the catalog database: file is not a database" in result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
