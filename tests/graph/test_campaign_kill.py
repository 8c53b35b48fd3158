"""Killing the process mid-campaign and running it again resumes from the checkpoint instead of starting over."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from campaign_fakes import FakeIndex, ScriptedSubagent, stored_branch_results

from core.settings import get_settings
from core.types import Category
from curation.catalog import store
from graph.campaign import run_campaign, unfinished_campaigns

HERE = Path(__file__).resolve().parent
SLOW = ["pull_requests", "general_chat", "math"]


def wait_for(predicate: object, *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_killed_campaign_resumes_without_redoing_finished_categories(database_url: str, tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    log.touch()
    engine = store.make_engine(database_url)
    store.upgrade_database(engine)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent.parent)])}
    output = tmp_path / "child.out"
    with output.open("wb") as sink:
        child = subprocess.Popen(
            [sys.executable, str(HERE / "kill_campaign.py"), database_url, "killme", str(log), ",".join(SLOW)],
            env=env, stdout=sink, stderr=subprocess.STDOUT,
        )
        try:
            fast = len(Category) - len(SLOW)
            # Kill only once every branch has started (the slow ones are then mid-search) and the fast ones
            # have finished and reached the checkpoint; under load a slow branch can start after the fast ones end.
            wait_for(lambda: log.read_text().count("start ") == len(Category) and log.read_text().count("done ") == fast
                     and stored_branch_results(engine, "killme") == fast,
                     timeout_s=60, what="every branch to start and the fast ones to finish and reach the checkpoint")
            assert child.poll() is None, output.read_text()
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL
    first_calls = [line.split()[1] for line in log.read_text().splitlines() if line.startswith("start ")]
    assert sorted(first_calls) == sorted(c.value for c in Category)  # all ten had started
    assert unfinished_campaigns(engine=engine) == ["killme"]

    again = ScriptedSubagent()
    asyncio.run(run_campaign(engine=engine, settings=get_settings(), campaign_id="killme", subagent=again,
                             backends=[FakeIndex()]))
    assert sorted(again.calls) == sorted(SLOW)  # only the branches the kill interrupted ran again
    with store.open_session(engine) as session:
        assert store.get_campaign(session, campaign_id="killme").status == "succeeded"
        runs = store.list_runs(session, campaign_id="killme", latest_only=False)
        summary = store.catalog_summary(session, campaign_id="killme")
        by_category = {c.value: [r.status for r in runs if r.category == c.value] for c in Category}
    assert all(counts["total"] == 3 for counts in summary["by_category"].values())
    for category, statuses in by_category.items():
        assert statuses == (["failed", "succeeded"] if category in SLOW else ["succeeded"]), category
    engine.dispose()
