"""`datahunt curve` at toy sizes on the CPU: two scales and the control end to end, a rerun that trains nothing,
a real SIGKILL between points and the resume, the fit against training.forecast, and bad input in one line."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from server.cli import app
from training.curve.evaluate import SetScore, load_eval_prompts
from training.curve.plan import CurveError, answer_order, make_settings, point_config, resolve_scales
from training.curve.report import fit_runs
from training.curve.runner import CurveDoc, PointResult, runs_of, save
from training.forecast import Fit, forecast
from training.forecast_text import forecast_lines

TOY = ["--epochs", "1", "--batch-size", "8", "--ttt-steps", "2", "--draft-vocab-size", "150", "--lr", "3e-3",
       "--max-new", "8", "--k", "3", "--device", "cpu"]


@pytest.fixture(scope="module")
def curve_inputs(tmp_path_factory: pytest.TempPathFactory, regenerated_data: dict[str, Path]) -> dict[str, Path]:
    """The eval prompts in two sets, and a curated set whose own answers (the control) differ from the target's."""
    folder = tmp_path_factory.mktemp("curve_inputs")
    held = [json.loads(line) for line in regenerated_data["heldout"].read_text().splitlines()]
    evals = folder / "eval.jsonl"
    evals.write_text("".join(json.dumps({"id": r["id"], "set": "even" if i % 2 == 0 else "odd",
                                         "conversations": r["conversations"]}) + "\n" for i, r in enumerate(held)))
    curated = folder / "samples.jsonl"
    rows = [json.loads(line) for line in regenerated_data["train"].read_text().splitlines()]
    curated.write_text("".join(json.dumps({
        "id": r["id"], "messages": r["conversations"][:1],
        "original_messages": [r["conversations"][0],
                              {"role": "assistant", "content": " ".join(reversed(r["conversations"][1]["content"]
                                                                                .split()))}]}) + "\n"
        for r in rows))
    return {"eval": evals, "curated": curated}


def _base(regenerated_data: dict[str, Path], llama_dir: Path, curve_inputs: dict[str, Path], out: Path) -> list[str]:
    return ["curve", "--data", str(regenerated_data["train"]), "--target", str(llama_dir),
            "--eval", str(curve_inputs["eval"]), "--out", str(out)]


def test_two_scales_and_the_control_end_to_end_and_a_rerun_trains_nothing(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path], curve_inputs: dict[str, Path]) -> None:
    out = tmp_path / "curve"
    command = [*_base(regenerated_data, llama_dir, curve_inputs, out), "--scales", "0.1", "0.2", "--control",
               "--originals", str(curve_inputs["curated"]), *TOY]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    doc = CurveDoc.model_validate_json((out / "curve.json").read_text())
    assert doc.complete and [p.name for p in doc.plan] == ["regen_30", "control_30", "regen_60", "control_60"]
    by_name = {p.name: p for p in doc.points}
    assert set(by_name) == {p.name for p in doc.plan}
    # The epochs rule: one pass over each point's rows, so 30 rows at batch 8 are 4 steps and 60 rows 8.
    assert by_name["regen_30"].stats["steps"] == 4 and by_name["regen_60"].stats["steps"] == 8
    assert "same epochs at every point" in doc.steps_rule
    for point in doc.points:
        assert set(point.sets) == {"even", "odd"} and all(s.prompts == 6 for s in point.sets.values())
        assert all(1.0 <= s.accept_length <= 4.0 and s.rounds > 0 for s in point.sets.values())
    # Nested subsets: the 30 regenerated rows are the first 30 of the 60; the control has the same prompts.
    regen30, regen60, control30 = (
        [json.loads(line) for line in (out / "data" / f"{name}.jsonl").read_text().splitlines()]
        for name in ("regen_30", "regen_60", "control_30"))
    assert regen60[:30] == regen30 and [r["id"] for r in control30] == [r["id"] for r in regen30]
    curated = {json.loads(line)["id"]: json.loads(line) for line in curve_inputs["curated"].read_text().splitlines()}
    assert all(r["conversations"] == curated[r["id"]]["original_messages"] for r in control30)
    assert all(r["conversations"] != curated[r["id"]]["original_messages"] for r in regen30)
    # Two sizes cannot be fitted: the curve says so instead of inventing a forecast.
    assert doc.fit is not None and "at least 3 data sizes" in doc.fit["error"]
    assert "fit: not made" in result.stdout
    summary = (out / "curve.md").read_text()
    assert "same epochs at every point" in summary and "Regenerated minus control" in summary
    assert (out / "curve.png").stat().st_size > 1000
    assert {(r["samples"], r["regenerated"]) for r in doc.runs} == {(30, True), (60, True), (30, False), (60, False)}

    logs = {p.name: (out / "runs" / p.name / "train_log.jsonl").read_text() for p in doc.points}
    again = CliRunner().invoke(app, command)
    assert again.exit_code == 0, again.output
    assert again.stderr.count("already measured, skipped") == 4 and "training\n" not in again.stderr
    assert {p.name: (out / "runs" / p.name / "train_log.jsonl").read_text() for p in doc.points} == logs
    assert CurveDoc.model_validate_json((out / "curve.json").read_text()).points == doc.points
    # Other settings in the same folder would mix two plans in one curve: refused, nothing touched.
    other = CliRunner().invoke(app, [*command[: -len(TOY)], "--epochs", "2", *TOY[2:]])
    assert "holds a curve made with other settings (epochs)" in _one_error_line(other)


def test_a_curve_killed_between_points_resumes_at_the_next_without_retraining(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path], curve_inputs: dict[str, Path]) -> None:
    """SIGKILL (no handler runs) while the second point trains: curve.json holds the first point whole, and the
    same command again skips it and measures the second."""
    out = tmp_path / "curve"
    datahunt = Path(sys.executable).parent / "datahunt"
    command = [str(datahunt), *_base(regenerated_data, llama_dir, curve_inputs, out), "--scales", "0.1", "0.4",
               *TOY]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + 240
    for line in process.stderr:
        seen.append(line)
        if re.search(r"point 2/2 regen_120 .*: training", line) or time.monotonic() > deadline:
            break
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL, "".join(seen)[-2000:]
    killed = CurveDoc.model_validate_json((out / "curve.json").read_text())
    assert [p.name for p in killed.points] == ["regen_30"] and not killed.complete
    first_log = (out / "runs" / "regen_30" / "train_log.jsonl").read_text()

    resumed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "point 1/2 regen_30 (30 rows): already measured, skipped" in resumed.stderr
    assert "point 1/2 regen_30 (30 rows): training" not in resumed.stderr
    doc = CurveDoc.model_validate_json((out / "curve.json").read_text())
    assert doc.complete and [p.name for p in doc.points] == ["regen_30", "regen_120"]
    assert doc.points[0] == killed.points[0]  # the finished point was kept, not measured again
    assert (out / "runs" / "regen_30" / "train_log.jsonl").read_text() == first_log
    assert doc.points[1].stats["steps"] == 15


def _point(name: str, samples: int, control: bool, als: dict[str, float]) -> PointResult:
    return PointResult(name=name, samples=samples, control=control, fraction=samples / 16000, distinct_prompts=samples,
                       stats={"steps": samples // 8, "final_loss": 1.0}, eval_wall_s=1.0,
                       sets={s: SetScore(prompts=10, accept_length=al, rounds=100, tokens=int(al * 100),
                                         per_position_accept=[0.5]) for s, al in als.items()})


def test_the_fit_is_training_forecast_on_the_regenerated_points_alone(tmp_path: Path) -> None:
    truth = Fit(a=3.0, b=5.0, c=0.4, sse=0.0)
    offsets = {"alpaca": 0.1, "gsm8k": -0.2, "qa": 0.05}
    points = [_point(f"regen_{n}", n, False, {s: truth.predict(n) + o for s, o in offsets.items()})
              for n in (400, 1600, 4800, 16000)]
    points += [_point(f"control_{n}", n, True, dict.fromkeys(offsets, 1.2)) for n in (400, 16000)]
    runs = runs_of(points)
    by_hand = [{"samples": n, "eval_set": s, "regenerated": True, "accept_length": truth.predict(n) + o}
               for n in (400, 1600, 4800, 16000) for s, o in offsets.items()]
    fit = fit_runs(runs, 2.5)
    expected = forecast(by_hand, target_accept=2.5)
    assert fit["fit"] == expected["fit"] and fit["samples_needed"] == expected["samples_needed"]
    assert fit["samples_needed_band_10_90"] == expected["samples_needed_band_10_90"]
    assert abs(fit["samples_needed"] - truth.needed(2.5)) / truth.needed(2.5) < 0.1
    lines = forecast_lines(fit, 2.5, rows_available=16000)
    assert f"AL 2.5 needs about {expected['samples_needed']:,} rows" in lines[-1]
    assert f"{expected['samples_needed'] / 16000:.1f}x the 16,000 rows" in lines[-1]
    assert "above the fitted ceiling" in forecast_lines(fit_runs(runs, 3.5), 3.5, rows_available=16000)[-1]

    # curve.json is a results file `datahunt forecast` reads: the same answer from the saved curve.
    settings = make_settings({"data": "d", "target": "t", "out": str(tmp_path), "eval": "e", "scales": [1.0]})
    doc = CurveDoc(settings=settings.model_dump(mode="json"), steps_rule=settings.rule_text(), evaluator="by hand",
                   rows_available=16000, prompts_available=16000, plan=[], points=points)
    save(doc, tmp_path)
    result = CliRunner().invoke(app, ["forecast", str(tmp_path / "curve.json"), "--target-accept", "2.5", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["samples_needed"] == expected["samples_needed"]
    assert (tmp_path / "curve_forecast.png").stat().st_size > 1000


def test_scales_answer_order_and_the_steps_rule(tmp_path: Path) -> None:
    assert resolve_scales([1.0, 0.25, 0.5], 400) == [100, 200, 400]
    assert resolve_scales([50, 0.5], 400) == [50, 200]
    for bad, words in (([0.0], "not above 0"), ([1.5], "neither a fraction"), ([500], "more rows than the 400"),
                       ([0.5, 200], "same row count twice"), ([0.001], "no row at all")):
        with pytest.raises(CurveError, match=words):
            resolve_scales(bad, 400)
    assert answer_order(["b", "a", "c"], {"a", "b", "c", "a#s1", "c#s1", "c#s2"}) == ["b", "a", "c", "a#s1", "c#s1",
                                                                                      "c#s2"]
    common = {"data": "d", "target": "t", "out": str(tmp_path), "eval": "e", "scales": [1.0],
              "train": {"batch_size": 4}}
    steps = point_config(make_settings({**common, "rule": "steps", "steps": 40}), tmp_path / "a.jsonl", tmp_path)
    epochs = point_config(make_settings({**common, "epochs": 3}), tmp_path / "a.jsonl", tmp_path)
    assert (steps.max_steps, epochs.max_steps, epochs.epochs, steps.batch_size) == (40, None, 3, 4)
    assert "40 steps each" in make_settings({**common, "rule": "steps", "steps": 40}).rule_text()


def _one_error_line(result: Any) -> str:
    assert result.exit_code != 0 and result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return str(lines[0])


def test_bad_input_ends_with_one_line(tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path],
                                      curve_inputs: dict[str, Path]) -> None:
    base = _base(regenerated_data, llama_dir, curve_inputs, tmp_path / "curve")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    cases = [
        ([*base, "--scales", "0", "0.5"], "scale 0 is not above 0"),
        ([*base, "--scales", "0.5", "1.5"], "scale 1.5 is neither a fraction"),
        ([*base, "--scales", "5000"], "scale 5000 asks for more rows than the 300"),
        ([*base, "--scales", "half"], "'half' is not a number"),
        ([*base[:2], str(tmp_path / "missing.jsonl"), *base[3:], "--scales", "0.5"], "missing.jsonl does not exist"),
        ([*base[:6], str(empty), *base[7:], "--scales", "0.5"], "no prompts to evaluate on"),
        ([*base, "--scales", "0.5", "--control"], "pass --originals CURATED"),
        ([*base, "--scales", "0.5", "--rule", "steps"], "the steps rule needs --steps N"),
        ([*base[:8], str(empty / "curve"), "--scales", "0.5"], f"{empty} is a file"),
    ]
    for command, words in cases:
        line = _one_error_line(CliRunner().invoke(app, command))
        assert words in line, (command, line)
    assert not (tmp_path / "curve" / "curve.json").exists()  # nothing was started


def test_eval_prompts_group_by_set_and_take_the_turns_before_the_answer(tmp_path: Path) -> None:
    path = tmp_path / "eval.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "set": "gsm8k", "prompt": "two plus two"},
        {"id": "b", "category": "code", "messages": [{"role": "user", "content": "hi"},
                                                    {"role": "assistant", "content": "hello"}]},
        {"id": "c", "text": "raw text"}, {"id": "d", "set": "gsm8k", "prompt": "three"}]) + "\n")
    prompts = load_eval_prompts(path, per_set=1)
    assert [(p.id, p.set) for p in prompts] == [("a", "gsm8k"), ("b", "code"), ("c", "all")]
    assert prompts[1].turns == (("user", "hi"),) and prompts[2].text == "raw text"
    path.write_text(json.dumps({"id": "x", "messages": [{"role": "assistant", "content": "only"}]}) + "\n")
    with pytest.raises(CurveError, match=r"eval.jsonl:1: a prompt row needs"):
        load_eval_prompts(path)
