"""`datahunt capture` on tiny random DeepSeek-V3 (MLA + MoE) and Qwen2 targets: one process and two FSDP2-sharded
gloo ranks write the same cache; training from it exports a draft SGLang's command accepts; bad caches refused."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from tiny_models import WORDS
from typer.testing import CliRunner

from server.cli import app
from training.capture import CaptureConfig, run_capture
from training.offline_cache import CacheError, read_manifest, start_cache

ARCHS = ("deepseek_v3", "qwen2")


def _save_target(arch: str, folder: Path, tokenizer: Any) -> Path:
    """A random 6-layer target of `arch` (aux layers [2, 3, 5]), saved with the test tokenizer."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    common = {"vocab_size": len(tokenizer), "hidden_size": 64, "num_hidden_layers": 6, "num_attention_heads": 4,
              "max_position_embeddings": 256, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    if arch == "deepseek_v3":  # MLA (q and kv low-rank) + MoE (4 routed experts, 1 shared) past the first layer
        model: Any = DeepseekV3ForCausalLM(DeepseekV3Config(
            **common, intermediate_size=128, moe_intermediate_size=32, num_key_value_heads=4, n_shared_experts=1,
            n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1,
            kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(**common, intermediate_size=128, num_key_value_heads=2,
                                             tie_word_embeddings=True))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> dict[str, Path]:
    return {arch: _save_target(arch, tmp_path_factory.mktemp(arch), tokenizer) for arch in ARCHS}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = random.Random(0)
    rows = [{"id": f"r{i}", "conversations": [
        {"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))},
        {"role": "assistant", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 20)))}]}
        for i in range(20)]
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


SHARD_MB = "0.01"  # ~10 KB, ~20 tokens at 517 bytes each in bf16: the 20 rows fill several shards


@pytest.fixture(scope="module")
def caches(tmp_path_factory: pytest.TempPathFactory, targets: dict[str, Path], data: Path) -> dict[str, Any]:
    """Per architecture: the cache of one process, and of two gloo ranks with the target sharded (FSDP2)."""
    out: dict[str, Any] = {}
    datahunt = Path(sys.executable).parent / "datahunt"
    for arch, target in targets.items():
        single = tmp_path_factory.mktemp(f"{arch}_single")
        run_capture(CaptureConfig(data=data, target=target, out=single, shard_bytes=int(float(SHARD_MB) * 2**20),
                                  device="cpu"))
        sharded = tmp_path_factory.mktemp(f"{arch}_sharded")
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--no-python",
                   str(datahunt), "capture", "--data", str(data), "--target", str(target), "--out", str(sharded),
                   "--shard-mb", SHARD_MB, "--device", "cpu", "--shard-target"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
        summaries = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        out[arch] = {"single": single, "sharded": sharded, "summary": summaries[0]}
    return out


def _shards(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("shard_*"))


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_one_process_and_two_sharded_ranks_write_the_same_cache(arch: str, caches: dict[str, Any]) -> None:
    single, sharded, summary = caches[arch]["single"], caches[arch]["sharded"], caches[arch]["summary"]
    assert _shards(single) == _shards(sharded) and len(_shards(single)) >= 6  # >= 3 shards, each with a marker
    assert read_manifest(single) == read_manifest(sharded)
    assert read_manifest(single)["complete"] is True
    for name in [*(p for p in _shards(single) if p.endswith(".safetensors")), "target_head.safetensors"]:
        a, b = load_file(single / name), load_file(sharded / name)
        assert a.keys() == b.keys()
        for key in a:  # the same numbers, within bf16 rounding (in fact FSDP all-gathers the very weights)
            torch.testing.assert_close(a[key].float(), b[key].float(), rtol=1 / 128, atol=1e-3)
    # Each rank held about half of the target: its parameter shards and the (unsharded) buffers.
    whole = json.loads((single / "capture_runs.jsonl").read_text().splitlines()[0])["ranks"][0]["target_bytes_held"]
    held = [r["target_bytes_held"] for r in summary["ranks"]]
    assert len(held) == 2 and all(0.45 * whole < h < 0.6 * whole for h in held)


def _run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


@pytest.mark.slow
def test_training_from_the_sharded_cache_exports_a_draft_sglang_accepts(
        tmp_path: Path, caches: dict[str, Any], targets: dict[str, Path]) -> None:
    out = tmp_path / "run"
    done = _run("train", "--mode", "offline", "--cache", str(caches["deepseek_v3"]["sharded"]), "--target",
                str(targets["deepseek_v3"]), "--out", str(out), "--steps", "2", "--ttt-steps", "2",
                "--draft-vocab-size", "64", "--batch-size", "4", "--device", "cpu")
    assert done.exit_code == 0, done.output[-2000:]
    config = json.loads((out / "export" / "config.json").read_text())
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 2, 4]  # output-of-layer ids
    command = _run("sglang-command", "--target", str(targets["deepseek_v3"]), "--draft", str(out / "export"))
    assert command.exit_code == 0, command.output
    # DeepSeek's +1 rule adds 1 because the first id is 1: the server captures the inputs trained on.
    assert "--speculative-algorithm EAGLE3" in command.output and "captures the inputs of [2, 3, 5]" in command.output


@pytest.mark.slow
def test_a_cache_of_another_target_or_tokenizer_is_refused_in_one_line(
        tmp_path: Path, caches: dict[str, Any], targets: dict[str, Path], tokenizer: Any) -> None:
    cache = str(caches["deepseek_v3"]["single"])
    other = _run("train", "--mode", "offline", "--cache", cache, "--target", str(targets["qwen2"]),
                 "--out", str(tmp_path / "a"), "--device", "cpu")
    assert other.exit_code == 1 and "captured from another target" in other.output
    assert len(other.output.strip().splitlines()) == 1
    retemplated = tmp_path / "retemplated"
    shutil.copytree(targets["deepseek_v3"], retemplated)
    tokenizer.chat_template = tokenizer.chat_template + " "  # the same weights, another chat template
    try:
        tokenizer.save_pretrained(retemplated)
    finally:
        tokenizer.chat_template = tokenizer.chat_template[:-1]
    changed = _run("train", "--mode", "offline", "--cache", cache, "--target", str(retemplated),
                   "--out", str(tmp_path / "b"), "--device", "cpu")
    assert changed.exit_code == 1 and "another tokenizer" in changed.output
    assert len(changed.output.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_killed_capture_leaves_a_resumable_cache_never_a_short_one(
        tmp_path: Path, caches: dict[str, Any], targets: dict[str, Path], data: Path) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(caches["qwen2"]["single"], cache)
    # What a rank killed while writing shard 1 leaves: a partial file, no marker, a manifest never marked complete.
    (cache / "shard_00001.done").unlink()
    (cache / "shard_00001.safetensors").rename(cache / "shard_00001.safetensors.partial")
    train = ("train", "--mode", "offline", "--cache", str(cache), "--target", str(targets["qwen2"]),
             "--out", str(tmp_path / "run"), "--device", "cpu")
    refused = _run(*train)
    assert refused.exit_code == 1 and "is incomplete: 1 of" in refused.output and "shard_00001" in refused.output
    before = {p.name: p.stat().st_mtime_ns for p in cache.glob("shard_*.safetensors")}
    result = run_capture(CaptureConfig(data=data, target=targets["qwen2"], out=cache,
                                       shard_bytes=int(float(SHARD_MB) * 2**20), device="cpu"))
    assert result.written == 1 and result.skipped == result.shards - 1
    assert {p.name: p.stat().st_mtime_ns for p in cache.glob("shard_*.safetensors")
            if p.name in before} == before  # the finished shards were not written again
    torch.testing.assert_close(load_file(cache / "shard_00001.safetensors"),
                               load_file(caches["qwen2"]["single"] / "shard_00001.safetensors"))
    assert read_manifest(cache)["complete"] is True
    # A marker lost from a cache its manifest calls complete is still refused, not read short.
    (cache / "shard_00002.done").unlink()
    assert "is incomplete" in _run(*train).output
    # Another capture into the same folder is refused rather than mixed in.
    with pytest.raises(CacheError, match="holds a cache of another capture"):
        start_cache(cache, {**read_manifest(cache), "data_hash": "other"})


@pytest.mark.parametrize("args, message", [
    (["--aux-layers", "2,3"], "give three input-of-layer ids"),
    (["--aux-layers", "2,3,9"], "outside a 6-layer target"),
    (["--dtype", "fp8"], "bfloat16 or float32"),
])
def test_bad_capture_arguments_are_refused_in_one_line(tmp_path: Path, targets: dict[str, Path], data: Path,
                                                       args: list[str], message: str) -> None:
    done = _run("capture", "--data", str(data), "--target", str(targets["qwen2"]), "--out", str(tmp_path / "c"),
                "--device", "cpu", *args)
    assert done.exit_code != 0 and message in done.output and len(done.output.strip().splitlines()) == 1


def test_a_missing_target_or_a_cache_without_offline_mode_is_refused(tmp_path: Path, data: Path) -> None:
    missing = _run("capture", "--data", str(data), "--target", str(tmp_path / "nope"), "--out", str(tmp_path / "c"))
    assert missing.exit_code == 1 and "does not exist" in missing.output
    online = _run("train", "--cache", str(tmp_path), "--target", str(tmp_path), "--out", str(tmp_path / "r"))
    assert online.exit_code == 1 and "set mode offline" in online.output


@pytest.mark.slow
def test_two_ddp_ranks_train_from_one_cache(tmp_path: Path, caches: dict[str, Any], targets: dict[str, Path]) -> None:
    datahunt = Path(sys.executable).parent / "datahunt"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--no-python", str(datahunt),
               "train", "--mode", "offline", "--cache", str(caches["qwen2"]["sharded"]), "--target",
               str(targets["qwen2"]), "--out", str(tmp_path), "--batch-size", "2", "--ttt-steps", "2",
               "--draft-vocab-size", "64", "--device", "cpu", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    summaries = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(summaries) == 2 and {s["steps"] for s in summaries} == {5}  # 20 cached rows / 2 ranks / batch 2
    assert (tmp_path / "export" / "model.safetensors").is_file()
