"""`datahunt gate` on the CPU: the rule (better overall by the margin; a set regressing; position 0 regressing),
then the command end to end with tiny drafts (a trained one against a random one, both ways), its files in the
candidate's folder, and the serving commands' warning about a draft without a passed gate."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from core.gate_verdict import GateRule, read_gate_verdict
from server.cli import app
from training.curve.evaluate import SetScore
from training.gate import GateError, gate_warning, judge_gate, pool

RULE = GateRule(margin=0.02, tolerance=0.05)


def _score(al: float, p0: float, rounds: int = 100, prompts: int = 10) -> SetScore:
    return SetScore(prompts=prompts, accept_length=al, rounds=rounds, tokens=round(al * rounds),
                    per_position_accept=[p0, 0.5])


def test_better_overall_and_nowhere_worse_passes() -> None:
    deployed = {"code": _score(2.0, 0.60), "chat": _score(1.8, 0.55)}
    candidate = {"code": _score(2.2, 0.66), "chat": _score(1.85, 0.56)}
    passed, reasons, overall, rows = judge_gate(candidate, deployed, RULE)
    assert passed and reasons == []
    assert overall.name == "overall" and overall.accept_length_change == pytest.approx(0.0658, abs=1e-3)
    assert [r.name for r in rows] == ["chat", "code"]


def test_a_gain_below_the_margin_fails() -> None:
    deployed = {"all": _score(2.0, 0.6)}
    passed, reasons, _, _ = judge_gate({"all": _score(2.03, 0.6)}, deployed, RULE)
    assert not passed and "not better by the required 2.0%" in reasons[0]


def test_a_category_regressing_fails_though_the_mean_rises() -> None:
    deployed = {"code": _score(2.0, 0.60), "math": _score(2.0, 0.60)}
    candidate = {"code": _score(2.6, 0.70), "math": _score(1.8, 0.60)}  # overall +10 %, math -10 %
    passed, reasons, overall, _ = judge_gate(candidate, deployed, RULE)
    assert overall.accept_length_change > 0.02
    assert not passed and reasons == [
        "set math: acceptance length 1.800 vs deployed 2.000 (-10.0%) regresses beyond the 5.0% tolerance"]


def test_position0_regressing_fails_though_acceptance_length_rises() -> None:
    # The field's case: a fine-tune on production data lifts the deeper positions while position 0 drops.
    deployed = {"chat": _score(1.9, 0.71)}
    candidate = {"chat": _score(2.0, 0.46)}
    passed, reasons, _, _ = judge_gate(candidate, deployed, RULE)
    assert not passed
    assert any(r.startswith("pooled position-0 acceptance 0.460 vs deployed 0.710") for r in reasons)
    assert any(r.startswith("set chat position-0 acceptance") for r in reasons)


def test_pooling_weights_sets_by_rounds_and_sets_must_match() -> None:
    pooled = pool({"a": _score(2.0, 0.8, rounds=300), "b": _score(3.0, 0.4, rounds=100)})
    assert pooled.accept_length == pytest.approx(2.25) and pooled.per_position_accept == [pytest.approx(0.7)]
    with pytest.raises(GateError, match="different sets"):
        judge_gate({"a": _score(2, 0.5)}, {"b": _score(2, 0.5)}, RULE)


@pytest.fixture(scope="module")
def gate_inputs(tmp_path_factory: pytest.TempPathFactory, trained_run: Any, tiny_draft: Path,
                regenerated_data: dict[str, Path]) -> dict[str, Path]:
    """Copies of the trained and the random draft (the gate writes into the candidate), and held-out prompts in
    two sets."""
    folder = tmp_path_factory.mktemp("gate")
    trained = shutil.copytree(trained_run[1].export_dir, folder / "trained")
    random = shutil.copytree(tiny_draft, folder / "random")
    held = [json.loads(line) for line in regenerated_data["heldout"].read_text().splitlines()]
    prompts = folder / "heldout.jsonl"
    prompts.write_text("".join(json.dumps({"id": r["id"], "set": "even" if i % 2 == 0 else "odd",
                                           "conversations": r["conversations"]}) + "\n" for i, r in enumerate(held)))
    return {"trained": trained, "random": random, "prompts": prompts}


def _gate(inputs: dict[str, Path], llama_dir: Path, candidate: str, deployed: str) -> Any:
    return CliRunner().invoke(app, ["gate", "--candidate", str(inputs[candidate]), "--deployed", str(inputs[deployed]),
                                    "--prompts", str(inputs["prompts"]), "--target", str(llama_dir), "--k", "3",
                                    "--max-new", "8", "--device", "cpu"])


def test_gate_passes_a_trained_draft_over_a_random_one_and_the_serving_commands_stop_warning(
        gate_inputs: dict[str, Path], llama_dir: Path, tmp_path: Path) -> None:
    assert "has no gate verdict" in (gate_warning(gate_inputs["trained"]) or "")
    result = _gate(gate_inputs, llama_dir, "trained", "random")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["passed"]
    assert summary["overall"]["candidate_accept_length"] > summary["overall"]["deployed_accept_length"]
    verdict = read_gate_verdict(gate_inputs["trained"])
    assert verdict is not None and verdict.passed and [s.name for s in verdict.sets] == ["even", "odd"]
    assert "| overall |" in (gate_inputs["trained"] / "gate.md").read_text()
    assert gate_warning(gate_inputs["trained"]) is None
    # New weights in the folder: the verdict no longer vouches for them.
    changed = shutil.copytree(gate_inputs["trained"], tmp_path / "changed")
    (changed / "model.safetensors").write_bytes((changed / "model.safetensors").read_bytes() + b" ")
    assert "other weights" in (gate_warning(changed) or "")


def test_gate_fails_the_random_draft_against_the_trained_one(gate_inputs: dict[str, Path], llama_dir: Path) -> None:
    runner = CliRunner()
    before = runner.invoke(app, ["sglang-command", "--target", str(llama_dir), "--draft", str(gate_inputs["random"])])
    assert before.exit_code == 0 and "has no gate verdict" in before.stderr, before.output
    assert " -m sglang.launch_server " in before.stdout.strip().splitlines()[-1]
    result = _gate(gate_inputs, llama_dir, "random", "trained")
    assert result.exit_code == 1 and result.stdout.strip(), result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert not summary["passed"] and any("not better by the required" in r for r in summary["reasons"])
    assert "# Gate: FAILED" in (gate_inputs["random"] / "gate.md").read_text()
    warned = runner.invoke(app, ["sglang-command", "--target", str(llama_dir), "--draft", str(gate_inputs["random"])])
    assert warned.exit_code == 0 and "FAILED its gate" in warned.stderr


def test_gate_refuses_one_folder_twice_and_a_missing_prompts_file(gate_inputs: dict[str, Path],
                                                                  llama_dir: Path) -> None:
    same = _gate({**gate_inputs, "other": gate_inputs["random"]}, llama_dir, "random", "other")
    assert same.exit_code == 1 and same.output.strip() == "error: --candidate and --deployed are the same folder"
    missing = CliRunner().invoke(app, ["gate", "--candidate", str(gate_inputs["random"]), "--deployed",
                                       str(gate_inputs["trained"]), "--prompts", "/nonexistent.jsonl", "--target",
                                       str(llama_dir)])
    assert missing.exit_code == 2 and missing.output.startswith("error: ")
