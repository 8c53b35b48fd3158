"""`datahunt campaign run|rerun` exit by the campaign's outcome: 0 only when every category succeeded, 1 on a
`partial` or `failed` campaign with one `error:` line naming the categories that did not succeed and the
`campaign rerun` command for each (the README promises it). The subagents are fakes, one of them broken."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from core.candidates import Candidate, DatasetMetadata, Deliverable, Evidence
from core.types import Category
from server.cli import app

runner = CliRunner()
BROKEN: set[str] = set()


async def fake_subagent(category: Category, *, backends: Any, llm: Any = None, **_: Any) -> Deliverable:
    if category.value in BROKEN:
        raise RuntimeError(f"{category.value}: backend timed out")
    candidate = Candidate(hub_id=f"acme/{category.value.replace('_', '-')}", title=f"{category.value} set",
                          categories=[category], relevance=0.9, format_guess="sharegpt",
                          metadata=DatasetMetadata(license="apache-2.0", num_rows=20_000, features=["conversations"]),
                          evidence=[Evidence(backend="offline", query=category.value, rank=1, score=2.0)])
    return Deliverable(category=category, candidates=[candidate], offline=True)


@pytest.fixture(autouse=True)
def fake_agents(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("graph.campaign.run_subagent", fake_subagent)
    BROKEN.clear()


def error_line(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    return errors[0]


def test_a_campaign_whose_categories_all_succeeded_exits_0_with_a_next_line() -> None:
    result = runner.invoke(app, ["campaign", "run", "--offline", "-c", "math,tool_use"])
    assert result.exit_code == 0, result.output
    assert "next: review with `datahunt serve`" in result.stdout and "error:" not in result.stderr


def test_a_partial_campaign_exits_1_naming_the_failed_category_and_its_rerun() -> None:
    BROKEN.add("tool_use")
    result = runner.invoke(app, ["campaign", "run", "--offline", "-c", "math,tool_use", "--json"])
    assert result.exit_code == 1, result.output
    outcome = json.loads(result.stdout)  # the JSON result is still printed whole
    assert outcome["status"] == "partial"
    line = error_line(result.stderr)
    campaign = outcome["campaign_id"]
    assert f"campaign {campaign} ended partial: tool_use (failed) did not succeed" in line
    assert f"`datahunt campaign rerun {campaign} tool_use`" in line and "math" not in line.split("did not")[0][-40:]

    BROKEN.clear()  # the backend is back: the re-run completes the campaign, and says so with exit 0
    rerun = runner.invoke(app, ["campaign", "rerun", campaign, "tool_use"])
    assert rerun.exit_code == 0, rerun.output
    assert "next: review" in rerun.stdout


def test_a_failed_campaign_exits_1_with_a_rerun_command_per_category_and_no_review_hint() -> None:
    BROKEN.update({"math", "tool_use"})
    result = runner.invoke(app, ["campaign", "run", "--offline", "-c", "math,tool_use"])
    assert result.exit_code == 1, result.output
    line = error_line(result.stderr)
    assert "ended failed: tool_use (failed), math (failed) did not succeed" in line
    assert line.count("`datahunt campaign rerun ") == 2
    assert "next: review" not in result.stdout  # nothing to review: the line says what to do instead
