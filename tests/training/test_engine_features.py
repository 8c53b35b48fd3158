"""Engine-fed features on the CPU: a hand-written fake engine answers as vLLM's extraction does (the residual
stream entering each extracted layer, the last layer's output before the final norm, in a folder named for its
layers), computed by a tiny transformers Llama; the cache written from it equals `datahunt capture`'s of the
same model, the online source equals the cache, and every answer that cannot be the row's is refused by name.
(The real engine is tested in tests/training/test_engine_capture_vllm.py.)"""

from __future__ import annotations

import fcntl
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny_models import make_llama, regenerate
from typer.testing import CliRunner

from core.engine_states import layers_folder, layers_in_path
from inference.decoding.hidden_states import AuxLayers
from server.cli import app
from training.capture import CaptureConfig, CaptureError, run_capture
from training.checkpoint_head import read_target_head
from training.engine_capture import EngineCaptureConfig, EngineFacts, run_engine_capture
from training.engine_features import (
    EngineFeatureError,
    EngineLayers,
    EngineRow,
    engine_feature_source,
    to_cache_row,
)
from training.offline_cache import open_cache, read_manifest

LAYERS = 8  # aux [2, 4, 5] by default, and 8 for the final state


class FakeEngine:
    """Answers rows as vLLM's extraction does, from a transformers model: states [T, layers, H] of the inputs of
    `extract` (L: the last layer's output before the norm), the ids it read, its greedy next token, the folder's
    layers. `corrupt` changes one thing of every answer."""

    def __init__(self, model: Any, extract: list[int], corrupt: str | None = None) -> None:
        self.model, self.extract, self.corrupt, self.rows = model, extract, corrupt, 0

    @torch.no_grad()
    def __call__(self, rows: Sequence[Sequence[int]]) -> list[EngineRow]:
        answers: list[EngineRow] = []
        for ids in rows:
            seen: dict[str, torch.Tensor] = {}

            def keep(module: Any, inputs: Any, output: Any, seen: dict[str, torch.Tensor] = seen) -> None:
                seen["pre"] = inputs[0]

            hook = self.model.model.norm.register_forward_hook(keep)
            out = self.model(input_ids=torch.tensor([list(ids)]), output_hidden_states=True)
            hook.remove()
            hs = [*out.hidden_states[:-1], seen["pre"]]  # input of layer i; index L: before the norm
            states = torch.stack([hs[i][0] for i in self.extract], dim=1)
            token_ids = list(ids)
            if self.corrupt == "ids":
                token_ids = token_ids[:-1]
            elif self.corrupt == "nan":
                states[0, 0, 0] = float("nan")
            nxt = int(out.logits[0, -1].argmax())
            if self.corrupt == "head":
                nxt = int(out.logits[0, -1].argmin())
            folder = tuple(self.extract) if self.corrupt != "layers" else (1, 4, 5, LAYERS)
            answers.append((states, token_ids, nxt, None if self.corrupt == "unnamed" else folder))
            self.rows += 1
        return answers


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> tuple[Path, Any]:
    folder = tmp_path_factory.mktemp("engine_target")
    model = make_llama(len(tokenizer), layers=LAYERS, seed=3)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory, target: tuple[Path, Any], tokenizer: Any) -> Path:
    path = tmp_path_factory.mktemp("engine_rows") / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in regenerate(target[1], tokenizer, 24, new_tokens=12,
                                                                             seed=5)))
    return path


def _layers() -> EngineLayers:
    return EngineLayers(AuxLayers((2, 4, 5), "input"), LAYERS)


def _facts() -> EngineFacts:
    return EngineFacts(name="vllm", url="http://engine", version="test", served=None)


def test_layers_folder_round_trip_and_engine_positions() -> None:
    assert layers_folder([30, 2, 15, 27, 15]) == "layers-2-15-27-30"
    assert layers_in_path("/srv/states/layers-2-15-27-30/cmpl-1.safetensors") == (2, 15, 27, 30)
    assert layers_in_path("/srv/states/cmpl-1.safetensors") is None
    layers = EngineLayers(AuxLayers((2, 15, 27), "input"), 30)
    assert layers.extract_ids == [2, 15, 27, 30] and layers.positions() == ([0, 1, 2], 3)


def test_a_cache_from_the_engine_equals_the_transformers_capture(tmp_path: Path, target: tuple[Path, Any],
                                                                 rows: Path) -> None:
    folder, model = target
    shard = 8 * 1024  # several shards
    theirs = run_capture(CaptureConfig(data=rows, target=folder, out=tmp_path / "tf", dtype="float32",
                                       device="cpu", shard_bytes=shard))
    ours = run_engine_capture(EngineCaptureConfig(data=rows, target=folder, out=tmp_path / "engine", dtype="float32",
                                                  shard_bytes=shard), _facts(), FakeEngine(model, [2, 4, 5, LAYERS]))
    assert (ours.rows, ours.tokens, ours.shards) == (theirs.rows, theirs.tokens, theirs.shards) and ours.shards > 2
    manifest = read_manifest(tmp_path / "engine")
    assert manifest["complete"] and manifest["engine"] == "vllm"
    assert manifest.get("engine_details", {})["layer_ids_checked"] is True
    for i in range(ours.shards):
        a, b = (load_file(str(tmp_path / side / f"shard_{i:05d}.safetensors")) for side in ("engine", "tf"))
        assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["loss_mask"], b["loss_mask"])
        torch.testing.assert_close(a["aux"], b["aux"], rtol=0, atol=0)  # the same tensors, taken as they are
        torch.testing.assert_close(a["final"], b["final"], rtol=1e-5, atol=1e-5)  # the norm applied again
    heads = [load_file(str(tmp_path / side / "target_head.safetensors")) for side in ("engine", "tf")]
    assert all(torch.equal(heads[0][k], heads[1][k]) for k in ("embed", "head", "norm"))


def test_a_killed_engine_capture_resumes_with_the_shards_it_finished(tmp_path: Path, target: tuple[Path, Any],
                                                                    rows: Path) -> None:
    folder, model = target
    cfg = EngineCaptureConfig(data=rows, target=folder, out=tmp_path / "c", dtype="float32", shard_bytes=8 * 1024,
                              rows_per_request_batch=2)
    engine = FakeEngine(model, [2, 4, 5, LAYERS])

    def dying(batch: Sequence[Sequence[int]]) -> list[EngineRow]:
        if engine.rows >= 9:
            raise ConnectionError("engine went away")
        return engine(batch)

    with pytest.raises(ConnectionError):
        run_engine_capture(cfg, _facts(), dying)
    done = sorted(p.name for p in (tmp_path / "c").glob("shard_*.done"))
    assert done and not list((tmp_path / "c").glob("*.partial"))
    assert not read_manifest(tmp_path / "c").get("complete")
    again = run_engine_capture(cfg, _facts(), FakeEngine(model, [2, 4, 5, LAYERS]))
    assert again.skipped == len(done) and again.written == again.shards - len(done)
    assert read_manifest(tmp_path / "c")["complete"]


@pytest.mark.parametrize(("corrupt", "message"), [
    ("ids", "the engine read"),
    ("nan", "non-finite"),
    ("layers", "extracts layers [1, 4, 5, 8], but this capture needs [2, 4, 5, 8]"),
    ("head", "not among this target head's top 5"),
])
def test_an_answer_that_cannot_be_the_rows_is_refused(tmp_path: Path, target: tuple[Path, Any], rows: Path,
                                                     corrupt: str, message: str) -> None:
    folder, model = target
    cfg = EngineCaptureConfig(data=rows, target=folder, out=tmp_path / "c", dtype="float32")
    with pytest.raises((CaptureError, EngineFeatureError), match=message.replace("[", r"\[").replace("]", r"\]")):
        run_engine_capture(cfg, _facts(), FakeEngine(model, [2, 4, 5, LAYERS], corrupt=corrupt))
    assert not list((tmp_path / "c").glob("shard_*.safetensors"))  # nothing written from a bad engine


def test_a_wrongly_shaped_answer_names_the_row(target: tuple[Path, Any]) -> None:
    folder, _ = target
    head = read_target_head(folder)
    answer: EngineRow = (torch.zeros(5, 3, 64), [1, 2, 3, 4, 5], None, None)
    with pytest.raises(EngineFeatureError, match=r"row r7: the engine's states are \[5, 3, 64\], expected"):
        to_cache_row(answer, [1, 2, 3, 4, 5], _layers(), head, 64, "r7")


def test_an_engine_that_does_not_name_its_layers_is_taken_on_trust_and_recorded(
        tmp_path: Path, target: tuple[Path, Any], rows: Path) -> None:
    folder, model = target
    run_engine_capture(EngineCaptureConfig(data=rows, target=folder, out=tmp_path / "c", dtype="float32"), _facts(),
                       FakeEngine(model, [2, 4, 5, LAYERS], corrupt="unnamed"))
    assert read_manifest(tmp_path / "c").get("engine_details", {})["layer_ids_checked"] is False


def test_the_online_source_gives_the_caches_states_and_logits(tmp_path: Path, target: tuple[Path, Any],
                                                              rows: Path) -> None:
    from training.engine_features import engine_head_target
    from training.tokenized import tokenizer_hash

    folder, model = target
    run_engine_capture(EngineCaptureConfig(data=rows, target=folder, out=tmp_path / "c", dtype="float32"), _facts(),
                       FakeEngine(model, [2, 4, 5, LAYERS]))
    head_target, tokenizer = engine_head_target(folder)
    cache = open_cache(tmp_path / "c", folder, tokenizer_hash(tokenizer))
    engine = FakeEngine(model, [2, 4, 5, LAYERS])
    source = engine_feature_source(folder, engine, AuxLayers((2, 4, 5), "input"), head_target, lookahead=2)
    batch = cache.rows()[:3]
    width = max(len(r.input_ids) for r in batch)
    ids = torch.zeros(3, width, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, r in enumerate(batch):
        ids[i, :len(r.input_ids)], attn[i, :len(r.input_ids)] = torch.tensor(r.input_ids), 1
    later = (ids[1:], attn[1:])
    source.prefetch([(ids, attn), later])
    aux, logits = source.lookup(ids, attn)
    want_aux, want_logits = cache.lookup(ids, attn)
    torch.testing.assert_close(aux, want_aux, rtol=0, atol=0)
    torch.testing.assert_close(logits, want_logits, rtol=1e-5, atol=1e-4)
    for _ in range(100):  # the announced next batch is fetched ahead of its step
        if engine.rows >= 5:
            break
        time.sleep(0.05)
    assert engine.rows == 5
    source.close()


def test_training_fed_by_the_engine_equals_training_from_its_cache(tmp_path: Path, target: tuple[Path, Any],
                                                                   rows: Path) -> None:
    from training.config import make_config
    from training.trainer import train

    folder, model = target
    run_engine_capture(EngineCaptureConfig(data=rows, target=folder, out=tmp_path / "c", dtype="float32"), _facts(),
                       FakeEngine(model, [2, 4, 5, LAYERS]))
    common = {"target": str(folder), "draft_vocab_size": 60, "ttt_steps": 3, "batch_size": 4, "max_steps": 6,
              "lr": 3e-3, "device": "cpu", "log_every": 1, "seed": 1}
    cached = train(make_config({**common, "mode": "offline", "cache": str(tmp_path / "c"),
                                "out": str(tmp_path / "cached")}))
    online = train(make_config({**common, "data": str(rows), "features_server": "http://engine",
                                "out": str(tmp_path / "online")}), features=FakeEngine(model, [2, 4, 5, LAYERS]))
    losses = [[json.loads(line)["loss"] for line in (tmp_path / run / "train_log.jsonl").read_text().splitlines()]
              for run in ("cached", "online")]
    assert len(losses[0]) == 6 and losses[0] == pytest.approx(losses[1], rel=1e-4)
    assert cached.steps == online.steps == 6


def test_the_head_is_read_from_a_sharded_checkpoint_without_loading_it(tmp_path: Path, target: tuple[Path, Any]
                                                                       ) -> None:
    folder, model = target
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    shards = {"model-00001-of-00002.safetensors": {k: v for k, v in state.items() if "layers" in k},
              "model-00002-of-00002.safetensors": {k: v for k, v in state.items() if "layers" not in k}}
    split = tmp_path / "split"
    split.mkdir()
    for name, tensors in shards.items():
        save_file(tensors, str(split / name))
    (split / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {k: name for name, tensors in shards.items() for k in tensors}}))
    (split / "config.json").write_text((folder / "config.json").read_text())
    head = read_target_head(split)
    assert torch.equal(head.embed, model.get_input_embeddings().weight.float())
    assert torch.equal(head.head, model.get_output_embeddings().weight)
    x = torch.randn(3, 64)
    torch.testing.assert_close(head.final_state(x), model.model.norm(x), rtol=1e-6, atol=1e-6)


def test_the_engine_launch_line_names_its_layers_and_picks_the_connector(tmp_path: Path) -> None:
    from inference.vllm_extract import PLUGINS, plan_extract_launch

    cpu = plan_extract_launch("/m", [2, 15, 27, 30], tmp_path, cpu=True, python="py", port=9)
    spec = json.loads(cpu.argv[cpu.argv.index("--speculative-config") + 1])
    transfer = json.loads(cpu.argv[cpu.argv.index("--kv-transfer-config") + 1])
    assert spec["method"] == "extract_hidden_states" and spec["num_speculative_tokens"] == 1
    assert spec["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 15, 27, 30]
    assert transfer["kv_connector_module_path"] == "datahunt_hidden_states" and transfer["kv_role"] == "kv_producer"
    assert transfer["kv_connector_extra_config"]["shared_storage_path"] == str(tmp_path / "layers-2-15-27-30")
    assert cpu.env == {"PYTHONPATH": str(PLUGINS)} and (PLUGINS / "datahunt_hidden_states.py").is_file()
    gpu = plan_extract_launch("/m", [2, 15, 27, 30], tmp_path, cpu=False, tensor_parallel=8)
    transfer = json.loads(gpu.argv[gpu.argv.index("--kv-transfer-config") + 1])
    assert transfer["kv_connector"] == "ExampleHiddenStatesConnector" and "kv_connector_module_path" not in transfer
    assert gpu.argv[gpu.argv.index("--tensor-parallel-size") + 1] == "8" and gpu.env == {}


def test_vllm_command_extract_prints_the_line_for_the_targets_layers(target: tuple[Path, Any]) -> None:
    folder, _ = target
    done = CliRunner().invoke(app, ["vllm-command", "--target", str(folder), "--extract", "--cpu"])
    assert done.exit_code == 0, done.output
    assert "layers-2-4-5-8" in done.stdout and "DatahuntCpuHiddenStatesConnector" in done.stdout
    bad = CliRunner().invoke(app, ["vllm-command", "--target", str(folder), "--extract", "--aux-layers", "2,9,5"])
    assert bad.exit_code == 2 and "outside a 8-layer target" in bad.output
    assert "Traceback" not in bad.output


def test_the_states_file_is_read_after_its_writer_releases_the_lock_then_removed(tmp_path: Path) -> None:
    from inference.hidden_states_client import read_states_file

    path = tmp_path / "layers-2-4-5-8" / "req.safetensors"
    path.parent.mkdir()
    lock = Path(str(path) + ".lock")
    fd = lock.open("w")
    fcntl.flock(fd, fcntl.LOCK_EX)  # the engine holds it while it writes

    def write_later() -> None:
        time.sleep(0.3)
        save_file({"hidden_states": torch.ones(3, 4, 8), "token_ids": torch.tensor([5, 6, 7])}, str(path))
        fd.close()

    writer = threading.Thread(target=write_later)
    writer.start()
    states, ids = read_states_file(path)
    writer.join()
    assert states.shape == (3, 4, 8) and ids == [5, 6, 7]
    assert not path.exists() and not lock.exists()  # the engine's disk stays bounded
