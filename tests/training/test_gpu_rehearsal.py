"""The device plan (`benchmarks/gpu_scaling.sh`) rehearsed end to end on the CPU, at toy sizes.

Device time is scarce (30 minutes a session) and a stage that breaks on the GPU machine costs it: this runs
every stage the plan calls, through the shell script as the plan does (prepare from the trimmed test mirror,
setup, the real SmolLM2 target cut to 3 layers, regeneration with two answers, the curve with its head-init
choice, control, timing at k 5 and 3, sampling and overfit gate, the report), then the curve once more to
show a rerun trains nothing again, and a fresh machine's setup carrying the returned answers instead of
regenerating them. The numbers are a toy's; what is checked is that every stage leaves what
the next one and the published report need.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from training.curve.report import fit_runs

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_scaling.sh"
EVAL_SETS = {"alpaca", "humaneval", "gsm8k", "qa", "mt_bench"}
# About 3 minutes on two idle cores and up to five times that on a loaded machine: it runs alone, outside
# `make test`, in `make test-rehearsal` (CI's own step), under this limit.
RUN_LIMIT_S = 1800
TEST_LIMIT_S = 2400


def _run(*args: str, work: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WORK": str(work), "PY": sys.executable, "OMP_NUM_THREADS": "2", **extra}
    env.pop("OUT", None)
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=RUN_LIMIT_S, check=False)


@pytest.mark.slow
@pytest.mark.rehearsal
@pytest.mark.timeout(TEST_LIMIT_S)
def test_the_device_plan_runs_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    work = tmp_path / "work"
    done = _run("rehearse", work=work)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    raw = json.loads((work / "out" / "scaling_raw.json").read_text())

    assert raw["regen"]["done"] == 24 and raw["regen"]["failed"] == 0
    assert raw["regen_answers"]["answers"] == 2 and raw["regen_answers"]["rows"] == 48
    assert raw["eval_greedy"]["failed"] == 0 and raw["regen_greedy_overfit"]["done"] == 8
    assert raw["head_init"]["chosen"] in {"random", "target"}
    assert raw["overfit"]["samples"] == 8 and raw["overfit"]["accept_length"] >= 1.0
    assert "stopped" not in raw
    head = raw["head_init"]["chosen"]
    curve = [r for r in raw["runs"] if "source" not in r]  # the mirror's points (a mixed one follows)
    points = {(r["samples"], r["regenerated"]) for r in curve if r["head_init"] == head}
    assert points == {(8, True), (32, True), (8, False)}
    for samples, regenerated in points:
        sets = {r["eval_set"] for r in curve if (r["samples"], r["regenerated"], r["head_init"])
                == (samples, regenerated, head)}
        assert sets == EVAL_SETS, (samples, regenerated)
    top = [r for r in curve if r["samples"] == 32 and r["regenerated"] and r["head_init"] == head]
    for run in top:
        assert set(run["timed_by_k"]) == {"5", "3"}
        assert run["speedup"] > 0 and run["baseline_tok_s"] > 0 and run["speculative_tok_s"] > 0
        assert 1.0 <= run["accept_length_sampled"] <= 6.0
        assert len(run["per_position_accept"]) == 5
    # The 32-sample point needs the second answers: 24 prompts give 24 first answers, the rest are #s1 rows.
    assert all(r["distinct_training_prompts"] == 24 for r in top)

    # The target-written source: the whole target writes (its toy cut ends no turn), the kept prompts are
    # vetted and answered, and a mixed point trains on mirror and written prompts, marked as such.
    assert raw["write_prompts"]["requested"] == 6 and raw["write_prompts"]["failed"] == 0
    assert set(raw["write_prompts"]["per_category"]) == {"math", "reasoning"}
    kept = raw["vet_written"]["kept"]
    assert kept >= 1 and raw["regen_written"]["done"] == kept and raw["regen_written"]["failed"] == 0
    mixed = [r for r in raw["runs"] if r.get("source") == "mirror+target-written"]
    assert {r["eval_set"] for r in mixed} == EVAL_SETS and {r["samples"] for r in mixed} == {40}
    assert all(r["distinct_training_prompts"] == 24 + kept for r in mixed)  # every prompt's first answer first
    assert not any("speedup" in r for r in mixed)  # --points-only

    # RETURN_DRAFT=1 (the mixed call): the newest checkpoint's draft came back in three parts; joined, it is the
    # run's own export, weight for weight (its last checkpoint is its last step).
    import torch
    from safetensors.torch import load_file

    returned = work / "returned_out"
    parts = sorted(returned.glob("draft_part*"))
    assert len(parts) == 3 and (returned / "draft_run.txt").read_text().strip() == "regen_mixed_40_randomhead"
    joined = tmp_path / "joined.safetensors"
    joined.write_bytes(b"".join(p.read_bytes() for p in parts))
    ours, theirs = (load_file(str(joined)),
                    load_file(str(work / "runs/regen_mixed_40_randomhead/export/model.safetensors")))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert json.loads((returned / "draft_config.json").read_text())["architectures"] == ["LlamaForCausalLMEagle3"]

    # The distinct-prompt arm (issue #45): the curated set's prompts that no mirror or written prompt already is,
    # 12 of them answered once, and a point of each of its curves on the same eval sets.
    vetted = json.loads((work / "out" / "distinct_report.json").read_text())
    assert vetted["kept"] >= 12 and vetted["already_answered_ids"] == 24
    assert vetted["distinct_prompts_in_all"] == 24 + kept + vetted["kept"]
    assert raw["regen_distinct"]["done"] == 12 and raw["regen_distinct"]["failed"] == 0
    fresh = min(20, kept + 12)  # the mix's other half: written and new prompts (the mirror's rows fill what is not)
    for source, prompts in (("distinct", min(40, 36 + kept)), ("distinct-mix", fresh + min(24, 40 - fresh))):
        points = [r for r in raw["runs"] if r.get("source") == source]
        assert {r["eval_set"] for r in points} == EVAL_SETS and {r["samples"] for r in points} == {40}, source
        assert all(r["distinct_training_prompts"] == prompts for r in points), (source, points[0])
    report = json.loads((work / "report" / "scaling.json").read_text())
    assert len(report["runs"]) == len(raw["runs"])
    mirror_only = [r for r in report["runs"] if "source" not in r]  # the fit is the mirror curve's alone
    assert report["forecast"] == json.loads(json.dumps(fit_runs(mirror_only, 2.5)))
    assert all({"speculative_tok_s", "baseline_tok_s", "speedup"} <= set(r) for r in report["runs"])
    assert (work / "report" / "scaling.png").stat().st_size > 1000
    assert report["forecast"]  # fitted, or says why not

    again = _run("curve", "--scales", "8", "32", "--control-scales", "8", "--base", "8",
                 "--eval-per-set", "2", "--timed-ks", "5", "3", "--head-init", head, work=work)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "training.trainer step" not in again.stdout + again.stderr  # every point was skipped, none retrained
    assert json.loads((work / "out" / "scaling_raw.json").read_text())["runs"] == raw["runs"]

    # What `regen --answers 2` returned (answer 2, xz) and the first answers, tracked as a session leaves them,
    # seed a fresh machine: its regen stage regenerates neither.
    returned = sorted(p.name for p in (work / "out").glob("*.jsonl.xz"))
    assert returned == ["distinct_answers.jsonl.xz", "distinct_prompts.jsonl.xz", "regenerated_answers_s1.jsonl.xz",
                        "written_answers.jsonl.xz", "written_dropped.jsonl.xz", "written_prompts.jsonl.xz"]
    saved = tmp_path / "saved"
    saved.mkdir()
    for name in returned:
        (saved / name).write_bytes((work / "out" / name).read_bytes())
    rows = [line for line in (work / "regen" / "regenerated.jsonl").read_text().split("\n") if line]
    with gzip.open(saved / "regenerated_smollm2_16k.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in rows if "#s" not in json.loads(line)["id"]))
    fresh = tmp_path / "fresh"
    seeded = {"CARRY": str(work / "carry"), "SAVED_REGEN": str(saved), "FRESH_CURVE": "1"}
    assert _run("setup", work=fresh, **seeded).returncode == 0
    assert (fresh / "regen" / "regenerated.jsonl").read_text().count("\n") == 48
    assert (fresh / "written_rows.jsonl").read_text().count("\n") == kept
    assert (fresh / "written_regen" / "regenerated.jsonl").read_text().count("\n") == kept
    (fresh / "target").symlink_to(work / "target")
    again = _run("regen", "--rows", "24", "--answers", "2", "--max-tokens", "16", "--overfit-rows", "8",
                 "--eval-per-set", "2", "--eval-max-new", "12", "--max-prompt-tokens", "256", work=fresh, **seeded)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    fresh_raw = json.loads((fresh / "out" / "scaling_raw.json").read_text())
    assert fresh_raw["regen"]["carried"] and fresh_raw["regen_answers"]["carried"]
    assert fresh_raw["regen_greedy_overfit"]["done"] == 8  # the greedy sets are made on the machine, as planned
