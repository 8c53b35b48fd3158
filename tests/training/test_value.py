"""`datahunt value`: the swap arithmetic of the arms, the value and its interval from hand-made scores, and a
toy run end to end on the CPU (two seeds of the default mix, two sources) into value.json, the results file and
the catalog (`catalog list --json`)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.measured_value import MeasuredValue, ValueEstimate, describe_value
from server.cli import app
from training.value.plan import (
    Pool,
    ValueRunError,
    arm_rows,
    default_rows,
    default_units,
    make_value_settings,
)
from training.value.results import merge_results
from training.value.stats import estimate, pooled_noise, t_975, unit_values


def _pool(units: dict[str, int]) -> Pool:
    ids = [f"{u}-{i}" for u, n in units.items() for i in range(n)]
    return Pool(ids=ids, rows={i: [] for i in ids}, unit={i: i.rsplit("-", 1)[0] for i in ids})


# --- The arms' rows ---------------------------------------------------------------------------------------------
def test_removing_a_unit_swaps_exactly_its_rows_for_others_at_the_same_budget() -> None:
    pool = _pool({"a": 40, "b": 40, "c": 40})
    base = default_rows(pool, 30, seed=3)
    arm, swapped = arm_rows(pool, 30, 3, "a", "remove", 0)
    assert len(arm) == 30 and len(set(arm)) == 30
    assert swapped == sum(pool.unit[r] == "a" for r in base) > 0
    assert not any(pool.unit[r] == "a" for r in arm)
    assert set(base) - set(arm) == {r for r in base if pool.unit[r] == "a"}  # every other row of the default stays


def test_adding_a_unit_swaps_rows_of_it_in_for_the_defaults_last_other_rows() -> None:
    pool = _pool({"a": 40, "b": 40})
    base = default_rows(pool, 20, seed=0)
    arm, swapped = arm_rows(pool, 20, 0, "a", "add", 5)
    assert swapped == 5 and len(arm) == 20
    assert sum(pool.unit[r] == "a" for r in arm) == sum(pool.unit[r] == "a" for r in base) + 5
    others = [r for r in base if pool.unit[r] != "a"]
    assert set(base) - set(arm) == set(others[-5:])


def test_a_swap_the_pool_cannot_fill_is_refused_in_words() -> None:
    pool = _pool({"a": 25, "b": 5})
    with pytest.raises(ValueRunError, match="other rows"):
        arm_rows(pool, 28, 0, "a", "remove", 0)
    with pytest.raises(ValueRunError, match="more than the 30 rows"):
        default_rows(pool, 31, 0)


def test_default_units_are_the_labelled_ones_above_the_minimum_share(tmp_path: Path) -> None:
    pool = _pool({"a": 50, "b": 48, "(unlabelled)": 30, "tiny": 1})
    settings = make_value_settings({"data": tmp_path, "target": tmp_path, "eval": tmp_path, "out": tmp_path,
                                    "budget": 129, "min_share": 0.05})
    assert default_units(pool, settings) == ["a", "b"]
    with pytest.raises(ValueRunError, match="not in the pool"):
        default_units(pool, settings.model_copy(update={"units": ["nope"]}))


# --- Values and intervals ---------------------------------------------------------------------------------------
def test_pooled_noise_and_the_t_quantile() -> None:
    sd, dof = pooled_noise([[2.0, 2.2], [3.0], [1.0, 1.1, 1.2]])
    assert dof == 3  # (2 - 1) + (3 - 1); a single measurement adds nothing
    assert sd == pytest.approx(math.sqrt((0.02 + 0.02) / 3))
    assert pooled_noise([[1.0], [2.0]]) == (0.0, 0)
    assert t_975(1) == pytest.approx(12.706) and t_975(2) == pytest.approx(4.303) and t_975(100) == 1.96


def test_an_estimate_scales_to_10k_rows_and_widens_with_the_noise() -> None:
    e = estimate([0.03], noise=0.01, dof=1, rows_swapped=2_000)
    assert e.delta == 0.03 and e.per_10k == pytest.approx(0.15)
    half = 12.706 * 0.01 * math.sqrt(2) * 5
    assert e.low == pytest.approx(0.15 - half, abs=1e-4) and e.high == pytest.approx(0.15 + half, abs=1e-4)
    assert not e.clear  # one degree of freedom: the interval spans zero
    assert estimate([0.03], noise=0.0, dof=0, rows_swapped=2_000).low is None


def test_unit_values_pair_each_arm_with_its_seeds_default_and_sign_by_the_operation() -> None:
    scores = {"d0": {"x": 2.0, "y": 3.0, "mean": 2.5}, "d1": {"x": 2.1, "y": 3.1, "mean": 2.6},
              "a0": {"x": 1.8, "y": 3.0, "mean": 2.4}, "b0": {"x": 2.2, "y": 3.2, "mean": 2.7}}
    values = unit_values(kind="source", op="remove", budget=10_000, run="r", default={0: "d0", 1: "d1"},
                         arms={"org/a": {0: ("a0", 1_000)}, "org/b": {0: ("b0", 5_000)},
                               "org/c": {0: ("c0", 100)}}, scores=scores)
    by = {v.name: v for v in values}
    assert set(by) == {"org/a", "org/b"}  # org/c's draft is not measured yet
    a = by["org/a"]
    assert a.per_set["x"].delta == pytest.approx(0.2) and a.per_set["x"].per_10k == pytest.approx(2.0)
    assert a.mean.delta == pytest.approx(0.1) and a.noise_dof == 1 and a.seeds == 1
    assert by["org/b"].mean.delta == pytest.approx(-0.2) and by["org/b"].mean.per_10k == pytest.approx(-0.4)
    added = unit_values(kind="category", op="add", budget=10_000, run="r", default={0: "d0"},
                        arms={"math": {0: ("b0", 5_000)}}, scores=scores)
    assert added[0].mean.delta == pytest.approx(0.2) and added[0].mean.low is None  # one seed: no noise measured


def test_the_reviewers_line_names_the_set_the_unit_moves_most() -> None:
    value = MeasuredValue(kind="source", name="org/code", op="remove", budget=16_000, rows_swapped=1_600, seeds=1,
                          noise_dof=2, mean=ValueEstimate(delta=0.002, per_10k=0.0125, low=-0.01, high=0.035),
                          per_set={"humaneval": ValueEstimate(delta=0.01, per_10k=0.0625, low=0.01, high=0.11),
                                   "alpaca": ValueEstimate(delta=-0.001, per_10k=-0.006)}, run="r")
    assert describe_value(value) == ("measured +0.06 AL per 10K rows on humaneval (95%: +0.01 to +0.11; mean "
                                     "+0.01)")


def test_results_merge_replaces_same_keys_and_keeps_the_rest() -> None:
    existing = {"points": [{"mix": "a", "samples": 48_000, "seed": None, "mean_accept_length": 2.8},
                           {"mix": "default", "samples": 100, "seed": 0, "mean_accept_length": 1.0}],
                "values": [{"kind": "source", "name": "x", "op": "remove", "budget": 100, "mean": 1}],
                "note": "kept"}
    new = {"points": [{"mix": "default", "samples": 100, "seed": 0, "mean_accept_length": 1.5},
                      {"mix": "remove:x", "samples": 100, "seed": 0, "mean_accept_length": 1.2}],
           "values": [{"kind": "source", "name": "x", "op": "remove", "budget": 100, "mean": 2}]}
    merged = merge_results(existing, new)
    assert [p["mean_accept_length"] for p in merged["points"]] == [2.8, 1.5, 1.2]
    assert merged["values"] == new["values"] and merged["note"] == "kept"


# --- End to end at toy size -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def value_inputs(tmp_path_factory: pytest.TempPathFactory, regenerated_data: dict[str, Path]) -> dict[str, Path]:
    """A pool of three sources: two answered by the target greedily, one with shuffled answers (noise), each row
    labelled as regeneration labels it; and eval prompts in two sets."""
    folder = tmp_path_factory.mktemp("value_inputs")
    rows = [json.loads(line) for line in regenerated_data["train"].read_text().splitlines()]
    rng = random.Random(5)
    out = []
    for i, row in enumerate(rows[:240]):
        source, category = (("acme/greedy-a", "math"), ("acme/greedy-b", "reasoning"),
                            ("acme/noise", "general_chat"))[i % 3]
        turns = row["conversations"]
        if source == "acme/noise":
            words = turns[1]["content"].split()
            rng.shuffle(words)
            turns = [turns[0], {"role": "assistant", "content": " ".join(words)}]
        out.append({"id": row["id"], "conversations": turns,
                    "meta": {"source": {"dataset": source, "row": i}, "category": category}})
    pool = folder / "regenerated.jsonl"
    pool.write_text("".join(json.dumps(r) + "\n" for r in out))
    held = [json.loads(line) for line in regenerated_data["heldout"].read_text().splitlines()]
    evals = folder / "eval.jsonl"
    evals.write_text("".join(json.dumps({"id": r["id"], "set": "even" if i % 2 == 0 else "odd",
                                         "conversations": r["conversations"]}) + "\n" for i, r in enumerate(held)))
    mine = folder / "mine.jsonl"
    mine.write_text("".join(json.dumps({"id": r["id"], "prompt": r["conversations"][0]["content"]}) + "\n"
                            for r in held[:4]))
    return {"pool": pool, "eval": evals, "mine": mine}


TOY = ["--epochs", "2", "--train", "batch_size=8", "--train", "ttt_steps=2", "--train", "draft_vocab_size=150",
       "--train", "lr=3e-3", "--max-new", "8", "--k", "3", "--device", "cpu"]


def test_a_toy_value_run_end_to_end_into_the_catalog_and_the_results_file(
        tmp_path: Path, llama_dir: Path, value_inputs: dict[str, Path]) -> None:
    out, results = tmp_path / "value", tmp_path / "docs" / "data_value.json"
    results.parent.mkdir()
    results.write_text(json.dumps({"points": [{"mix": "six-answers", "samples": 48_000, "seed": None}],
                                   "values": []}))
    command = ["value", "--data", str(value_inputs["pool"]), "--target", str(llama_dir), "--eval",
               str(value_inputs["eval"]), "--user-prompts", str(value_inputs["mine"]), "--out", str(out),
               "--budget", "60", "--seeds", "0", "1", "--unit", "acme/greedy-a", "--unit", "acme/noise",
               "--results", str(results), *TOY]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "value.json").read_text())
    assert doc["complete"] and [d["name"] for d in doc["drafts"]] == [
        "default_s0", "default_s1", "remove_acme--greedy-a_s0", "remove_acme--noise_s0"]
    for draft in doc["drafts"]:
        assert draft["samples"] == 60 and set(draft["sets"]) == {"even", "odd", "user"}
        assert draft["stats"]["steps"] == 16 and len(draft["draft_sha256"]) == 64 and draft["device"] == "cpu"
    values = {v["name"]: MeasuredValue.model_validate(v) for v in doc["values"]}
    assert set(values) == {"acme/greedy-a", "acme/noise"}
    noise, greedy = values["acme/noise"], values["acme/greedy-a"]
    assert noise.rows_swapped > 10 and noise.noise_dof == 1 and noise.mean.low is not None
    # Shuffled answers are worth less to the draft than the target's own: swapping them out helps more.
    assert noise.mean.delta < greedy.mean.delta, (noise.mean, greedy.mean)
    summary = (out / "value.md").read_text()
    assert "| default | 1 |" in summary and "- acme/noise: measured " in summary
    # The results file: the other experiment's point kept, this run's four points and two values added.
    written = json.loads(results.read_text())
    assert [p["mix"] for p in written["points"]] == ["six-answers", "default", "default", "remove:acme/greedy-a",
                                                     "remove:acme/noise"]
    point = written["points"][1]
    assert set(point) >= {"samples", "mix", "per_set", "mean_accept_length", "draft_sha256", "device", "command"}
    assert point["command"].startswith("datahunt value ") and "--budget 60" in point["command"]
    assert {v["name"] for v in written["values"]} == {"acme/greedy-a", "acme/noise"}
    # The catalog: `catalog list --json` of an entry of that source shows its value.
    _seed_entry("acme/noise")
    listed = json.loads(CliRunner().invoke(app, ["catalog", "list", "--json"]).stdout)
    shown = {e["hub_id"]: e["measured"] for e in listed}
    assert shown["acme/noise"][0]["name"] == "acme/noise" and shown["acme/noise"][0]["run"] == noise.run
    assert shown["acme/noise"][0]["text"].startswith("measured ")
    assert "AL per 10K rows on " in shown["acme/noise"][0]["text"]
    # A second run of the same command trains nothing and writes the same values.
    again = CliRunner().invoke(app, command)
    assert again.exit_code == 0 and again.stderr.count("already measured, skipped") == 4


def _seed_entry(hub_id: str) -> None:
    from core.settings import get_settings
    from curation.catalog import store

    engine = store.make_engine(get_settings().resolved_database_url)
    store.upgrade_database(engine)
    with store.open_session(engine) as session:
        campaign = store.create_campaign(session, categories=["general_chat"], offline=True, backends=["offline"])
        run = store.start_run(session, campaign_id=campaign.id, category="general_chat")
        assert run.id is not None
        record = store.add_candidate(session, campaign_id=campaign.id, run_id=run.id, category="general_chat",
                                     candidate={"hub_id": hub_id, "relevance": 0.5})
        store.upsert_entry(session, candidate=record, decision="accept", reasons=[])
    engine.dispose()


def test_bad_value_input_is_one_line(tmp_path: Path, llama_dir: Path, value_inputs: dict[str, Path]) -> None:
    base = ["value", "--data", str(value_inputs["pool"]), "--target", str(llama_dir), "--eval",
            str(value_inputs["eval"]), "--out", str(tmp_path / "v")]
    too_big = CliRunner().invoke(app, [*base, "--budget", "100000", *TOY])
    assert too_big.exit_code != 0 and "more than the 240 rows" in too_big.stderr
    unknown = CliRunner().invoke(app, [*base, "--budget", "30", "--unit", "acme/none", *TOY])
    assert unknown.exit_code != 0 and "not in the pool" in unknown.stderr and "Traceback" not in unknown.output
    seeds = CliRunner().invoke(app, [*base, "--budget", "30", "--seeds", "0", "--arm-seeds", "2", *TOY])
    assert seeds.exit_code != 0 and "--arm-seeds 2" in seeds.stderr


def test_the_measured_mix_is_trained_against_the_default_at_the_same_budget(
        tmp_path: Path, llama_dir: Path, value_inputs: dict[str, Path]) -> None:
    """Category values (math clearly above general_chat) choose the mix; both mixes train at both seeds and the
    comparison says by how much the measured one moved the AL, with its interval."""
    def value(name: str, per_10k: float, low: float, high: float) -> dict[str, object]:
        return {"kind": "category", "name": name, "op": "remove", "budget": 60, "rows_swapped": 20, "seeds": 2,
                "noise_dof": 3, "mean": {"delta": per_10k / 500, "per_10k": per_10k, "low": low, "high": high},
                "run": "value run hand (made)"}
    values = tmp_path / "values.json"
    values.write_text(json.dumps({"values": [value("math", 0.5, 0.2, 0.8), value("general_chat", -0.3, -0.6, 0.0)]}))
    out = tmp_path / "mix"
    result = CliRunner().invoke(app, [
        "value", "--data", str(value_inputs["pool"]), "--target", str(llama_dir), "--eval", str(value_inputs["eval"]),
        "--out", str(out), "--budget", "60", "--by", "category", "--mix", "measured", "--values", str(values),
        "--seeds", "0", "1", *TOY])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "value.json").read_text())
    default = json.loads((out / "data" / "default_s0.jsonl").read_text().splitlines()[0])  # a row, to read back
    assert default["conversations"]
    counts = doc["settings"]["mix_counts"]
    assert sum(counts.values()) == 60 and counts["general_chat"] < counts["math"]
    assert [d["name"] for d in doc["drafts"]] == ["default_s0", "default_s1", "measured_mix_s0", "measured_mix_s1"]
    pool = {json.loads(line)["id"]: json.loads(line)["meta"]["category"]
            for line in value_inputs["pool"].read_text().splitlines()}
    mixed = [json.loads(line)["id"] for line in (out / "data" / "measured_mix_s1.jsonl").read_text().splitlines()]
    assert {c: sum(pool[i] == c for i in mixed) for c in counts} == counts
    comparison = doc["mix_comparison"]
    assert set(comparison) == {"even", "odd", "mean"} and comparison["mean"]["low"] is not None
    assert doc["values"] == [] and "measured mix: " in result.stderr
    assert "verdict: the measured mix " in (out / "value.md").read_text()
    assert "verdict: the measured mix " in result.stdout


def test_the_checked_in_results_file_has_the_schema_the_writer_merges_into() -> None:
    path = Path(__file__).resolve().parents[2] / "docs" / "results" / "data_value.json"
    raw = json.loads(path.read_text())
    assert isinstance(raw["points"], list) and isinstance(raw["values"], list)
    for point in raw["points"]:
        assert {"samples", "mix", "per_set", "mean_accept_length", "draft_sha256", "device", "command"} <= set(point)
    for value in raw["values"]:
        MeasuredValue.model_validate(value)
    assert merge_results(raw, {"points": [], "values": []}) == raw


def _category_value(name: str, per_10k: float, low: float, high: float) -> dict[str, object]:
    return {"kind": "category", "name": name, "op": "remove", "budget": 60, "rows_swapped": 20, "seeds": 1,
            "noise_dof": 1, "mean": {"delta": per_10k / 500, "per_10k": per_10k, "low": low, "high": high},
            "run": "value run gpu (elsewhere)"}


def test_value_record_writes_a_finished_runs_values_into_this_catalog(tmp_path: Path) -> None:
    results = tmp_path / "data_value.json"
    results.write_text(json.dumps({"points": [], "values": [
        {**_category_value("general_chat", 0.1, -0.2, 0.4), "kind": "source", "name": "acme/chat"}]}))
    recorded = CliRunner().invoke(app, ["value-record", str(results)])
    assert recorded.exit_code == 0, recorded.output
    _seed_entry("acme/chat")
    listed = json.loads(CliRunner().invoke(app, ["catalog", "list", "--json"]).stdout)
    assert [m["run"] for m in listed[0]["measured"]] == ["value run gpu (elsewhere)"]
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"points": [], "values": []}))
    refused = CliRunner().invoke(app, ["value-record", str(empty)])
    assert refused.exit_code == 2 and "no measured values" in refused.stderr


def test_a_measured_mix_equal_to_the_default_is_not_trained(tmp_path: Path, llama_dir: Path,
                                                           value_inputs: dict[str, Path]) -> None:
    values = tmp_path / "values.json"
    values.write_text(json.dumps({"values": [_category_value("math", 0.5, -0.2, 1.2),
                                             _category_value("general_chat", -0.3, -0.9, 0.3)]}))
    result = CliRunner().invoke(app, [
        "value", "--data", str(value_inputs["pool"]), "--target", str(llama_dir), "--eval", str(value_inputs["eval"]),
        "--out", str(tmp_path / "mix"), "--budget", "60", "--by", "category", "--mix", "measured", "--values",
        str(values), *TOY])
    assert result.exit_code == 1 and "the measured mix is the default" in result.stderr
    assert not (tmp_path / "mix" / "runs").exists()
