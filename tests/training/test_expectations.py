"""The draft carries its expectations: export writes what it knows, `eval-accept --record` what it measured, a
rewrite for the other engine keeps the measurements, and the reference a watcher uses prefers held-out sets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.draft_expectations import (
    DraftExpectations,
    ExpectationsError,
    RoundCost,
    SetAcceptance,
    read_expectations,
)
from server.cli import app
from training.export import convert_export


def test_export_writes_the_engine_and_layer_ids_and_nothing_measured(tiny_draft: Path) -> None:
    expectations = read_expectations(tiny_draft)
    assert expectations is not None and not expectations.measured and expectations.reference() is None
    assert expectations.engine == "sglang"
    assert expectations.aux_layer_ids_input_of_layer == [1, 2, 3]
    assert expectations.aux_layer_ids == json.loads((tiny_draft / "config.json").read_text())["eagle_config"][
        "eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]


def test_record_measures_each_set_and_the_round_cost_and_a_rewrite_keeps_them(
        tiny_draft: Path, llama_dir: Path, regenerated_data: dict[str, Path], tmp_path: Path) -> None:
    draft = shutil.copytree(tiny_draft, tmp_path / "draft")
    rows = [json.loads(line) for line in regenerated_data["heldout"].read_text().splitlines()][:6]
    prompts = tmp_path / "heldout.jsonl"
    prompts.write_text("".join(json.dumps({"category": "code" if i < 2 else "chat",
                                           "conversations": r["conversations"]}) + "\n" for i, r in enumerate(rows)))
    result = CliRunner().invoke(app, ["eval-accept", "--draft", str(draft), "--target", str(llama_dir), "--prompts",
                                      str(prompts), "--steps", "3", "--max-new", "8", "--record", "--record-as",
                                      "heldout"])
    assert result.exit_code == 0, result.output
    assert "recorded 2 heldout set(s) (chat, code) and 1 round cost(s)" in result.stderr
    pooled = json.loads(result.stdout.strip().splitlines()[-1])
    recorded = read_expectations(draft)
    assert recorded is not None and sorted(recorded.sets) == ["chat", "code"]
    chat, code = recorded.sets["chat"], recorded.sets["code"]
    assert (chat.prompts, code.prompts, chat.label, chat.k) == (4, 2, "heldout", 3)
    assert chat.rounds + code.rounds == pooled["rounds"] and chat.tokens + code.tokens == pooled["tokens"]
    reference = recorded.reference()
    assert reference is not None and reference.label == "heldout"
    assert reference.accept_length == pytest.approx(pooled["accept_length"], abs=1e-4)
    assert reference.per_position_accept == pytest.approx(pooled["position_rates"], abs=1e-4)
    cost = recorded.round_cost(batch=1)
    assert cost is not None and (cost.batch, cost.k) == (1, 3)
    assert cost.break_even_accept_length == pytest.approx(pooled["break_even_accept_length"], abs=1e-3)
    vllm = convert_export(draft, tmp_path / "vllm", "vllm")
    moved = read_expectations(vllm)
    assert moved is not None and moved.engine == "vllm" and moved.aux_layer_ids == [1, 2, 3]
    assert moved.sets == recorded.sets and moved.round_costs == recorded.round_costs


def test_record_is_local_and_greedy(tiny_draft: Path, tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"text": "w1 w2"}\n')
    for extra in (["--server", "http://127.0.0.1:9"], ["--temperature", "0.7"], ["--record-as", "train"]):
        refused = CliRunner().invoke(app, ["eval-accept", "--draft", str(tiny_draft), "--prompts", str(prompts),
                                           "--record", *extra])
        assert refused.exit_code == 2 and refused.output.startswith("error: --record measures locally")


def _set(label: str, rounds: int, accepted: list[int]) -> SetAcceptance:
    return SetAcceptance(label=label, prompts_file="p.jsonl", prompts_sha256="0" * 64, prompts=4, k=2, rounds=rounds,
                         tokens=rounds + sum(accepted), attempted=[rounds, accepted[0]], accepted=accepted)


def test_the_reference_pools_held_out_sets_first_and_the_nearest_batch_gives_the_break_even(tmp_path: Path) -> None:
    expectations = DraftExpectations(
        engine="vllm", aux_layer_ids=[2, 15, 27], aux_layer_ids_input_of_layer=[2, 15, 27],
        sets={"gsm8k": _set("eval", 100, [90, 80]), "ours": _set("heldout", 300, [150, 75]),
              "more": _set("heldout", 100, [70, 35])},
        round_costs=[RoundCost(batch=1, k=2, device="cuda", round_cost_target_steps=1.3,
                               break_even_accept_length=1.3),
                     RoundCost(batch=32, k=2, device="cuda", round_cost_target_steps=1.9,
                               break_even_accept_length=1.9)])
    reference = expectations.reference()
    assert reference is not None and reference.sets == ["more", "ours"]
    assert reference.accept_length == pytest.approx(1 + (150 + 75 + 70 + 35) / 400)
    assert reference.per_position_accept == pytest.approx([220 / 400, 110 / 220])
    assert expectations.round_cost(4).batch == 1 and expectations.round_cost(24).batch == 32  # type: ignore[union-attr]
    assert expectations.round_cost(None).batch == 1  # type: ignore[union-attr]
    (tmp_path / "expectations.json").write_text('{"engine": "vllm"}')
    with pytest.raises(ExpectationsError, match="is not a draft's expectations file"):
        read_expectations(tmp_path)
