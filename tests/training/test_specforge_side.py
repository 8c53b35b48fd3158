"""The SpecForge side-by-side's own logic (benchmarks/specforge_side.py), without SpecForge or a GPU: the draft it
trains is the recipe's for the real target, both trainers read the same layers, SpecForge's step plan meets the
token budget, a time limit stops a child's whole process group, and the report has the published schema.
The whole plan at toy size is `python benchmarks/specforge_side.py rehearse` (3 minutes on two idle cores, more
on shared ones: SpecForge's Triton loss runs in Triton's interpreter there), documented in
benchmarks/specforge/README.md."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from inference.decoding.hidden_states import default_aux_layers

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmark scripts import each other from their folder

import specforge_processes as processes  # noqa: E402
import specforge_recipe as recipe  # noqa: E402
import specforge_report as sf_report  # noqa: E402
import specforge_side as side  # noqa: E402

# datahunt's `target prepare` folder of SmolLM2-135M-Instruct (config.json as written on the GPU machine).
SMOLLM2 = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 1, "dtype": "bfloat16",
           "eos_token_id": 2, "head_dim": 64, "hidden_act": "silu", "hidden_size": 576, "intermediate_size": 1536,
           "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 9, "num_hidden_layers": 30,
           "num_key_value_heads": 3, "pad_token_id": 2, "rms_norm_eps": 9.999999747378752e-06,
           "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"}, "tie_word_embeddings": True,
           "vocab_size": 49152}


def test_the_real_target_gets_the_recipes_draft_config_and_a_toy_only_its_layers_and_vocab() -> None:
    template = json.loads(side.DRAFT_TEMPLATE.read_text())
    assert recipe.draft_config(template, SMOLLM2, 32000) == template
    toy = recipe.draft_config(template, {**SMOLLM2, "num_hidden_layers": 8}, 512)
    changed = {k for k in template if toy[k] != template[k]}
    assert changed == {"eagle_config", "draft_vocab_size"}
    assert toy["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]


def test_both_trainers_read_the_same_target_layers() -> None:
    for layers in (8, 24, 30):
        sf = recipe.sf_capture_layers(layers)
        assert recipe.datahunt_layers(sf) == default_aux_layers(layers).ids, layers
    with pytest.raises(SystemExit, match="3 distinct"):
        recipe.sf_capture_layers(6)


def test_weight_keys_follow_what_the_target_folder_stores() -> None:
    tied = {"model.embed_tokens.weight", "model.norm.weight"}
    assert recipe.weight_keys(tied) == ("model.embed_tokens.weight", "model.embed_tokens.weight")
    assert recipe.weight_keys(tied | {"lm_head.weight"}) == ("model.embed_tokens.weight", "lm_head.weight")
    with pytest.raises(SystemExit, match="no token embedding"):
        recipe.weight_keys({"lm_head.weight"})


def test_specforges_plan_meets_the_token_budget_in_whole_accumulation_windows() -> None:
    accum = recipe.accumulation(16384, 8, 283.2)  # the 16K rows' mean length
    assert accum == 7 and 8 * accum * 283.2 == pytest.approx(15859, abs=1)
    assert recipe.sf_total_steps(16000, 8, 7, 4) == 1142  # 2,000 micro-batches an epoch x 4 // 7
    assert recipe.sf_total_steps(15999, 8, 7, 4) == 1142 and recipe.sf_total_steps(48, 2, 3, 1) == 8
    assert recipe.accumulation(512, 2, 1000.0) == 1


def test_loop_seconds_count_only_the_steps_a_checkpoint_kept() -> None:
    logged = [(25, 100.0), (50, 110.0), (75, 120.0)]  # 0.4 s a step once running
    assert recipe.loop_seconds(logged, 0, 50, fallback=999.0) == pytest.approx(20.0)
    assert recipe.loop_seconds(logged, 50, 50, fallback=999.0) == 0.0
    assert recipe.loop_seconds(logged[:1], 0, 25, fallback=42.0) == 42.0
    assert recipe.loop_seconds(logged[:1], 0, 25, fallback=42.0, step_s=0.5) == pytest.approx(12.5)


def test_batch_stats_show_each_trainers_padding_and_specforges_uneven_weights() -> None:
    tokens = [100, 100, 100, 100, 400, 400, 400, 400]
    supervised = [50, 50, 50, 50, 100, 100, 100, 100]
    stats = recipe.batch_stats(tokens, supervised, sf_batch=2, sf_accum=2, budget=800)
    sf, dh = stats["specforge"], stats["datahunt"]
    assert dh["positions_per_real_token"] == 1.0 and dh["steps_per_epoch"] == 3  # 4 x 100 | 2 x 400 | 2 x 400
    assert sf["steps_per_epoch"] == 2 and sf["positions_per_real_token"] >= 1.0
    assert stats["supervised_share_of_tokens"] == 0.3
    same = recipe.batch_stats([100] * 8, [50] * 8, sf_batch=2, sf_accum=2, budget=800)["specforge"]
    assert same["supervised_share_of_positions"] == {"mean": 0.5, "cv": 0.0}
    assert same["positions_per_real_token"] == 1.0


def test_eval_pairs_are_the_tracked_greedy_answers_per_set_in_question_order() -> None:
    pairs = recipe.eval_pairs(side.EVAL_ANSWERS, 80)
    assert {k: len(v) for k, v in pairs.items()} == {"alpaca": 80, "gsm8k": 80, "humaneval": 79, "mt_bench": 79,
                                                      "qa": 80}
    two = recipe.eval_pairs(side.EVAL_ANSWERS, 2)
    assert all(len(v) == 2 and v == pairs[k][:2] for k, v in two.items())
    assert all(p and a for v in pairs.values() for p, a in v)


def test_a_time_limit_stops_the_childs_whole_group_and_step_lines_are_read(tmp_path: Path) -> None:
    script = ("import subprocess, sys, time\n"
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              "print(\"step 3: {'loss': 1.5, 'acc': 0.25}\", flush=True)\n"
              "time.sleep(60)\n")
    res = processes.run_child([sys.executable, "-c", script], {"PATH": "/usr/bin:/bin"}, 2.0, tmp_path / "child.log")
    assert res["stopped"] and res["rc"] != 0 and res["wall_s"] < 30
    assert [s for s, _ in res["steps"]] == [3] and res["last"] == {"step": 3, "loss": 1.5, "acc": 0.25}
    assert "step 3" in (tmp_path / "child.log").read_text()
    done = processes.run_child([sys.executable, "-c", "print('ok')"], {"PATH": "/usr/bin:/bin"}, 30.0,
                               tmp_path / "b.log")
    assert done["rc"] == 0 and not done["stopped"]
    counting = "import time\nfor i in range(1, 100):\n    print(f'step {i}: {{}}', flush=True)\n    time.sleep(0.2)\n"
    cut = processes.run_child([sys.executable, "-c", counting], {"PATH": "/usr/bin:/bin"}, 60.0, tmp_path / "c.log",
                         stop_at_step=3)
    assert cut["stopped"] and cut["rc"] != 0 and 3 <= cut["steps"][-1][0] < 10


def test_a_stop_request_reaches_the_running_child(tmp_path: Path) -> None:
    """The driver's own TERM (an outer `timeout`) must end its child, which runs in a process group of its own."""
    out: dict[str, Any] = {}
    cmd = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"]
    thread = threading.Thread(target=lambda: out.update(processes.run_child(cmd, {"PATH": "/usr/bin:/bin"}, 300.0,
                                                                       tmp_path / "c.log")))
    thread.start()
    try:
        for _ in range(100):
            if processes.RUNNING:
                break
            time.sleep(0.05)
        time.sleep(0.3)
        processes.request_stop()
        thread.join(30)
        assert not thread.is_alive() and out["stopped"] and out["rc"] != 0 and out["wall_s"] < 30
        assert not processes.RUNNING
    finally:
        processes.STOP.clear()


def _state(rehearsal: bool) -> dict[str, Any]:
    def per_set(al: float) -> dict[str, Any]:
        return {name: {"accept_length": al, "prompts": 2, "rounds": 10, "tokens": int(al * 10),
                       "per_position_accept": [0.5]} for name in ("alpaca", "qa")}

    return {"setup": {"samples": 16000, "rows_sha256": "ab", "target_layers": 30, "sf_capture_layers": [1, 14, 26],
                      "rehearsal": rehearsal, "env": {"device": "x"}, "settings": {}},
            "features": {"rows": 16000, "mean_tokens": 283.2, "seconds_all_calls": 150.0, "disk_gib": 19.6},
            "sf_train": {"steps": 1142, "train_s": 600.0, "tok_s": 30000.0, "tokens": 18_000_000, "wall_s": 700.0,
                         "plan": {"max_steps": 1142}, "calls": [], "last_log": {"step": 1142, "loss": 2.0}},
            "dh_train": {"steps": 1124, "train_s": 300.0, "tok_s": 60000.0, "tokens": 18_000_000, "config": {}},
            "eval_sf": per_set(2.0), "eval_dh": per_set(2.5)}


def test_the_report_has_the_published_schema_and_a_rehearsal_is_never_published(tmp_path: Path) -> None:
    args = argparse.Namespace(lr=5e-4, ttt=7, draft_vocab=32000, max_length=1024, k=5, eval_per_set=80,
                              sf_save_interval=100, w=str(tmp_path), publish=str(tmp_path / "pub.json"))
    doc = sf_report.build_report(_state(False), args)
    assert {"data", "samples", "target", "eval_sets", "specforge", "datahunt"} <= set(doc)
    for name in ("specforge", "datahunt"):
        assert {"accept_length", "per_set", "steps", "train_s", "tok_s", "config"} <= set(doc[name])
    assert doc["target"] == "SmolLM2-135M-Instruct" and doc["eval_sets"] == ["alpaca", "qa"]
    assert doc["specforge"]["accept_length"] == 2.0 and doc["datahunt"]["accept_length"] == 2.5
    assert doc["datahunt"]["mean_of_sets"] == 2.5 and doc["datahunt_published_16k"]["mean_of_sets"] == 1.7751
    assert doc["comparison"]["accept_length_datahunt_over_specforge"] == 1.25
    assert doc["specforge"]["tok_s_with_features"] == 24000.0 and doc["differences"]
    st = argparse.Namespace(data=_state(True))
    with pytest.raises(SystemExit, match="toy"):
        sf_report.report(args, st, 60.0)  # type: ignore[arg-type]
    assert not (tmp_path / "pub.json").exists()
