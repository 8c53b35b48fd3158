"""`curate --mix measured`: the arithmetic of the measured quotas (moves only where an interval is clear of
another, within x2 / /2 of the default, at the same budget), the manifest it curates, and the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.measured_value import MeasuredValue
from curation.errors import CurationError
from curation.manifest import Budget, Manifest, MeasuredCategoryValue
from curation.measured_mix import CategoryValue, measured_manifest, measured_quotas
from curation.mixing import quotas
from server.cli import app

MIRROR = Path(__file__).resolve().parents[1] / "data" / "mirror"


def test_without_a_clear_difference_the_measured_mix_is_the_default() -> None:
    default = {"math": 100, "reasoning": 100}
    plan = measured_quotas(default, {"math": 500, "reasoning": 500},
                           {"math": CategoryValue(0.05, -0.1, 0.2), "reasoning": CategoryValue(-0.02, -0.2, 0.15)})
    assert plan.quotas == default and "is the default" in plan.moves[0]
    assert measured_quotas(default, {"math": 500, "reasoning": 500}, {}).quotas == default


def test_rows_move_from_a_clearly_worse_category_to_a_clearly_better_one_within_the_trust_region() -> None:
    default = {"code_review": 100, "math": 100, "general_chat": 100}
    values = {"math": CategoryValue(0.10, 0.04, 0.16), "general_chat": CategoryValue(-0.01, -0.03, 0.01),
              "code_review": CategoryValue(0.02, -0.05, 0.09)}  # overlaps both: neither gives nor takes
    plan = measured_quotas(default, {"code_review": 400, "math": 400, "general_chat": 400}, values)
    # math may double (to 200); general_chat may halve (to 50): 50 rows move, the budget stays 300.
    assert plan.quotas == {"code_review": 100, "math": 150, "general_chat": 50}
    assert sum(plan.quotas.values()) == sum(default.values())
    assert plan.moves == ["50 rows from general_chat (-0.010) to math (+0.100)"]


def test_a_harmful_category_gives_all_its_rows_and_a_receiver_takes_no_more_than_it_has() -> None:
    default = {"math": 100, "tool_use": 100, "reasoning": 100}
    values = {"tool_use": CategoryValue(-0.2, -0.3, -0.1), "math": CategoryValue(0.1, 0.05, 0.15)}
    plan = measured_quotas(default, {"math": 130, "tool_use": 300, "reasoning": 1000}, values)
    # tool_use's 100 rows are freed: math takes what it has (30 more), the rest goes to reasoning (room, unmeasured).
    assert plan.quotas == {"math": 130, "tool_use": 0, "reasoning": 170}
    assert sum(plan.quotas.values()) == 300
    assert plan.moves[0].startswith("tool_use: all 100 rows out")


def test_freed_rows_nobody_can_take_stay_unfilled_and_an_unmoved_shortfall_keeps_its_quota() -> None:
    default = {"math": 100, "tool_use": 100}
    values = {"tool_use": CategoryValue(-0.2, -0.3, -0.1)}
    plan = measured_quotas(default, {"math": 60, "tool_use": 300}, values)
    assert plan.quotas == {"math": 100, "tool_use": 0}  # math is unmoved: its default (100, 40 unmet) stays
    assert plan.moves[-1] == "100 rows of the budget stay unfilled (no category has more rows)"


def test_a_budget_with_measured_values_moves_the_quotas_of_the_mix() -> None:
    budget = Budget(total=300, measured={"math": MeasuredCategoryValue(per_10k=0.1, low=0.05, high=0.15),
                                         "general_chat": MeasuredCategoryValue(per_10k=-0.01, low=-0.03, high=0.0)})
    available = {"math": 400, "general_chat": 400, "reasoning": 400}
    assert quotas(Budget(total=300), available) == {"general_chat": 100, "math": 100, "reasoning": 100}
    assert quotas(budget, available) == {"general_chat": 50, "math": 150, "reasoning": 100}


def _value(kind: str, name: str, per_10k: float, low: float | None, high: float | None) -> MeasuredValue:
    return MeasuredValue.model_validate({
        "kind": kind, "name": name, "op": "remove", "budget": 1000, "rows_swapped": 100, "seeds": 2,
        "noise_dof": 3, "mean": {"delta": per_10k / 100, "per_10k": per_10k, "low": low, "high": high},
        "run": "value run r (v)"})


def test_the_measured_manifest_carries_the_values_and_leaves_out_a_clearly_harmful_source() -> None:
    manifest = Manifest.model_validate({"schema_version": 1, "budget": {"total": 100}, "sources": [
        {"hub_id": "org/good", "category": "math"}, {"hub_id": "org/bad", "category": "math"},
        {"hub_id": "org/unsure", "category": "math"}]})
    values = [_value("source", "org/bad", -0.3, -0.5, -0.1), _value("source", "org/unsure", -0.3, -0.9, 0.3),
              _value("category", "math", 0.2, 0.1, 0.3), _value("category", "not-a-category", 1.0, 0.5, 1.5)]
    measured, notes = measured_manifest(manifest, values)
    assert [s.hub_id for s in measured.sources] == ["org/good", "org/unsure"]
    assert list(measured.budget.measured) == ["math"] and measured.budget.measured["math"].run == "value run r (v)"
    assert notes[0].startswith("left out org/bad")
    with pytest.raises(CurationError, match="budget total"):
        measured_manifest(manifest.model_copy(update={"budget": Budget()}), values)
    with pytest.raises(CurationError, match="no measured value applies"):
        measured_manifest(manifest, [_value("source", "org/other", 0.1, 0.0, 0.2)])


@pytest.mark.slow
def test_curate_mix_measured_from_a_value_file(tmp_path: Path) -> None:
    runner = CliRunner()
    manifest_path = tmp_path / "manifest.json"
    assert runner.invoke(app, ["manifest", "from-mirror", str(MIRROR), "--out", str(manifest_path)]).exit_code == 0
    manifest = json.loads(manifest_path.read_text())
    manifest["sources"] = [dict(s, max_rows=40) for s in manifest["sources"]
                           if s["hub_id"] in {"openai/gsm8k", "tatsu-lab/alpaca"}]
    manifest["eval_sets"] = []
    manifest["budget"] = {"total": 40, "shares": {}, "seed": 0}
    manifest_path.write_text(json.dumps(manifest))
    categories = {s["hub_id"]: s["category"] for s in manifest["sources"]}
    math, chat = categories["openai/gsm8k"], categories["tatsu-lab/alpaca"]
    values = tmp_path / "value.json"
    values.write_text(json.dumps({"values": [_value("category", math, 0.2, 0.1, 0.3).model_dump(mode="json"),
                                             _value("category", chat, -0.01, -0.05, 0.0).model_dump(mode="json")]}))
    default = runner.invoke(app, ["curate", "--manifest", str(manifest_path), "--out", str(tmp_path / "d")])
    measured = runner.invoke(app, ["curate", "--manifest", str(manifest_path), "--out", str(tmp_path / "m"),
                                   "--mix", "measured", "--values", str(values)])
    assert default.exit_code == 0 and measured.exit_code == 0, measured.output
    per = {k: json.loads((tmp_path / k / "report.json").read_text())["per_category"] for k in ("d", "m")}
    assert (per["d"][math]["selected"], per["d"][chat]["selected"]) == (20, 20)
    assert (per["m"][math]["selected"], per["m"][chat]["selected"]) == (30, 10)  # x2 cap 40, /2 floor 10
    assert "measured mix: 10 rows from" in measured.output
    saved = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert saved["budget"]["measured"][math]["per_10k"] == 0.2
    wrong = runner.invoke(app, ["curate", "--manifest", str(manifest_path), "--out", str(tmp_path / "x"),
                                "--values", str(values)])
    assert wrong.exit_code == 2 and "--values goes with --mix measured" in wrong.output
