"""One draft, two engines: the layer-id layout each engine reads as trained, and refusals across the two.

SGLang adds 1 to `eagle_aux_hidden_state_layer_ids` (inputs of layers id+1); vLLM 0.32 takes them as given
(id k = the residual stream entering layer k). A draft trained on the inputs of [2, 16, 29] must therefore say
[1, 15, 28] to SGLang and [2, 16, 29] to vLLM, and each engine's preflight and launch line refuses the other's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from core.server_info import ServerInfo
from inference.decoding.draft_model import DraftConfig, Eagle3Draft
from inference.decoding.hidden_states import AuxLayers
from server.cli import app
from training.export import ExportError, convert_export, export_draft, load_draft
from training.launch import LaunchError, plan_vllm_launch
from training.preflight import check_aux_layers, read_draft, run_preflight

CFG = DraftConfig(hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
                  vocab_size=60, draft_vocab_size=40, target_hidden_size=24, max_position_embeddings=4096)
LAYERS = AuxLayers((2, 16, 29), "input")
TARGET = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 32, "hidden_size": 24,
          "vocab_size": 60, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}


def _draft() -> Eagle3Draft:
    torch.manual_seed(0)
    draft = Eagle3Draft(CFG)
    t2d = torch.zeros(60, dtype=torch.bool)
    t2d[10:50] = True
    draft.set_vocab(torch.full((40,), 10), t2d)
    return draft


def _vllm_server(draft_dir: Path) -> ServerInfo:
    return ServerInfo(engine="vllm", dev_mode=True, speculative_algorithm="EAGLE3",
                      speculative_draft_model_path=str(draft_dir), speculative_num_steps=5, context_length=4096,
                      dtype="bfloat16")


def test_each_engine_gets_the_ids_it_reads_as_the_trained_layers(tmp_path: Path) -> None:
    sglang = export_draft(_draft(), LAYERS, tmp_path / "sglang", engine="sglang")
    vllm = export_draft(_draft(), LAYERS, tmp_path / "vllm", engine="vllm")
    ids = {name: json.loads((folder / "config.json").read_text()) for name, folder in
           (("sglang", sglang), ("vllm", vllm))}
    assert ids["sglang"]["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 15, 28]
    assert ids["vllm"]["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 16, 29]
    assert ids["vllm"]["datahunt"] == {**ids["sglang"]["datahunt"], "engine": "vllm"}
    # Either folder loads back as the same draft trained on the same layers.
    for folder in (sglang, vllm):
        _, layers = load_draft(folder, _draft().embed_tokens.weight)
        assert layers.as_input() == LAYERS


def test_convert_rewrites_only_the_ids_and_keeps_the_weights_byte_for_byte(tmp_path: Path) -> None:
    source = export_draft(_draft(), LAYERS, tmp_path / "sglang")
    out = convert_export(source, tmp_path / "vllm", "vllm")
    assert (out / "model.safetensors").read_bytes() == (source / "model.safetensors").read_bytes()
    before, after = (json.loads((f / "config.json").read_text()) for f in (source, out))
    assert after["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 16, 29]
    assert {k: v for k, v in after.items() if k not in {"eagle_config", "datahunt"}} == \
        {k: v for k, v in before.items() if k not in {"eagle_config", "datahunt"}}
    back = convert_export(out, tmp_path / "again", "sglang")
    assert json.loads((back / "config.json").read_text())["eagle_config"] == before["eagle_config"]
    with pytest.raises(ExportError, match="is the source folder"):
        convert_export(source, source, "vllm")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    config = {k: v for k, v in before.items() if k != "datahunt"}
    (foreign / "config.json").write_text(json.dumps(config))
    with pytest.raises(ExportError, match="does not record the layers"):
        convert_export(foreign, tmp_path / "x", "vllm")


def test_a_full_vocab_draft_leaves_its_identity_maps_out_of_the_vllm_layout_only(tmp_path: Path) -> None:
    """vLLM 0.32 makes no d2t parameter for a draft over the target's whole vocab and refuses the weight; SGLang
    reads d2t either way. The maps go where they are read, and every layout loads back as the same draft."""
    from safetensors.torch import load_file

    full = DraftConfig(**{**CFG.__dict__, "draft_vocab_size": 60})
    torch.manual_seed(0)
    draft = Eagle3Draft(full)
    draft.set_vocab(torch.zeros(60, dtype=torch.long), torch.ones(60, dtype=torch.bool))
    sglang = export_draft(draft, LAYERS, tmp_path / "sglang", engine="sglang")
    vllm = export_draft(draft, LAYERS, tmp_path / "vllm", engine="vllm")
    assert {"d2t", "t2d"} <= set(load_file(str(sglang / "model.safetensors")))
    assert not {"d2t", "t2d"} & set(load_file(str(vllm / "model.safetensors")))
    converted = convert_export(sglang, tmp_path / "to_vllm", "vllm")
    assert load_file(str(converted / "model.safetensors")).keys() == load_file(str(vllm / "model.safetensors")).keys()
    back = convert_export(vllm, tmp_path / "to_sglang", "sglang")
    restored = load_file(str(back / "model.safetensors"))
    assert torch.equal(restored["d2t"], torch.zeros(60, dtype=torch.int64)) and bool(restored["t2d"].all())
    embed = draft.embed_tokens.weight
    weights = [load_draft(f, embed)[0].state_dict() for f in (sglang, vllm, back)]
    assert all(torch.equal(w[k], weights[0][k]) for w in weights[1:] for k in weights[0])
    vllm_check = [c for c in run_preflight(_vllm_server(vllm), read_draft(vllm), TARGET) if c.name == "vocab"]
    assert vllm_check and vllm_check[0].ok, vllm_check
    bent = Eagle3Draft(full)  # a full-vocab draft whose map is not the identity cannot be served by vLLM
    bent.d2t[0] = 1
    with pytest.raises(ExportError, match="d2t is not the identity"):
        export_draft(bent, LAYERS, tmp_path / "bent", engine="vllm")
    assert draft.cfg.draft_vocab_size == 60 and CFG.draft_vocab_size == 40  # the shared config is untouched


def test_the_preflight_reads_ids_the_way_the_server_engine_does(tmp_path: Path) -> None:
    sglang_dir = export_draft(_draft(), LAYERS, tmp_path / "sglang", engine="sglang")
    vllm_dir = convert_export(sglang_dir, tmp_path / "vllm", "vllm")
    sglang, vllm = read_draft(sglang_dir), read_draft(vllm_dir)
    assert check_aux_layers(sglang, TARGET).ok and check_aux_layers(vllm, TARGET, engine="vllm").ok
    wrong = check_aux_layers(sglang, TARGET, engine="vllm")
    assert not wrong.ok and "[1, 15, 28]" in wrong.detail and "export-draft" in wrong.detail
    assert "[2, 16, 29]" in wrong.detail
    other_way = check_aux_layers(vllm, TARGET)  # SGLang adds 1 to a vLLM layout: one layer too deep
    assert not other_way.ok and "[3, 17, 30]" in other_way.detail
    checks = run_preflight(_vllm_server(vllm_dir), vllm, TARGET)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    refused = {c.name: c for c in run_preflight(_vllm_server(sglang_dir), sglang, TARGET)}
    assert not refused["aux_layers"].ok


def test_without_dev_mode_the_unreported_draft_and_method_are_said_not_failed(tmp_path: Path) -> None:
    vllm_dir = export_draft(_draft(), LAYERS, tmp_path / "vllm", engine="vllm")
    server = ServerInfo(engine="vllm", dev_mode=False, speculative_algorithm="speculating",
                        speculative_num_steps=5, context_length=4096, dtype=None)
    checks = {c.name: c for c in run_preflight(server, read_draft(vllm_dir), TARGET)}
    assert checks["draft"].ok and "VLLM_SERVER_DEV_MODE" in checks["draft"].detail
    assert checks["algorithm"].ok and "does not report its method" in checks["algorithm"].detail
    assert checks["aux_layers"].ok


def test_vllm_launch_line_is_derived_from_the_draft_and_refuses_the_sglang_layout(tmp_path: Path) -> None:
    sglang_dir = export_draft(_draft(), LAYERS, tmp_path / "sglang")
    vllm_dir = convert_export(sglang_dir, tmp_path / "vllm", "vllm")
    plan = plan_vllm_launch("/models/t", vllm_dir, read_draft(vllm_dir), steps=4, target_config=TARGET)
    spec = json.loads(plan.argv[plan.argv.index("--speculative-config") + 1])
    assert spec == {"method": "eagle3", "model": str(vllm_dir), "num_speculative_tokens": 4}
    assert plan.argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert plan.argv[plan.argv.index("--dtype") + 1] == "bfloat16"
    for target_config in (TARGET, None):
        with pytest.raises(LaunchError, match=r"export-draft|SGLang's layout"):
            plan_vllm_launch("/models/t", sglang_dir, read_draft(sglang_dir), target_config=target_config)


def test_export_draft_and_vllm_command_on_the_command_line(tmp_path: Path) -> None:
    sglang_dir = export_draft(_draft(), LAYERS, tmp_path / "sglang")
    runner = CliRunner()
    converted = runner.invoke(app, ["export-draft", str(sglang_dir), "--engine", "vllm", "--out",
                                    str(tmp_path / "vllm")])
    assert converted.exit_code == 0 and "[2, 16, 29]" in converted.output
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(TARGET))
    line = runner.invoke(app, ["vllm-command", "--target", str(target), "--draft", str(tmp_path / "vllm")])
    assert line.exit_code == 0 and '"method": "eagle3"' in line.output
    refused = runner.invoke(app, ["vllm-command", "--target", str(target), "--draft", str(sglang_dir)])
    assert refused.exit_code == 1 and refused.output.startswith("error: ") and refused.output.count("\n") == 1
    bad = runner.invoke(app, ["export-draft", str(sglang_dir), "--engine", "trt", "--out", str(tmp_path / "t")])
    assert bad.exit_code == 2 and "sglang, vllm" in bad.output


def test_a_float32_draft_for_a_bfloat16_target_is_never_launched_in_float32(tmp_path: Path) -> None:
    """A draft exported in float32 (a CPU run before export followed the target's dtype) must not make either
    launch line serve the bf16 target in float32, at half speed: the target's declared dtype is proposed."""
    sglang_dir = export_draft(_draft(), LAYERS, tmp_path / "sglang", dtype="float32")
    vllm_dir = convert_export(sglang_dir, tmp_path / "vllm", "vllm")
    assert json.loads((sglang_dir / "config.json").read_text())["torch_dtype"] == "float32"
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(TARGET))
    runner = CliRunner()
    for command, draft in (("sglang-command", sglang_dir), ("vllm-command", vllm_dir)):
        done = runner.invoke(app, [command, "--target", str(target), "--draft", str(draft)])
        assert done.exit_code == 0, done.output
        line = done.stdout.strip().splitlines()[-1]  # the hint after it goes to stderr
        assert "--dtype bfloat16" in line and "--dtype float32" not in line, (command, line)
        assert "the draft is float32 and is cast to it" in done.output
        hub = runner.invoke(app, [command, "--target", "org/model", "--draft", str(draft)])
        if command == "sglang-command":  # without the target's config: no --dtype rather than float32
            assert hub.exit_code == 0 and "--dtype" not in hub.stdout.strip().splitlines()[-1], hub.output
