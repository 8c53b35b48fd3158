"""Export a trained draft in the layout SGLang loads with `--speculative-algorithm EAGLE3`, and read it back.

The folder holds `config.json` (`architectures: ["LlamaForCausalLMEagle3"]`, sizes, `draft_vocab_size`,
`target_hidden_size`, `max_position_embeddings`, dtype, `eagle_config.eagle_aux_hidden_state_layer_ids`) and
`model.safetensors` with `fc.weight`, `midlayer.*`, `norm.weight`, `lm_head.weight`, `d2t`, `t2d` (the last
two left out of the vLLM layout of a draft over the target's whole vocab, which vLLM refuses). The token
embeddings are left out: SGLang and vLLM borrow the target's. The same ids mean other layers in the two
engines, so a folder is exported for one (`engine`): for SGLang the aux ids are written in the output-of-layer
convention starting at 1 (`[1, L//2-1, L-4]` for the default), which old and new SGLang both turn into the
same input-of-layer capture; for vLLM, which takes ids as given (id k = input of layer k), as input-of-layer
ids (`[2, L//2, L-3]`). Our own `datahunt` block records the input-of-layer ids and the engine, whatever the
layout; `convert_export` rewrites a folder for the other engine. Beside the weights goes `expectations.json`
(`core.draft_expectations`: what a watcher of the served draft needs; the engine and ids at once, the measured
acceptance and break-even once `eval-accept --record` ran; a rewrite for the other engine keeps those).
Nothing is written when a key is missing or mis-shaped: a checkpoint without `lm_head` silently accepts 1.00
tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, NotRequired, TypedDict

import torch
from safetensors.torch import load_file, save
from torch import Tensor

from core.draft_expectations import EXPECTATIONS_FILE
from inference.decoding.draft_model import DraftConfig, Eagle3Draft
from inference.decoding.hidden_states import AuxLayers
from training.atomic_files import OutputWriteError, UnsafePathError, remove_file, write_file
from training.errors import TrainingError
from training.expectations import carried_expectations, expectations_file_bytes
from training.model_config import DraftModelConfig

ARCHITECTURE = "LlamaForCausalLMEagle3"
WEIGHTS_FILE = "model.safetensors"
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
Engine = Literal["sglang", "vllm"]
ENGINES: tuple[Engine, ...] = ("sglang", "vllm")


class ExportError(TrainingError, ValueError):
    """A checkpoint with missing, extra or mis-shaped tensors, or an unreadable export folder."""


class EagleConfigBlock(TypedDict):
    """config.json's `eagle_config`: the aux layer ids in the layout of the engine the folder is for."""

    eagle_aux_hidden_state_layer_ids: list[int]
    use_aux_hidden_state: bool


class DatahuntRecord(TypedDict):
    """config.json's `datahunt` block (engines ignore it): the layers trained on, whatever the engine's layout."""

    aux_layer_ids_input_of_layer: list[int]
    engine: Engine
    target_num_hidden_layers: NotRequired[int]  # the trained-on target's depth, when known
    rendering: NotRequired[dict[str, str]]  # how its rows were rendered (training.data.Rendering), when known


class DraftConfigJson(TypedDict):
    """The config.json `export_draft` writes (`read_config` reads any draft's, ours or not, as raw JSON)."""

    architectures: list[str]
    model_type: str
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    num_hidden_layers: int
    hidden_act: str
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: None
    tie_word_embeddings: bool
    torch_dtype: str
    eagle_config: EagleConfigBlock
    datahunt: DatahuntRecord


def expected_shapes(cfg: DraftConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor SGLang's EAGLE-3 loader reads, with its shape."""
    h, hd = cfg.hidden_size, cfg.resolved_head_dim
    q, kv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    return {
        "fc.weight": (h, 3 * cfg.target_hidden_size),
        "midlayer.input_layernorm.weight": (h,),
        "midlayer.hidden_norm.weight": (h,),
        "midlayer.post_attention_layernorm.weight": (h,),
        "midlayer.self_attn.q_proj.weight": (q, 2 * h),
        "midlayer.self_attn.k_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.v_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.o_proj.weight": (h, q),
        "midlayer.mlp.gate_proj.weight": (cfg.intermediate_size, h),
        "midlayer.mlp.up_proj.weight": (cfg.intermediate_size, h),
        "midlayer.mlp.down_proj.weight": (h, cfg.intermediate_size),
        "norm.weight": (h,),
        "lm_head.weight": (cfg.draft_vocab_size, h),
        "d2t": (cfg.draft_vocab_size,),
        "t2d": (cfg.vocab_size,),
    }


def shape_problems(shapes: dict[str, tuple[int, ...]], cfg: DraftConfig) -> list[str]:
    """Return one message per missing, unexpected or mis-shaped tensor (empty when the set is right)."""
    expected = expected_shapes(cfg)
    problems = [f"missing {k} (expected {list(s)})" for k, s in expected.items() if k not in shapes]
    problems += [f"unexpected {k}" for k in shapes if k not in expected]
    problems += [
        f"{k} has shape {list(shapes[k])}, expected {list(s)}"
        for k, s in expected.items()
        if k in shapes and tuple(shapes[k]) != s
    ]
    return problems


def engine_layer_ids(layers: AuxLayers, engine: Engine) -> list[int]:
    """The `eagle_aux_hidden_state_layer_ids` that make `engine` capture `layers`: output-of-layer ids for
    SGLang (it adds 1), input-of-layer ids for vLLM (it takes them as given)."""
    if engine not in ENGINES:
        raise ExportError(f"unknown engine {engine!r}; one of {', '.join(ENGINES)}")
    return list(layers.as_output().ids if engine == "sglang" else layers.as_input().ids)


def config_json(cfg: DraftConfig, layers: AuxLayers, dtype: str, target_layers: int | None = None,
                engine: Engine = "sglang", rendering: dict[str, str] | None = None) -> DraftConfigJson:
    """The config.json an engine reads for an EAGLE-3 draft; our own block (which engines ignore) also records
    the depth of the target it was trained on, so a draft run on another target of the same width is refused,
    the engine whose layer-id layout the file holds, and how its training rows were rendered (reasoning mode,
    tool rendering), which evaluation renders its prompts with."""
    ours: DatahuntRecord = {"aux_layer_ids_input_of_layer": list(layers.as_input().ids), "engine": engine}
    if target_layers is not None:
        ours["target_num_hidden_layers"] = target_layers
    if rendering is not None:
        ours["rendering"] = dict(rendering)
    return {
        "architectures": [ARCHITECTURE],
        "model_type": "llama",
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.resolved_head_dim,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "vocab_size": cfg.vocab_size,
        "draft_vocab_size": cfg.draft_vocab_size,
        "target_hidden_size": cfg.target_hidden_size,
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": None,
        "tie_word_embeddings": False,
        "torch_dtype": dtype,
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": engine_layer_ids(layers, engine),
            "use_aux_hidden_state": True,
        },
        "datahunt": ours,
    }


def full_vocab(cfg: DraftConfig) -> bool:
    """True when the draft predicts over the target's whole vocab: its d2t is then the identity (all offsets 0,
    `training.vocab.build_draft_vocab` keeps ids sorted) and t2d all true."""
    return cfg.draft_vocab_size == cfg.vocab_size


def engine_weights(state: dict[str, Tensor], cfg: DraftConfig, engine: Engine) -> dict[str, Tensor]:
    """The tensors the `engine` layout holds. vLLM (0.32) makes no `draft_id_to_target_id` parameter when the
    draft's vocab is the target's whole vocab and refuses a `d2t` it cannot place; the identity maps are left
    out there, and put back for SGLang (whose loader reads them either way). A full-vocab d2t that is not the
    identity cannot be served by vLLM: ExportError."""
    if not full_vocab(cfg):
        return state
    if engine == "vllm":
        d2t = state.get("d2t")
        if d2t is not None and bool(d2t.ne(0).any()):
            raise ExportError("the draft predicts over the target's whole vocab but its d2t is not the identity: "
                              "vLLM reads no d2t for such a draft; export it for SGLang")
        return {k: v for k, v in state.items() if k not in ("d2t", "t2d")}
    return identity_vocab(state, cfg)


def identity_vocab(state: dict[str, Tensor], cfg: DraftConfig) -> dict[str, Tensor]:
    """`state` with the identity d2t and t2d of a full-vocab draft where a vLLM-layout folder left them out."""
    if not full_vocab(cfg) or ("d2t" in state and "t2d" in state):
        return state
    return {**state, "d2t": torch.zeros(cfg.draft_vocab_size, dtype=torch.int64),
            "t2d": torch.ones(cfg.vocab_size, dtype=torch.bool)}


def export_draft(draft: Eagle3Draft, layers: AuxLayers, folder: Path, dtype: str = "bfloat16",
                 target_layers: int | None = None, engine: Engine = "sglang",
                 rendering: dict[str, str] | None = None) -> Path:
    """Validate and write draft as a folder `engine` loads; raise ExportError (writing nothing) on mismatch.
    `target_layers`: the trained-on target's depth, recorded for `load_draft` to check; `rendering`: how the
    rows were rendered, recorded for evaluation."""
    if dtype not in DTYPES:
        raise ExportError(f"unknown dtype {dtype!r}; one of {sorted(DTYPES)}")
    state = {k: v for k, v in draft.state_dict().items() if not k.startswith("embed_tokens.")}
    return write_export(state, draft.cfg, layers, folder, dtype, target_layers, engine, rendering)


def convert_export(source: Path, out: Path, engine: Engine) -> Path:
    """Copy an exported draft to `out` with the layer-id layout of `engine`; the weights are copied as they are
    (but for a full-vocab draft's identity vocab maps, which only the SGLang layout holds: `engine_weights`).
    ExportError when the source does not record which layers it was trained on, or `out` is the source."""
    config = read_config(source)
    layers = aux_layers_of(config)
    if layers is None or not (config.get("datahunt") or {}).get("aux_layer_ids_input_of_layer"):
        raise ExportError(f"{source} does not record the layers it was trained on (no datahunt block): its ids "
                          "cannot be rewritten safely")
    if engine not in ENGINES:
        raise ExportError(f"unknown engine {engine!r}; one of {', '.join(ENGINES)}")
    if out.resolve() == source.resolve():
        raise ExportError(f"--out {out} is the source folder: write the {engine} layout beside it")
    weights = source / WEIGHTS_FILE
    if not weights.is_file():
        raise ExportError(f"{source} has no {WEIGHTS_FILE}")
    config["eagle_config"] = {**(config.get("eagle_config") or {}),
                              "eagle_aux_hidden_state_layer_ids": engine_layer_ids(layers, engine)}
    config["datahunt"] = {**config["datahunt"], "engine": engine}
    out.mkdir(parents=True, exist_ok=True)
    cfg = draft_config_from_json(config)
    if full_vocab(cfg):  # the identity vocab maps are in one layout and not in the other
        tensors = engine_weights(identity_vocab(load_file(str(weights)), cfg), cfg, engine)
        data = save(tensors, metadata={"format": "pt"})
    else:
        data = weights.read_bytes()
    try:  # as write_export: config.json, which readers require, goes last
        remove_file(out / "config.json")
        write_file(out / WEIGHTS_FILE, data)
        write_file(out / EXPECTATIONS_FILE, expectations_file_bytes(config, carried_expectations(source)))
        write_file(out / "config.json", json.dumps(config, indent=2).encode("utf-8"))
    except UnsafePathError:
        raise
    except OSError as exc:
        raise OutputWriteError(f"cannot write the export {out}: {exc.strerror or exc}") from None
    return out


def write_export(
    state: dict[str, Tensor], cfg: DraftConfig, layers: AuxLayers, folder: Path, dtype: str = "bfloat16",
    target_layers: int | None = None, engine: Engine = "sglang", rendering: dict[str, str] | None = None,
) -> Path:
    """Write config.json and model.safetensors from a state dict, after checking every key and shape."""
    problems = shape_problems({k: tuple(v.shape) for k, v in state.items()}, cfg)
    if problems:
        raise ExportError("refusing to export the draft: " + "; ".join(problems))
    target_dtype = DTYPES[dtype]
    tensors = {
        k: (v.to(torch.int64) if k == "d2t" else v.to(torch.bool) if k == "t2d" else v.to(target_dtype))
        .detach().cpu().contiguous()
        for k, v in engine_weights(state, cfg, engine).items()
    }
    # config.json is the export's commit record (`read_config` requires it): removed first, written last, each
    # file whole and never through a link, so a kill leaves no config.json beside half-new weights.
    folder.mkdir(parents=True, exist_ok=True)
    written = config_json(cfg, layers, dtype, target_layers, engine, rendering)
    config = json.dumps(written, indent=2).encode("utf-8")
    try:
        remove_file(folder / "config.json")
        write_file(folder / WEIGHTS_FILE, save(tensors, metadata={"format": "pt"}))
        write_file(folder / EXPECTATIONS_FILE, expectations_file_bytes(written))  # new weights: nothing measured yet
        write_file(folder / "config.json", config)
    except UnsafePathError:
        raise
    except OSError as exc:
        raise OutputWriteError(f"cannot write the export {folder}: {exc.strerror or exc}") from None
    return folder


def read_config(folder: Path) -> DraftModelConfig:
    """The config.json of an exported draft (ours or another's, every key it holds); ExportError when absent,
    unreadable or not a JSON object."""
    path = folder / "config.json"
    try:
        config: DraftModelConfig = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ExportError(f"cannot read draft config {path}: {exc}") from None
    if not isinstance(config, dict):
        raise ExportError(f"cannot read draft config {path}: not a JSON object")
    return config


def draft_config_from_json(config: DraftModelConfig) -> DraftConfig:
    """DraftConfig from an exported config.json."""
    try:
        return DraftConfig(
            hidden_size=config["hidden_size"],
            intermediate_size=config["intermediate_size"],
            num_attention_heads=config["num_attention_heads"],
            num_key_value_heads=config.get("num_key_value_heads", config["num_attention_heads"]),
            vocab_size=config["vocab_size"],
            draft_vocab_size=config.get("draft_vocab_size", config["vocab_size"]),
            target_hidden_size=config.get("target_hidden_size", config["hidden_size"]),
            max_position_embeddings=config.get("max_position_embeddings", 2048),
            rms_norm_eps=config.get("rms_norm_eps", 1e-6),
            rope_theta=config.get("rope_theta", 10000.0),
            head_dim=config.get("head_dim"),
        )
    except KeyError as exc:
        raise ExportError(f"draft config.json lacks {exc.args[0]!r}") from None


def aux_layers_of(config: DraftModelConfig) -> AuxLayers | None:
    """The aux layers an exported draft was trained with (our record first, else eagle_config as output ids)."""
    ours = (config.get("datahunt") or {}).get("aux_layer_ids_input_of_layer")
    if ours:
        return AuxLayers(_three(ours), "input")
    ids = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    return AuxLayers(_three(ids), "output") if ids else None


def _three(ids: list[int]) -> tuple[int, int, int]:
    """The three aux layer ids of a config.json; ExportError for another count (an EAGLE-3 draft fuses three)."""
    if len(ids) != 3:
        raise ExportError(f"draft config.json names {len(ids)} aux layer ids ({ids}); an EAGLE-3 draft has three")
    return ids[0], ids[1], ids[2]


def load_draft(folder: Path, embed_weight: Tensor, *, target_layers: int | None = None
               ) -> tuple[Eagle3Draft, AuxLayers]:
    """Read an exported draft back (fp32), with the target's embeddings; ExportError on any mismatch, a target
    of another depth (`target_layers`, when the export recorded its own) included."""
    config = read_config(folder)
    trained_on = (config.get("datahunt") or {}).get("target_num_hidden_layers")
    if target_layers is not None and trained_on is not None and trained_on != target_layers:
        raise ExportError(
            f"draft at {folder} was trained on a {trained_on}-layer target; the target given has {target_layers} "
            "layers, so its auxiliary hidden states are other layers' (acceptance would be meaningless): evaluate a "
            "draft with the target it was trained on")
    cfg = draft_config_from_json(config)
    layers = aux_layers_of(config)
    if layers is None:
        raise ExportError(f"{folder}/config.json has no eagle_config aux layer ids")
    state = identity_vocab(load_file(str(folder / WEIGHTS_FILE)), cfg)
    problems = shape_problems({k: tuple(v.shape) for k, v in state.items()}, cfg)
    if problems:
        raise ExportError(f"draft at {folder} is malformed: " + "; ".join(problems))
    expected = (cfg.vocab_size, cfg.hidden_size)
    if tuple(embed_weight.shape) != expected:
        raise ExportError(
            f"draft at {folder} was trained for a target with a {expected[0]}-token vocab and hidden size "
            f"{expected[1]}; the target given has {embed_weight.shape[0]} and {embed_weight.shape[1]}: "
            "evaluate a draft with the target it was trained on")
    draft = Eagle3Draft(cfg)
    draft.load_state_dict({**state, "embed_tokens.weight": embed_weight}, strict=True)
    return draft.float(), layers
