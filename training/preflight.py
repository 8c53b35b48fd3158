"""Preflight: compare a draft checkpoint with the SGLang server that will serve it, before any GPU time is spent.

Every misconfiguration below makes a draft useless without an error or a warning, so each is a named check
with an explanation: the EAGLE-vs-EAGLE3 flag (the server feeds 1x hidden instead of 3x, skips `fc`, accepts
about 1.0 tokens); `fc` not reading 3x the target's hidden size; a missing or mis-shaped `lm_head`; aux layer
ids the server will capture differently from training (the +1 convention, which also changed between SGLang
versions); `max_position_embeddings` below the serving context; draft and target dtypes differing; a draft
vocab that does not fit the target's. The checks are pure functions of three dicts (server info, the draft's
config and tensor shapes, the target's config), so they run on recorded answers in tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from training.export import WEIGHTS_FILE, ExportError, read_config


@dataclass(frozen=True)
class Check:
    """One named check: passed or not, and why, in words a person can act on."""

    name: str
    ok: bool
    detail: str


@dataclass
class DraftCheckpoint:
    """What the checks read from a draft folder: config.json, tensor shapes, and the vocab maps if present."""

    config: dict[str, Any]
    shapes: dict[str, tuple[int, ...]]
    d2t: Tensor | None = None
    t2d: Tensor | None = None


def read_draft(folder: Path) -> DraftCheckpoint:
    """Read config.json and the safetensors header (shapes only; d2t and t2d in full) of a draft folder."""
    from safetensors import safe_open

    config = read_config(folder)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ExportError(f"no safetensors weights in {folder} (expected {WEIGHTS_FILE})")
    shapes: dict[str, tuple[int, ...]] = {}
    maps: dict[str, Tensor] = {}
    for path in files:
        with safe_open(str(path), "pt") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                shapes[key] = tuple(f.get_slice(key).get_shape())
                if key in {"d2t", "t2d"}:
                    maps[key] = f.get_tensor(key)
    return DraftCheckpoint(config=config, shapes=shapes, d2t=maps.get("d2t"), t2d=maps.get("t2d"))


def _text_config(config: dict[str, Any] | None) -> dict[str, Any]:
    if not config:
        return {}
    return dict(config.get("text_config") or config)


def _server_args(server: dict[str, Any]) -> dict[str, Any]:
    return {**(server.get("server_args") or {}), **server}


def is_eagle3_draft(draft: DraftCheckpoint) -> bool:
    """An EAGLE-3 draft: its architecture says so, it names aux layers, or it has an `fc` reading 3 states."""
    arch = " ".join(draft.config.get("architectures") or [])
    eagle = draft.config.get("eagle_config") or {}
    return "eagle3" in arch.lower() or bool(eagle.get("eagle_aux_hidden_state_layer_ids")) or bool(
        eagle.get("use_aux_hidden_state"))


def check_algorithm(server: dict[str, Any], draft: DraftCheckpoint) -> Check:
    """The server must run EAGLE3 for an EAGLE-3 draft: only EAGLE3 makes the target capture aux states."""
    algo = str(_server_args(server).get("speculative_algorithm") or "").upper()
    eagle3 = is_eagle3_draft(draft)
    if not algo or algo == "NONE":
        return Check("algorithm", False, "the server runs without speculative decoding; start it with "
                     "--speculative-algorithm " + ("EAGLE3" if eagle3 else "EAGLE") + " and this draft")
    if eagle3 and algo == "EAGLE":
        return Check("algorithm", False, (
            "the draft is an EAGLE-3 draft but the server runs --speculative-algorithm EAGLE: the target will "
            "feed the draft its final hidden state only (1x hidden size instead of 3x), the draft's fc layer "
            "will be skipped by a shape guard, its proposals will be garbage, and acceptance length will sit at "
            "about 1.0 tokens with no error or warning. Restart the server with --speculative-algorithm EAGLE3."))
    if eagle3 and algo != "EAGLE3":
        return Check("algorithm", False, f"the draft is an EAGLE-3 draft but the server runs {algo}; use EAGLE3")
    if not eagle3 and algo == "EAGLE3":
        return Check("algorithm", False, "the server runs EAGLE3 but the draft is not an EAGLE-3 draft "
                     "(no LlamaForCausalLMEagle3 architecture, no eagle_config aux layers)")
    return Check("algorithm", True, f"server runs {algo}, matching the draft")


def check_fc_input(draft: DraftCheckpoint, target: dict[str, Any] | None) -> Check:
    """fc must read 3 x the target's hidden size (low || mid || high aux states)."""
    target_hidden = _text_config(target).get("hidden_size") or draft.config.get("target_hidden_size")
    fc = draft.shapes.get("fc.weight")
    if fc is None:
        return Check("fc_input", False, "the draft has no fc.weight: an EAGLE-3 draft fuses 3 target states in fc")
    if not target_hidden:
        return Check("fc_input", False, "the target's hidden size is unknown (pass --target-config)")
    if fc[1] != 3 * int(target_hidden):
        return Check("fc_input", False, (
            f"fc.weight reads {fc[1]} features but the target's hidden size is {target_hidden}: an EAGLE-3 draft "
            f"needs 3 x {target_hidden} = {3 * int(target_hidden)} (low, mid and high aux states); this draft was "
            "trained for a different target"))
    return Check("fc_input", True, f"fc reads 3 x {target_hidden} = {fc[1]}")


def check_lm_head(draft: DraftCheckpoint) -> Check:
    """lm_head must be present and shaped [draft_vocab, hidden]; without it SGLang accepts 1.00 silently."""
    shape = draft.shapes.get("lm_head.weight")
    expected = (draft.config.get("draft_vocab_size") or draft.config.get("vocab_size"), draft.config.get("hidden_size"))
    if shape is None:
        return Check("lm_head", False, "the checkpoint has no lm_head.weight: SGLang loads it anyway and the "
                     "draft accepts exactly 1.00 tokens; re-export the draft")
    if tuple(shape) != expected:
        return Check("lm_head", False, f"lm_head.weight is {list(shape)}, expected [draft_vocab_size, hidden] = "
                     f"{list(expected)}")
    return Check("lm_head", True, f"lm_head {list(shape)}")


def server_capture(config_ids: list[int] | None, num_layers: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Input-of-layer ids SGLang captures, under (older rule: always +1, current rule: +1 only if first is 1).

    Without ids in the draft's eagle_config, SGLang falls back to its default [2, L//2, L-3] under both.
    """
    if not config_ids:
        default = (2, num_layers // 2, num_layers - 3)
        return default, default
    older = tuple(i + 1 for i in config_ids)
    current = older if config_ids[0] == 1 else tuple(config_ids)
    return older, current


def check_aux_layers(draft: DraftCheckpoint, target: dict[str, Any] | None) -> Check:
    """The layers the server will capture must be the layers the draft was trained on, on any SGLang version."""
    num_layers = _text_config(target).get("num_hidden_layers")
    if not num_layers:
        return Check("aux_layers", False, "the target's layer count is unknown (pass --target-config)")
    eagle_ids = (draft.config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    ours = (draft.config.get("datahunt") or {}).get("aux_layer_ids_input_of_layer")
    older, current = server_capture(eagle_ids, int(num_layers))
    # What the draft was trained on: our own record, else what the ids meant when the draft was written
    # (output-of-layer ids, the convention SGLang's +1 was made for).
    trained = tuple(ours) if ours else older
    if max(older + current) >= int(num_layers):
        return Check("aux_layers", False, f"the server would capture inputs of layers {list(current)}, beyond a "
                     f"{num_layers}-layer target")
    if older != current:
        fix = (f"re-export with output-of-layer ids {[i - 1 for i in trained]}, which every version reads the "
               "same way" if trained[0] == 2 else
               "ids whose first output-of-layer id is not 1 are read differently by every pair of versions: "
               "pin the SGLang version, or retrain on layers whose first input id is 2")
        return Check("aux_layers", False, (
            f"eagle_aux_hidden_state_layer_ids {eagle_ids} mean different layers on different SGLang versions: "
            f"older servers add 1 (inputs of {list(older)}), current ones add 1 only when the first id is 1 "
            f"(inputs of {list(current)}); the draft was trained on inputs of {list(trained)}; {fix}"))
    if current != trained:
        return Check("aux_layers", False, (
            f"the server will capture the inputs of layers {list(current)} but the draft was trained on the "
            f"inputs of {list(trained)}: an off-by-one in the layer-id convention (input vs output of a layer) "
            "feeds the draft states it never saw"))
    return Check("aux_layers", True, f"server captures inputs of layers {list(current)}, as trained")


def serving_context(server: dict[str, Any], target: dict[str, Any] | None) -> int | None:
    """The context the server serves: its context_length, else the target's max_position_embeddings."""
    value = _server_args(server).get("context_length") or _text_config(target).get("max_position_embeddings")
    return int(value) if value else None


def check_context(server: dict[str, Any], draft: DraftCheckpoint, target: dict[str, Any] | None) -> Check:
    """The draft's max_position_embeddings must cover the serving context (2048 cripples long prompts)."""
    context = serving_context(server, target)
    draft_max = draft.config.get("max_position_embeddings")
    if context is None or draft_max is None:
        return Check("context", False, "serving context or the draft's max_position_embeddings is unknown")
    if int(draft_max) < context:
        return Check("context", False, (
            f"the draft's max_position_embeddings is {draft_max} but the server serves {context} tokens: "
            "the draft's position limit sits below the context and acceptance collapses on long prompts "
            f"(SGLang #6783); re-export with max_position_embeddings >= {context}"))
    return Check("context", True, f"draft covers {draft_max} >= serving context {context}")


_DTYPE_NAMES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "half": "float16",
                "float16": "float16", "fp32": "float32", "float": "float32", "float32": "float32"}


def _dtype(value: Any) -> str | None:
    text = str(value or "").lower().replace("torch.", "")
    return _DTYPE_NAMES.get(text)


def check_dtype(server: dict[str, Any], draft: DraftCheckpoint, target: dict[str, Any] | None) -> Check:
    """Draft and target must run in the same dtype (the server's, or the target's own when it says auto)."""
    served = _dtype(_server_args(server).get("dtype"))
    text = _text_config(target)
    served = served or _dtype((target or {}).get("torch_dtype") or (target or {}).get("dtype")
                              or text.get("torch_dtype") or text.get("dtype"))
    draft_dtype = _dtype(draft.config.get("torch_dtype") or draft.config.get("dtype"))
    if served is None or draft_dtype is None:
        return Check("dtype", False, f"cannot compare dtypes (server/target {served}, draft {draft_dtype})")
    if served != draft_dtype:
        return Check("dtype", False, f"the draft is {draft_dtype} but the target runs in {served}; export the "
                     f"draft in {served}")
    return Check("dtype", True, f"both {served}")


def check_vocab(draft: DraftCheckpoint, target: dict[str, Any] | None) -> Check:
    """The draft vocab must fit the target's: same full vocab, N <= V, d2t inside it, t2d consistent."""
    target_vocab = _text_config(target).get("vocab_size")
    if not target_vocab:
        return Check("vocab", False, "the target's vocab size is unknown (pass --target-config)")
    v = int(target_vocab)
    n = int(draft.config.get("draft_vocab_size") or draft.config.get("vocab_size") or 0)
    problems = []
    if int(draft.config.get("vocab_size") or 0) != v:
        problems.append(f"the draft's vocab_size {draft.config.get('vocab_size')} is not the target's {v}")
    if n > v:
        problems.append(f"draft_vocab_size {n} exceeds the target vocab {v}")
    if draft.d2t is not None:
        mapped = draft.d2t + torch.arange(draft.d2t.shape[0])
        if draft.d2t.shape[0] != n:
            problems.append(f"d2t has {draft.d2t.shape[0]} entries, draft_vocab_size is {n}")
        if mapped.numel() and (int(mapped.max()) >= v or int(mapped.min()) < 0):
            problems.append(f"d2t maps draft ids to target ids up to {int(mapped.max())}, outside the target "
                            f"vocab of {v}")
        if draft.t2d is not None and draft.t2d.shape[0] != v:
            problems.append(f"t2d covers {draft.t2d.shape[0]} ids, the target has {v}")
        elif draft.t2d is not None and not torch.equal(torch.nonzero(draft.t2d).flatten(), mapped):
            problems.append("d2t and t2d disagree (nonzero(t2d) != d2t + arange(N))")
    elif n < v:
        problems.append("the draft has a reduced vocab but no d2t/t2d maps")
    if problems:
        return Check("vocab", False, "; ".join(problems) + ": the draft was built for another tokenizer")
    return Check("vocab", True, f"draft vocab {n} of the target's {v}")


def run_preflight(server: dict[str, Any], draft: DraftCheckpoint, target: dict[str, Any] | None) -> list[Check]:
    """Every check, in the order a person would fix them."""
    return [
        check_algorithm(server, draft),
        check_fc_input(draft, target),
        check_lm_head(draft),
        check_aux_layers(draft, target),
        check_context(server, draft, target),
        check_dtype(server, draft, target),
        check_vocab(draft, target),
    ]
