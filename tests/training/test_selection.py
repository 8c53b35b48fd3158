"""Acceptance-aware checkpoint selection and warm starts: the held-out estimate is replay's acceptance on greedy
rows, the exported draft is the best estimate's (not the last step's), and `init_draft` keeps its vocab map."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from inference.decoding.draft_model import Eagle3Draft
from inference.decoding.hidden_states import capture, target_embeddings
from training.accept import target_greedy
from training.config import ConfigError, make_config
from training.data import TokenizedRow, load_conversations, tokenize_rows
from training.draft_setup import new_draft
from training.export import export_draft, load_draft
from training.replay import replay_counts
from training.selection import BEST_FOLDER, Estimate, Selection, estimate_acceptance, read_best, save_best
from training.trainer import aux_layers, load_target, train
from training.vocab import build_draft_vocab, count_supervised


def _prompts(tokenizer: Any, path: Path) -> list[list[int]]:
    return [tokenizer.apply_chat_template([t for t in turns if t["role"] == "user"], tokenize=True,
                                          add_generation_prompt=True)["input_ids"]
            for _, turns in load_conversations(path)]


def _states(target: Any, layers: Any) -> Any:
    def states(ids: torch.Tensor, attn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        got = capture(target, ids, attn, layers)
        return got.aux, got.logits
    return states


def test_the_held_out_estimate_on_greedy_rows_is_replays_acceptance(
    trained_run: Any, llama_dir: Path, regenerated_data: dict[str, Path], tokenizer: Any
) -> None:
    """Rows whose answers are the target's greedy output: the estimate walks the rounds replay walks (and replay
    the decoder's, test_trainer), so the counts are equal, not merely close."""
    _, result = trained_run
    target, _ = load_target(llama_dir, torch.device("cpu"))
    draft, layers = load_draft(result.export_dir, target_embeddings(target))
    prompts = _prompts(tokenizer, regenerated_data["heldout"])
    outputs = [target_greedy(target, p, 24, {tokenizer.eos_token_id}) for p in prompts]
    rows = [TokenizedRow(id=str(i), input_ids=p + o, loss_mask=[0] * len(p) + [1] * len(o))
            for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))]
    estimated = estimate_acceptance(draft, _states(target, layers), rows, k=4, device=torch.device("cpu"), batch=5)
    replayed = replay_counts(target, draft, layers, prompts, outputs, k=4, batch=5)
    assert replayed.tokens / replayed.rounds > 1.3  # a trained draft: the rounds vary
    assert (estimated.rounds, estimated.tokens) == (replayed.rounds, replayed.tokens)
    assert estimated.accepted == replayed.accepted and estimated.attempted == replayed.attempted


def test_the_estimate_ranks_a_trained_draft_above_an_untrained_one(
    trained_run: Any, llama_dir: Path, regenerated_data: dict[str, Path], tokenizer: Any
) -> None:
    """Along sampled-like rows (a second answer per row), still the target's argmax decides: a trained draft
    estimates well above a random one."""
    _, result = trained_run
    target, _ = load_target(llama_dir, torch.device("cpu"))
    trained, layers = load_draft(result.export_dir, target_embeddings(target))
    untrained = Eagle3Draft(trained.cfg)
    untrained.embed_tokens.weight.data.copy_(trained.embed_tokens.weight)
    untrained.set_vocab(trained.d2t, trained.t2d)
    rows = tokenize_rows(tokenizer, load_conversations(regenerated_data["heldout"]), 256)
    cpu = torch.device("cpu")
    good = estimate_acceptance(trained, _states(target, layers), rows, k=4, device=cpu)
    bad = estimate_acceptance(untrained, _states(target, layers), rows, k=4, device=cpu)
    assert good.tokens / good.rounds > bad.tokens / bad.rounds + 0.4


def _base(data: Path, llama: Path, out: Path, **more: Any) -> dict[str, Any]:
    return {"data": str(data), "target": str(llama), "out": str(out), "draft_vocab_size": 150, "ttt_steps": 2,
            "batch_size": 8, "device": "cpu", "save_every": 100, "log_every": 2, **more}


def test_a_run_exports_its_best_estimate_and_logs_the_curve(tmp_path: Path, llama_dir: Path,
                                                            regenerated_data: dict[str, Path]) -> None:
    cfg = make_config(_base(regenerated_data["train"], llama_dir, tmp_path / "run", max_steps=12, lr=3e-3,
                            select_every=4, select_rows=16, select_k=4))
    result = train(cfg)
    log = [json.loads(line) for line in (cfg.out / "train_log.jsonl").read_text().splitlines()]
    estimates = [r for r in log if "estimated_accept_length" in r]
    assert [r["step"] for r in estimates] == [4, 8, 12]
    best = max(estimates, key=lambda r: (r["estimated_accept_length"], -r["step"]))
    assert result.selected is not None and result.selected.step == best["step"]
    assert json.loads((cfg.out / BEST_FOLDER / "best.json").read_text())["step"] == best["step"]
    kept = torch.load(cfg.out / BEST_FOLDER / "draft.pt", weights_only=True)
    exported = load_file(str(result.export_dir / "model.safetensors"))
    torch.testing.assert_close(exported["fc.weight"], kept["fc.weight"])
    assert (cfg.out / "loss_curve.png").stat().st_size > 0
    assert all("loss" in r for r in log if "estimated_accept_length" not in r)


def test_selection_keeps_the_better_draft_when_a_later_one_is_worse(
    trained_run: Any, tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path], tokenizer: Any
) -> None:
    """Measured at step 2 the trained draft, at step 4 a random one: the export takes step 2's weights."""
    _, result = trained_run
    target, _ = load_target(llama_dir, torch.device("cpu"))
    trained, layers = load_draft(result.export_dir, target_embeddings(target))
    worse = Eagle3Draft(trained.cfg)
    worse.embed_tokens.weight.data.copy_(trained.embed_tokens.weight)
    worse.set_vocab(trained.d2t, trained.t2d)
    rows = tokenize_rows(tokenizer, load_conversations(regenerated_data["heldout"]), 256)
    cfg = make_config(_base(regenerated_data["train"], llama_dir, tmp_path, select_every=2, select_rows=12,
                            select_k=4))
    selection = Selection(cfg, rows, _states(target, layers), total_steps=4, start_step=0)
    first = selection.after_step(2, trained)
    second = selection.after_step(4, worse)
    assert first is not None and second is not None and second.accept_length < first.accept_length
    exported = Eagle3Draft(trained.cfg)
    assert selection.restore_best(exported) == first
    torch.testing.assert_close(exported.lm_head.weight, trained.lm_head.weight)
    assert selection.after_step(3, worse) is None  # not a selection step


def test_a_resumed_run_forgets_a_best_measured_after_its_checkpoint(tmp_path: Path, trained_run: Any,
                                                                    llama_dir: Path) -> None:
    _, result = trained_run
    target, _ = load_target(llama_dir, torch.device("cpu"))
    draft, _ = load_draft(result.export_dir, target_embeddings(target))
    cfg = make_config({"data": str(tmp_path / "x.jsonl"), "target": str(llama_dir), "out": str(tmp_path)})
    save_best(tmp_path, draft, Estimate(step=30, accept_length=2.5, rounds=10, tokens=25), cfg)
    assert read_best(tmp_path) == Estimate(step=30, accept_length=2.5, rounds=10, tokens=25)
    assert read_best(tmp_path, up_to=30) is not None
    assert read_best(tmp_path, up_to=20) is None


# --- Warm start ------------------------------------------------------------------------------------------------
def _draft_with_other_map(llama_dir: Path, regenerated: Path, tokenizer: Any, out: Path, n: int = 150) -> Path:
    """An exported draft for the tiny Llama whose vocab map is NOT the one the data derives: the data's top ids
    but the last 40 swapped for ids the data never supervises."""
    target, _ = load_target(llama_dir, torch.device("cpu"))
    rows = tokenize_rows(tokenizer, load_conversations(regenerated), 2048)
    counts = count_supervised((r.input_ids, r.loss_mask) for r in rows)
    ranked = [i for i, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    unseen = [i for i in range(len(tokenizer)) if i not in counts]
    ids = sorted(ranked[: n - 40] + unseen[:40])
    used = torch.tensor(ids)
    torch.manual_seed(7)
    draft = new_draft(target, make_config({"data": str(regenerated), "target": str(llama_dir), "out": str(out),
                                           "draft_vocab_size": n}))
    t2d = torch.zeros(len(tokenizer), dtype=torch.bool)
    t2d[used] = True
    draft.set_vocab(used - torch.arange(n), t2d)
    return export_draft(draft, aux_layers(make_config({"data": "x", "target": str(llama_dir), "out": str(out)}),
                                          target.config.num_hidden_layers), out, dtype="float32",
                        target_layers=target.config.num_hidden_layers)


def test_a_warm_start_keeps_the_init_drafts_vocab_map(tmp_path: Path, llama_dir: Path, tokenizer: Any,
                                                      regenerated_data: dict[str, Path]) -> None:
    init = _draft_with_other_map(llama_dir, regenerated_data["train"], tokenizer, tmp_path / "init")
    before = load_file(str(init / "model.safetensors"))
    rows = tokenize_rows(tokenizer, load_conversations(regenerated_data["train"]), 2048)
    derived = build_draft_vocab(count_supervised((r.input_ids, r.loss_mask) for r in rows), len(tokenizer), 150)
    assert not torch.equal(derived.d2t, before["d2t"])  # the data would derive another map: the test can fail
    cfg = make_config(_base(regenerated_data["train"], llama_dir, tmp_path / "run", max_steps=2, lr=1e-9,
                            init_draft=str(init)))
    result = train(cfg)
    after = load_file(str(result.export_dir / "model.safetensors"))
    assert torch.equal(after["d2t"], before["d2t"]) and torch.equal(after["t2d"], before["t2d"])
    # row i stays row i
    torch.testing.assert_close(after["lm_head.weight"], before["lm_head.weight"], atol=1e-5, rtol=0)
    assert not (cfg.out / "vocab_cache").exists()  # no map was derived from the data
    assert 0 < result.vocab_coverage < 1  # the kept map's coverage of this data, reported honestly


def test_a_warm_start_that_only_gets_worse_exports_the_init_draft(tmp_path: Path, trained_run: Any,
                                                                  llama_dir: Path,
                                                                  regenerated_data: dict[str, Path]) -> None:
    """The init draft is measured at step 0; a fine-tune at a ruinous learning rate never beats it, so the
    export is the init's weights: the best checkpoint, not the last."""
    _, trained = trained_run
    cfg = make_config({**_base(regenerated_data["train"], llama_dir, tmp_path / "run", max_steps=4, lr=1.0,
                               select_every=2, select_rows=16, select_k=4),
                       "ttt_steps": 4, "init_draft": str(trained.export_dir)})
    result = train(cfg)
    log = [json.loads(line) for line in (cfg.out / "train_log.jsonl").read_text().splitlines()]
    estimates = {r["step"]: r["estimated_accept_length"] for r in log if "estimated_accept_length" in r}
    assert set(estimates) == {0, 2, 4} and estimates[4] < estimates[0]
    assert result.selected is not None and result.selected.step == 0
    init = load_file(str(trained.export_dir / "model.safetensors"))
    exported = load_file(str(result.export_dir / "model.safetensors"))
    torch.testing.assert_close(exported["fc.weight"], init["fc.weight"])
    last = torch.load(cfg.out / "checkpoints" / "step_0000004" / "state.pt", weights_only=True)["draft"]
    assert not torch.allclose(last["fc.weight"], init["fc.weight"])  # the last step is not what was exported


def test_a_warm_start_of_another_draft_vocab_size_is_refused(tmp_path: Path, trained_run: Any, llama_dir: Path,
                                                             regenerated_data: dict[str, Path]) -> None:
    _, trained = trained_run
    cfg = make_config(_base(regenerated_data["train"], llama_dir, tmp_path, max_steps=1, draft_vocab_size=100,
                            init_draft=str(trained.export_dir)))
    with pytest.raises(ConfigError, match="--draft-vocab-size 150"):
        train(cfg)
    cfg = make_config(_base(regenerated_data["train"], llama_dir, tmp_path, max_steps=1, aux_layer_ids=[1, 2, 3],
                            init_draft=str(trained.export_dir)))
    with pytest.raises(ConfigError, match="layers"):
        train(cfg)


def test_train_from_the_cli_selects_and_warm_starts(tmp_path: Path, llama_dir: Path, trained_run: Any,
                                                   regenerated_data: dict[str, Path]) -> None:
    from typer.testing import CliRunner

    from server.cli import app

    _, trained = trained_run
    result = CliRunner().invoke(app, [
        "train", "--data", str(regenerated_data["train"]), "--target", str(llama_dir), "--out", str(tmp_path),
        "--steps", "2", "--ttt-steps", "2", "--draft-vocab-size", "150", "--device", "cpu", "--lr", "1e-9",
        "--init-draft", str(trained.export_dir), "--select-every", "2", "--select-rows", "8", "--select-k", "3",
        "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["exported_step"] in {0, 2} and summary["estimated_accept_length"] > 1.3
    saved = json.loads((tmp_path / "checkpoints" / "step_0000002" / "train_config.json").read_text())
    assert saved["init_draft"] == str(trained.export_dir) and saved["select_k"] == 3
