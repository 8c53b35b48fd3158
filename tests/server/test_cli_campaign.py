"""`datahunt campaign …` through the real CLI: an offline campaign end to end, status, re-run, bad input."""

from __future__ import annotations

import gc
import json
import warnings

import pytest
from typer.testing import CliRunner

from core.types import Category
from server.cli import app

runner = CliRunner()


@pytest.mark.slow
def test_offline_campaign_stores_all_ten_then_status_and_rerun() -> None:
    result = runner.invoke(app, ["campaign", "run", "--offline", "--json"])
    assert result.exit_code == 0, result.output
    outcome = json.loads(result.stdout)
    assert outcome["status"] == "succeeded"
    assert set(outcome["by_category"]) == {c.value for c in Category}
    assert all(row["candidates"] > 0 for row in outcome["by_category"].values())
    assert all(row["accepted"] + row["rejected"] == row["candidates"] for row in outcome["by_category"].values())
    campaign_id = outcome["campaign_id"]

    status = runner.invoke(app, ["campaign", "status", campaign_id, "--json"])
    assert status.exit_code == 0, status.output
    runs = json.loads(status.stdout)["runs"]
    assert len(runs) == 10 and {r["status"] for r in runs} == {"succeeded"}
    table = runner.invoke(app, ["campaign", "status", campaign_id], env={"COLUMNS": "80"}).stdout
    header = next(line for line in table.splitlines() if line.strip().startswith("category"))
    assert header.split() == ["category", "try", "status", "queries", "failed", "found", "accepted", "elapsed"]
    assert "…" not in table and "agentic_trajectories" in table  # whole names and headers at 80 columns

    rerun = runner.invoke(app, ["campaign", "rerun", campaign_id, "math"])
    assert rerun.exit_code == 0, rerun.output
    assert "catalog summary" in rerun.stdout and "math" in rerun.stdout
    after = json.loads(runner.invoke(app, ["campaign", "status", campaign_id, "--json"]).stdout)["runs"]
    attempts = {r["category"]: r["attempt"] for r in after}
    assert attempts.pop("math") == 2 and set(attempts.values()) == {1}

    listed = json.loads(runner.invoke(app, ["campaign", "list", "--json"]).stdout)
    assert [c["id"] for c in listed] == [campaign_id]


def test_a_table_run_prints_the_summary() -> None:
    result = runner.invoke(app, ["campaign", "run", "--offline", "--categories", "math,agentic_trajectories"],
                           env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "catalog summary of this campaign" in result.stdout
    assert "agentic_trajectories" in result.stdout and "succeeded" in result.stdout
    assert "code_review" not in result.stdout
    # an 80-column terminal shows every header whole, beside the longest category name
    header = next(line for line in result.stdout.splitlines() if line.strip().startswith("category"))
    assert header.split() == ["category", "status", "found", "accepted", "unverified", "flagged", "eval", "rejected"]
    assert "…" not in result.stdout.split("found:", 1)[0]


def test_bad_input_gives_one_line_errors_and_exit_1() -> None:
    cases = [
        (["campaign", "run", "--offline", "-c", "maths"], "unknown category 'maths' (did you mean `math`?)", 2),
        (["campaign", "run", "--offline", "-c", " , "], "--categories names no category", 2),
        (["campaign", "status", "no-such-campaign"], "no campaign 'no-such-campaign'", 1),
        (["campaign", "rerun", "no-such-campaign", "math"], "no campaign 'no-such-campaign'", 1),
        (["campaign", "rerun", "no-such-campaign", "cooking"], "unknown category 'cooking'", 2),
        (["campaign", "resume", "no-such-campaign"], "no campaign 'no-such-campaign'", 1),
    ]
    for args, message, code in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == code, (args, result.output)
        assert message in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_rerun_of_a_category_the_campaign_never_searched_is_refused() -> None:
    outcome = json.loads(runner.invoke(app, ["campaign", "run", "--offline", "-c", "math", "--json"]).stdout)
    result = runner.invoke(app, ["campaign", "rerun", outcome["campaign_id"], "tool_use"])
    assert result.exit_code == 1
    assert "did not search 'tool_use'" in result.stderr
    finished = runner.invoke(app, ["campaign", "resume", outcome["campaign_id"]])
    assert finished.exit_code == 1 and "already finished" in finished.stderr


def test_live_board_follows_events_and_fills_in_resumed_branches() -> None:
    from rich.console import Console

    from graph.events import CampaignEvent
    from server.commands.campaign_board import ProgressBoard

    board = ProgressBoard()
    board.on_event(CampaignEvent(campaign_id="c1", kind="campaign_started",
                                 detail={"categories": ["math", "tool_use"]}))
    board.on_event(CampaignEvent(campaign_id="c1", kind="run_started", category="tool_use", status="running"))
    board.on_event(CampaignEvent(campaign_id="c1", kind="run_finished", category="tool_use", status="failed",
                                 detail={"queries": 8, "failed_queries": 8, "candidates": 0, "elapsed_s": 1.5,
                                         "error": "HTTP 429"}))
    board.on_event(CampaignEvent(campaign_id="c1", kind="campaign_finished", status="partial", detail={
        "by_category": {"math": {"status": "succeeded", "candidates": 12}}}))
    console = Console(record=True, width=120)
    console.print(board.render())
    text = console.export_text()
    assert "tool_use" in text and "failed" in text and "HTTP 429" in text and "1.5s" in text
    assert board.rows["math"] == {"status": "succeeded", "candidates": 12}  # finished before a crash, not re-run


def test_ctrl_c_marks_the_campaign_interrupted() -> None:
    import asyncio

    import pytest
    import typer

    from curation.catalog import store
    from graph.events import CampaignEvent
    from server.commands.campaign import drive, opened_catalog

    with opened_catalog() as engine:
        with store.open_session(engine) as session:
            campaign_id = store.create_campaign(session, categories=["math"], offline=True, backends=["offline"]).id

        async def interrupted(engine: object, settings: object, on_event: object) -> None:
            on_event(CampaignEvent(campaign_id=campaign_id, kind="campaign_started"))  # type: ignore[operator]
            await asyncio.sleep(0)
            raise KeyboardInterrupt

        with pytest.raises(typer.Exit) as stopped:
            drive(interrupted, as_json=True)
        assert stopped.value.exit_code == 1
        with store.open_session(engine) as session:
            assert store.get_campaign(session, campaign_id=campaign_id).status == "interrupted"


def test_campaign_list_never_cuts_an_id_on_a_narrow_terminal() -> None:
    ids = [json.loads(runner.invoke(app, ["campaign", "run", "--offline", "-c", c, "--json"]).stdout)["campaign_id"]
           for c in ("math", "tool_use")]
    table = runner.invoke(app, ["campaign", "list"], env={"COLUMNS": "80"}).stdout
    assert all(campaign_id in table for campaign_id in ids), table
    assert "…" not in table.split("\n", 3)[-1].split("│")[1]


def test_resuming_a_campaign_another_process_holds_is_one_error_line() -> None:
    from core.settings import get_settings
    from curation.catalog import store

    engine = store.make_engine(get_settings().resolved_database_url)
    store.upgrade_database(engine)
    with store.open_session(engine) as session:
        store.create_campaign(session, categories=["math"], offline=True, backends=["offline"], campaign_id="held")
        store.set_campaign_status(session, campaign_id="held", status="running")
        store.acquire_lease(session, name=store.campaign_lease("held"), owner="replica-b:7:x", ttl_s=600)
    result = runner.invoke(app, ["campaign", "resume", "held"])
    assert result.exit_code == 1
    assert "campaign held is being worked on elsewhere (replica-b:7:x" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
    with store.open_session(engine) as session:
        assert store.get_campaign(session, campaign_id="held").status == "running"  # left to its holder
        assert store.list_runs(session, campaign_id="held") == []
    engine.dispose()


@pytest.mark.slow
def test_prune_frees_what_campaigns_made_before_threads_were_deleted_left(monkeypatch: pytest.MonkeyPatch) -> None:
    import graph.campaign

    async def keep(saver: object, thread_id: str) -> None:  # the earlier behaviour: every checkpoint kept
        return None

    with monkeypatch.context() as patched:
        patched.setattr(graph.campaign, "forget_thread", keep)
        for _ in range(2):
            ran = runner.invoke(app, ["campaign", "run", "--offline", "-c", "math,tool_use,general_chat"])
            assert ran.exit_code == 0, ran.output
    result = runner.invoke(app, ["campaign", "prune", "--json"])
    assert result.exit_code == 0, result.output
    pruned = json.loads(result.stdout)
    assert pruned["deleted_threads"] == 2 and pruned["kept_unfinished"] == [] and pruned["compacted"] is True
    assert pruned["bytes_after"] < 0.8 * pruned["bytes_before"]
    again = json.loads(runner.invoke(app, ["campaign", "prune", "--json"]).stdout)
    assert again["deleted_threads"] == 0 and again["compacted"] is False
    listed = json.loads(runner.invoke(app, ["campaign", "list", "--json"]).stdout)
    assert [c["status"] for c in listed] == ["succeeded", "succeeded"]  # the campaigns themselves are untouched


@pytest.mark.parametrize("database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_campaign_commands_on_postgres_close_every_connection_they_open(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each command opens an engine on the catalog; a pool it never disposed of would be garbage collected later,
    # its psycopg connections still open (a ResourceWarning, in whatever runs then).
    from core.settings import get_settings

    monkeypatch.setenv("DATAHUNT_DATABASE_URL", database_url)
    get_settings.cache_clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        ran = runner.invoke(app, ["campaign", "run", "--offline", "-c", "math", "--json"])
        assert ran.exit_code == 0, ran.output
        campaign_id = json.loads(ran.stdout)["campaign_id"]
        status = runner.invoke(app, ["campaign", "status", campaign_id, "--json"])
        listed = runner.invoke(app, ["campaign", "list", "--json"])
        pruned = runner.invoke(app, ["campaign", "prune", "--json"])
        missing = runner.invoke(app, ["campaign", "status", "no-such-campaign"])
        gc.collect()
    assert json.loads(status.stdout)["runs"][0]["status"] == "succeeded"
    assert [c["id"] for c in json.loads(listed.stdout)] == [campaign_id]
    assert json.loads(pruned.stdout)["deleted_threads"] == 0
    assert missing.exit_code == 1 and "no campaign 'no-such-campaign'" in missing.stderr
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
