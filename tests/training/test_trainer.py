"""Training end to end on a tiny target: a trained draft beats an untrained one; checkpoints, resume, offline."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_models import make_gemma, regenerate

from inference.decoding.draft_model import Eagle3Draft
from inference.decoding.hidden_states import target_embeddings
from training.accept import evaluate_acceptance
from training.config import make_config
from training.data import load_conversations
from training.export import load_draft
from training.trainer import load_target, train


def _prompts(tokenizer: Any, path: Path) -> list[list[int]]:
    return [tokenizer.apply_chat_template([t for t in turns if t["role"] == "user"], tokenize=True,
                                          add_generation_prompt=True)["input_ids"]
            for _, turns in load_conversations(path)]


def test_trained_draft_accepts_clearly_more_than_an_untrained_one(
    trained_run: Any, llama_dir: Path, regenerated_data: dict[str, Path], tokenizer: Any
) -> None:
    _cfg, result = trained_run
    assert result.steps == 150 and result.vocab_coverage > 0.99
    target, _ = load_target(llama_dir, torch.device("cpu"))
    draft, layers = load_draft(result.export_dir, target_embeddings(target))
    prompts = _prompts(tokenizer, regenerated_data["heldout"])
    eos = {tokenizer.eos_token_id}
    trained = evaluate_acceptance(target, draft, layers, prompts, max_new=24, k=4, eos=eos)
    torch.manual_seed(1)
    untrained_draft = Eagle3Draft(draft.cfg)
    untrained_draft.embed_tokens.weight.data.copy_(draft.embed_tokens.weight)
    untrained_draft.set_vocab(draft.d2t, draft.t2d)
    untrained = evaluate_acceptance(target, untrained_draft, layers, prompts, max_new=24, k=4, eos=eos)
    assert trained.identical and untrained.identical
    assert untrained.accept_length < 1.2
    assert trained.accept_length > untrained.accept_length + 0.4, (trained.as_dict(), untrained.as_dict())
    assert trained.position_rates[0] > 0.3


def test_every_checkpoint_carries_its_run_config(trained_run: Any) -> None:
    cfg, _ = trained_run
    folders = sorted((cfg.out / "checkpoints").glob("step_*"))
    assert [f.name for f in folders] == ["step_0000100", "step_0000150"]
    saved = json.loads((folders[-1] / "train_config.json").read_text())
    assert saved["ttt_steps"] == 4 and saved["draft_vocab_size"] == 150


def test_resume_continues_from_the_newest_checkpoint(tmp_path: Path, llama_dir: Path,
                                                     regenerated_data: dict[str, Path]) -> None:
    base = {"data": str(regenerated_data["train"]), "target": str(llama_dir), "out": str(tmp_path),
            "draft_vocab_size": 150, "ttt_steps": 2, "batch_size": 4, "device": "cpu", "save_every": 2}
    first = train(make_config({**base, "max_steps": 2}))
    state_2 = torch.load(tmp_path / "checkpoints/step_0000002/state.pt", weights_only=True)
    second = train(make_config({**base, "max_steps": 4}))
    assert (first.steps, second.steps) == (2, 4)
    state_4 = torch.load(tmp_path / "checkpoints/step_0000004/state.pt", weights_only=True)
    assert state_4["scheduler"]["last_epoch"] == 4  # the schedule continued, not restarted
    assert not torch.equal(state_2["draft"]["fc.weight"], state_4["draft"]["fc.weight"])


def test_offline_mode_trains_from_cached_shards(tmp_path: Path, llama_dir: Path,
                                                regenerated_data: dict[str, Path]) -> None:
    cfg = make_config({"data": str(regenerated_data["heldout"]), "target": str(llama_dir), "out": str(tmp_path),
                       "draft_vocab_size": 100, "ttt_steps": 2, "batch_size": 4, "max_steps": 3,
                       "device": "cpu", "mode": "offline"})
    result = train(cfg)
    assert result.steps == 3 and result.loss == result.loss  # finite, not NaN
    assert list((tmp_path / "hidden_cache").glob("*/shard_00000.safetensors"))


def test_the_control_run_trains_on_the_original_answers(tmp_path: Path, llama_dir: Path) -> None:
    rows = [{"id": str(i), "messages": [{"role": "user", "content": "w1 w2"}, {"role": "assistant", "content": "w9"}],
             "original_messages": [{"role": "user", "content": "w1 w2"},
                                   {"role": "assistant", "content": f"w{i} w{i + 1} w{i + 2}"}]} for i in range(8)]
    data = tmp_path / "curated.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = make_config({"data": str(data), "target": str(llama_dir), "out": str(tmp_path / "run"),
                       "messages_field": "original_messages", "draft_vocab_size": 20, "ttt_steps": 1,
                       "max_steps": 1, "device": "cpu"})
    result = train(cfg)
    vocab_dirs = list((tmp_path / "run" / "vocab_cache").iterdir())
    d2t = torch.load(vocab_dirs[0] / "vocab.pt", weights_only=True)["d2t"]
    assert result.steps == 1 and d2t.shape == (20,)


def test_a_gemma_target_trains_and_decodes_identically(tmp_path: Path, tokenizer: Any) -> None:
    target = make_gemma(len(tokenizer), layers=3)
    target.save_pretrained(tmp_path / "gemma")
    tokenizer.save_pretrained(tmp_path / "gemma")
    rows = regenerate(target, tokenizer, 16, new_tokens=8, seed=4)
    data = tmp_path / "gemma.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = make_config({"data": str(data), "target": str(tmp_path / "gemma"), "out": str(tmp_path / "run"),
                       "draft_vocab_size": 64, "ttt_steps": 2, "batch_size": 4, "max_steps": 4, "device": "cpu"})
    result = train(cfg)
    config = json.loads((result.export_dir / "config.json").read_text())
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 1, 1]  # inputs of [2, 2, 2]
    assert config["head_dim"] == 16 and config["rope_theta"] == 1000000.0
    assert config["torch_dtype"] == "float32"  # the target's declared dtype
    draft, layers = load_draft(result.export_dir, target_embeddings(target))
    torch.testing.assert_close(draft.embed_tokens.weight, target.get_input_embeddings()(torch.arange(len(tokenizer))))
    report = evaluate_acceptance(target, draft, layers, _prompts(tokenizer, data)[:3], max_new=8, k=2)
    assert report.identical


def _trained_pair(trained_run: Any, llama_dir: Path, data: dict[str, Path], tokenizer: Any) -> tuple[Any, ...]:
    """The tiny target, the trained draft, its layers, the held-out prompts and the eos set."""
    _, result = trained_run
    target, _ = load_target(llama_dir, torch.device("cpu"))
    draft, layers = load_draft(result.export_dir, target_embeddings(target))
    return target, draft, layers, _prompts(tokenizer, data["heldout"]), {tokenizer.eos_token_id}


def test_replayed_greedy_rounds_equal_the_kv_cached_decoders(
    trained_run: Any, llama_dir: Path, regenerated_data: dict[str, Path], tokenizer: Any
) -> None:
    """The batched replay walks the same rounds the decoder runs (a trained draft, so rounds vary)."""
    from training.accept import target_greedy
    from training.replay import replay_counts

    target, draft, layers, prompts, eos = _trained_pair(trained_run, llama_dir, regenerated_data, tokenizer)
    decoded = evaluate_acceptance(target, draft, layers, prompts, max_new=24, k=4, eos=eos)
    outputs = [target_greedy(target, p, 24, eos) for p in prompts]
    replayed = replay_counts(target, draft, layers, prompts, outputs, k=4, batch=5)
    assert decoded.accept_length > 1.3  # enough accepted drafts for the comparison to mean something
    assert (replayed.rounds, replayed.tokens) == (decoded.rounds, decoded.tokens)
    assert replayed.accepted == decoded.accepted and replayed.attempted == decoded.attempted


def test_the_one_graph_round_decoder_runs_the_same_rounds_as_the_eager_one(
    trained_run: Any, llama_dir: Path, regenerated_data: dict[str, Path], tokenizer: Any
) -> None:
    """The static-shape round (what a CUDA graph replays) emits the target's greedy output, round for round."""
    from inference.decoding.spec_graph import GreedyBaseline, GreedyRoundGraph
    from inference.decoding.speculative import RoundCounts

    target, draft, layers, prompts, eos = _trained_pair(trained_run, llama_dir, regenerated_data, tokenizer)
    eager = evaluate_acceptance(target, draft, layers, prompts, max_new=24, k=4, eos=eos)
    rounds = GreedyRoundGraph(target, draft, layers, k=4, max_len=max(map(len, prompts)) + 24, use_graph=False)
    baseline = GreedyBaseline(target, max_len=max(map(len, prompts)) + 30, use_graph=False, sync_every=5)
    counts = RoundCounts()
    for prompt in prompts:
        assert rounds.decode(prompt, 24, eos, counts) == baseline.decode(prompt, 24, eos)
    assert (counts.rounds, counts.tokens) == (eager.rounds, eager.tokens)
    assert counts.accepted == eager.accepted and counts.attempted == eager.attempted


def test_a_run_resumed_mid_epoch_ends_where_an_uninterrupted_one_does(tmp_path: Path, llama_dir: Path,
                                                                        regenerated_data: dict[str, Path]) -> None:
    """Killed after step 3 of an epoch and run again, training continues with batch 4 of that epoch (not batch
    1 again): the final weights equal those of a run that was never interrupted."""
    import shutil

    base = {"data": str(regenerated_data["train"]), "target": str(llama_dir), "draft_vocab_size": 150,
            "ttt_steps": 2, "batch_size": 4, "device": "cpu", "max_steps": 6, "lr": 3e-3}
    whole = train(make_config({**base, "out": str(tmp_path / "whole"), "save_every": 100}))
    assert whole.steps == 6
    cut = tmp_path / "cut"
    train(make_config({**base, "out": str(cut), "save_every": 3}))
    shutil.rmtree(cut / "checkpoints" / "step_0000006")  # as if killed between steps 3 and 6
    shutil.rmtree(cut / "export")
    train(make_config({**base, "out": str(cut), "save_every": 3}))
    a = torch.load(tmp_path / "whole/checkpoints/step_0000006/state.pt", weights_only=True)["draft"]
    b = torch.load(cut / "checkpoints/step_0000006/state.pt", weights_only=True)["draft"]
    for name in ("fc.weight", "lm_head.weight", "midlayer.self_attn.q_proj.weight"):
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0)


def test_an_unreadable_newest_checkpoint_falls_back_to_the_one_before(tmp_path: Path, llama_dir: Path,
                                                                       regenerated_data: dict[str, Path],
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """A checkpoint from another tool's crash (truncated file) is skipped with a warning, not fatal."""
    base = {"data": str(regenerated_data["train"]), "target": str(llama_dir), "out": str(tmp_path),
            "draft_vocab_size": 150, "ttt_steps": 2, "batch_size": 4, "device": "cpu", "save_every": 2}
    train(make_config({**base, "max_steps": 2}))
    broken = tmp_path / "checkpoints" / "step_0000003"
    broken.mkdir()
    (broken / "state.pt").write_bytes(b"PK\x03\x04 truncated")
    with caplog.at_level(logging.INFO, logger="training"):
        result = train(make_config({**base, "max_steps": 4}))
    assert result.steps == 4
    assert "skipping unreadable checkpoint" in caplog.text and "resumed from" in caplog.text
    assert caplog.text.split("resumed from", 1)[1].split()[0].endswith("step_0000002")
    assert not list(tmp_path.glob("checkpoints/*/state.pt.partial"))  # checkpoints land whole


def test_no_cudnn_attention_trains_the_same_weights_and_restores_the_backends(
        tmp_path: Path, llama_dir: Path, regenerated_data: dict[str, Path]) -> None:
    """`attention_kernels="no-cudnn"` only narrows which fused kernel a step may use: on CPU (no cuDNN) a run
    ends with the same weights, a fresh context is entered every step, and torch's setting is back afterwards."""
    from training.trainer import attention_kernels

    with attention_kernels("no-cudnn"):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled()
    base = {"data": str(regenerated_data["train"]), "target": str(llama_dir), "draft_vocab_size": 150,
            "ttt_steps": 2, "batch_size": 4, "device": "cpu", "max_steps": 3, "lr": 3e-3}
    runs = {}
    for choice in ("auto", "no-cudnn"):
        train(make_config({**base, "out": str(tmp_path / choice), "attention_kernels": choice}))
        runs[choice] = torch.load(tmp_path / choice / "checkpoints/step_0000003/state.pt", weights_only=True)["draft"]
    for name in ("fc.weight", "midlayer.self_attn.q_proj.weight"):
        torch.testing.assert_close(runs["auto"][name], runs["no-cudnn"][name], rtol=0, atol=0)
    with pytest.raises(Exception, match="attention_kernels"):
        make_config({**base, "out": str(tmp_path), "attention_kernels": "cudnn-only"})
